"""A token store on Redis: a shared data plane for any number of processes and hosts.

:class:`RedisTokenStore` is a :class:`~tokcap_spec.protocols.TokenSink` and a
:class:`~tokcap_spec.protocols.TokenSource` at once, with the ``begin_call`` and
``retire``/``delete`` extensions and a strict fence, with the same semantics as the file store.
Every state change is one Lua script on the server, so fences, version bumps and the
conditional drop are atomic however many writers there are.
"""

from __future__ import annotations

import asyncio
import os
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import NoScriptError, RedisError

from reference._redis_scripts import (
    BEGIN_CALL,
    DELETE,
    DROP,
    FREEZE,
    MARK_INCOMPLETE,
    PUT,
    RETIRE,
    Script,
    rollout_keys,
    validate_namespace,
)
from reference._redis_url import ShownUrl
from tokcap_spec.errors import (
    ConflictingEntryError,
    CorruptStoreError,
    RolloutFrozenError,
    RolloutRetiredError,
    StoreWriteError,
)
from tokcap_spec.ids import validate_call_id, validate_rollout_id, validate_rollout_ids
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry, as_token_entry

__all__ = ["RedisTokenStore"]


def _whole(name: str, value: object, *, minimum: int) -> int:
    if type(value) is not int or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _seconds(name: str, value: object) -> float:
    if type(value) not in (int, float) or not 0 < value < float("inf"):  # type: ignore[operator]
        raise ValueError(f"{name} must be a positive finite number of seconds, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def _epoch() -> str:
    return os.urandom(8).hex()


class RedisTokenStore:
    """A durable, multi-process token sink and source kept in one Redis database.

    Built from plain JSON kwargs, so every spawned worker builds its own. Instances with the
    same ``url`` and ``namespace`` share their rollouts, in any process on any host.

    Promises, per rollout:

    - ``put`` of a new call before ``freeze`` stores the entry's canonical bytes and changes
      the version. An identical re-put is a no-op at any time. A different payload under a
      known call id durably marks the rollout incomplete and raises
      :class:`~tokcap_spec.errors.ConflictingEntryError`. A new call after ``freeze`` raises
      :class:`~tokcap_spec.errors.RolloutFrozenError` (strict fence).
    - ``mark_incomplete`` is sticky, changes the version and works after ``freeze``.
    - ``begin_call`` records an intent; an intent without an entry at freeze time makes the
      snapshot incomplete; a new intent after ``freeze`` raises ``RolloutFrozenError``.
    - ``freeze`` fences the rollout on the server, even one never written, and returns the same
      ``snapshot_id`` and ``version`` until the rollout changes.
    - ``drop`` retires only the exact frozen state, leaving a tombstone; anything else returns
      False and destroys nothing. ``retire`` tombstones whatever the state; ``delete`` forgets
      the id. After a tombstone every write and freeze raises
      :class:`~tokcap_spec.errors.RolloutRetiredError`.
    - A call returns only once the server replied (and, with ``wait_replicas``, once that many
      replicas acknowledged); a failure to reach the server raises
      :class:`~tokcap_spec.errors.StoreWriteError`, naming the URL without its password.
      How durable an acknowledged write is depends on the server's settings (see
      ``docs/redis.md``).

    ``tombstone_ttl_seconds`` lets tombstones expire; after that the id is no longer fenced.
    ``retries`` is how often the client reconnects and resends on a connection error; resending
    is safe because an identical re-put is a no-op.
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "tokcap",
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        socket_timeout: float = 10.0,
        retries: int = 3,
        tombstone_ttl_seconds: int | None = None,
    ) -> None:
        self._shown = ShownUrl.parse(url)
        try:
            parse_url(url)
        except ValueError as exc:
            raise ValueError(
                f"url {self._shown} is not a Redis URL redis-py accepts: "
                f"{self._shown.scrub(str(exc))}"
            ) from None
        self._url = url
        self.namespace = validate_namespace(namespace)
        self.wait_replicas = _whole("wait_replicas", wait_replicas, minimum=0)
        self.wait_timeout_ms = _whole("wait_timeout_ms", wait_timeout_ms, minimum=0)
        self.socket_timeout = _seconds("socket_timeout", socket_timeout)
        self.retries = _whole("retries", retries, minimum=0)
        ttl = tombstone_ttl_seconds
        self._ttl = "" if ttl is None else str(_whole("tombstone_ttl_seconds", ttl, minimum=1))
        # redis.asyncio connections belong to the loop that opened them.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        return f"RedisTokenStore(url={self._shown.text!r}, namespace={self.namespace!r})"

    def _client(self) -> aioredis.Redis:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = aioredis.Redis.from_url(
                self._url,
                decode_responses=False,
                socket_timeout=self.socket_timeout,
                socket_connect_timeout=self.socket_timeout,
                retry=Retry(ExponentialWithJitterBackoff(cap=0.5, base=0.01), self.retries),
            )
            self._clients[loop] = client
        return client

    async def _run(self, script: Script, rollout_id: str, args: Sequence[str | bytes]) -> Any:
        """Run ``script`` on the rollout's keys; wait for replicas after it when asked to."""
        keys = rollout_keys(self.namespace, rollout_id)
        try:
            client = self._client()
            if not self.wait_replicas:
                try:
                    return await client.evalsha(script.sha, len(keys), *keys, *args)
                except NoScriptError:
                    await client.script_load(script.source)
                    return await client.evalsha(script.sha, len(keys), *keys, *args)
            return await self._run_and_wait(client, script, rollout_id, keys, args)
        except RedisError as exc:
            raise StoreWriteError(
                f"redis store at {self._shown}: {script.name} on rollout {rollout_id!r} failed "
                f"({type(exc).__name__}: {self._shown.scrub(str(exc))}); expected the server's "
                "acknowledgement, so the call is not acknowledged (repeating it is safe)"
            ) from None

    async def _run_and_wait(
        self,
        client: aioredis.Redis,
        script: Script,
        rollout_id: str,
        keys: Sequence[str],
        args: Sequence[str | bytes],
    ) -> Any:
        # WAIT counts the writes of its own connection, and a pipeline keeps one connection.
        for _ in range(2):
            async with client.pipeline(transaction=False) as pipe:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
                pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
                result, replicas = await pipe.execute(raise_on_error=False)
            if isinstance(result, NoScriptError):
                await client.script_load(script.source)
                continue
            if isinstance(result, Exception):
                raise result
            if isinstance(replicas, Exception):
                raise replicas
            if replicas < self.wait_replicas:
                raise StoreWriteError(
                    f"redis store at {self._shown}: {script.name} on rollout {rollout_id!r} "
                    f"reached {replicas} replicas within {self.wait_timeout_ms} ms; expected "
                    f"{self.wait_replicas}. The primary has it, a failover may lose it"
                )
            return result
        raise StoreWriteError(
            f"redis store at {self._shown}: the server forgot script {script.name} twice in a "
            "row; expected it to keep a loaded script"
        )

    async def put(self, entry: TokenEntry) -> None:
        """Store ``entry`` under its rollout; see the class promises."""
        entry = as_token_entry(entry)
        rollout_id = validate_rollout_id(entry.rollout_id)
        call = validate_call_id(entry.model_call_id)
        # An entry that skipped validation would make every later freeze refuse the rollout.
        payload = entry.checked_json_bytes()
        outcome = await self._run(PUT, rollout_id, [call, payload, _epoch()])
        if outcome == b"retired":
            raise RolloutRetiredError.for_rollout(rollout_id)
        if outcome == b"frozen":
            raise RolloutFrozenError.for_call(rollout_id, call)
        if outcome == b"conflict":
            raise ConflictingEntryError(
                f"rollout {rollout_id!r} already holds a different entry for model_call_id "
                f"{call!r}; expected an identical re-put. The rollout is now marked incomplete"
            )

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        """Durably record that ``rollout_id`` lost evidence; every later freeze says incomplete."""
        rollout_id = validate_rollout_id(rollout_id)
        validate_call_id(model_call_id, allow_empty=True)
        if await self._run(MARK_INCOMPLETE, rollout_id, [_epoch()]) == b"retired":
            raise RolloutRetiredError.for_rollout(rollout_id)

    async def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        """Announce ``model_call_id``; a freeze before its entry arrives is incomplete."""
        rollout_id = validate_rollout_id(rollout_id)
        call = validate_call_id(model_call_id)
        outcome = await self._run(BEGIN_CALL, rollout_id, [call, _epoch()])
        if outcome == b"retired":
            raise RolloutRetiredError.for_rollout(rollout_id)
        if outcome == b"frozen":
            raise RolloutFrozenError.for_call(rollout_id, call)

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        """Fence ``rollout_id`` on the server and return a snapshot of everything it holds."""
        rollout_id = validate_rollout_id(rollout_id)
        reply = await self._run(FREEZE, rollout_id, [_epoch()])
        if reply[0] == b"retired":
            raise RolloutRetiredError.for_rollout(rollout_id)
        epoch, version, incomplete, *payloads = reply[1:]
        try:
            entries = tuple(TokenEntry.from_json_bytes(payload) for payload in payloads)
        except ValueError as exc:
            raise CorruptStoreError(
                f"redis store at {self._shown}: rollout {rollout_id!r} holds an entry that is "
                f"not a valid TokenEntry; expected canonical JSON ({type(exc).__name__})"
            ) from None
        return TokenCaptureSnapshot(
            rollout_id=rollout_id,
            entries=entries,
            incomplete=incomplete == b"1",
            snapshot_id=f"{epoch.decode()}-{int(version)}",
            version=int(version),
        )

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        """Retire ``rollout_id`` if it is frozen at exactly this snapshot; say whether it was."""
        rollout_id = validate_rollout_id(rollout_id)
        if type(version) is not int or not isinstance(snapshot_id, str):
            return False
        args = [snapshot_id, str(version), repr(time.time()), self._ttl]
        return bool(await self._run(DROP, rollout_id, args))

    async def retire(self, rollout_ids: Iterable[str]) -> None:
        """Remove and fence each rollout whatever its state; repeating it is a no-op."""
        for rollout_id in validate_rollout_ids(rollout_ids):
            await self._run(RETIRE, rollout_id, [repr(time.time()), self._ttl])

    async def delete(self, rollout_ids: Iterable[str]) -> None:
        """Remove each rollout's records and fence, so its id can be used again from nothing."""
        for rollout_id in validate_rollout_ids(rollout_ids):
            await self._run(DELETE, rollout_id, [])

    async def close(self) -> None:
        """Close this event loop's connection pool; idempotent, and loses nothing.

        Every acknowledged write was already on the server. The store stays usable: a later
        call opens a new pool.
        """
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()
