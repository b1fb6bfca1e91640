"""A token store on Redis: a shared data plane for any number of processes and hosts.

:class:`RedisTokenStore` is a :class:`~tokcap_spec.protocols.TokenSink` and a
:class:`~tokcap_spec.protocols.TokenSource` at once, with the ``begin_call`` and
``retire``/``delete`` extensions and a strict fence, with the same semantics as the file store.
Every state change is one Lua script on the server, so fences, version bumps and the
conditional drop are atomic however many writers there are. The same store runs on one node or
on a Redis Cluster.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import parse_url
from redis.exceptions import NoScriptError, RedisError, ResponseError

from reference._redis_client import (
    Client,
    ClientOptions,
    is_cluster_node,
    node_config,
    open_client,
    run_script,
)
from reference._redis_scripts import (
    BEGIN_CALL,
    DELETE,
    DROP,
    FREEZE,
    MARK_INCOMPLETE,
    PEEK,
    PUT,
    RETIRE,
    Script,
    rollout_keys,
    validate_namespace,
)
from reference._redis_settings import DURABILITY, SETTINGS, judge
from reference._redis_url import ShownUrl
from tokcap_spec.errors import (
    ConflictingEntryError,
    CorruptStoreError,
    RolloutFrozenError,
    RolloutRetiredError,
    StoreWriteError,
    TokenCaptureError,
)
from tokcap_spec.ids import validate_call_id, validate_rollout_id, validate_rollout_ids
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry, as_token_entry, refusing_invalid

__all__ = ["RedisTokenStore"]


_log = logging.getLogger(__name__)


class _WaitError(RedisError):
    """Fewer replicas than ``wait_replicas`` acknowledged a write in time."""


# One warning per server and durability level in a process, however many instances it builds.
_warned: set[tuple[str, str]] = set()


def _whole(name: str, value: object, *, minimum: int) -> int:
    if type(value) is not int or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _seconds(name: str, value: object) -> float:
    if type(value) not in (int, float) or not 0 < value < float("inf"):  # type: ignore[operator]
        raise ValueError(f"{name} must be a positive finite number of seconds, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def _flag(name: str, value: object, *, allow_none: bool = False) -> bool | None:
    if type(value) is bool or (allow_none and value is None):
        return value
    expected = "True, False or None" if allow_none else "True or False"
    raise ValueError(f"{name} must be {expected}, got {value!r}")


def _nonce() -> str:
    """Return a fresh random id, for a new epoch or for one operation."""
    return os.urandom(8).hex()


class RedisTokenStore:
    """A durable, multi-process token sink and source kept in one Redis database or cluster.

    Built from plain JSON kwargs, so every spawned worker builds its own. Instances with the
    same ``url`` and ``namespace`` share their rollouts, in any process on any host.

    Promises, per rollout:

    - ``put`` of a new call before ``freeze`` stores the entry's canonical bytes and changes
      the version. An identical re-put is a no-op at any time. A different payload under a
      known call id durably marks the rollout incomplete and raises
      :class:`~tokcap_spec.errors.ConflictingEntryError`. A new call after ``freeze`` raises
      :class:`~tokcap_spec.errors.RolloutFrozenError` (strict fence). Any object with the
      record's fields is taken (:func:`~tokcap_spec.records.as_token_entry`).
    - ``mark_incomplete`` is sticky, changes the version and works after ``freeze``.
    - ``begin_call`` records an intent; an intent without an entry at freeze time makes the
      snapshot incomplete; a new intent after ``freeze`` raises ``RolloutFrozenError``.
    - ``freeze`` fences the rollout on the server, even one never written, and returns the same
      ``snapshot_id`` and ``version`` until the rollout changes. A rollout that lost keys to
      eviction freezes incomplete, never as a clean short snapshot. Freezing an already frozen
      rollout only reads, so it works on a server that is out of memory.
    - ``drop`` retires only the exact frozen state, leaving a tombstone; anything else returns
      False and destroys nothing. ``retire`` tombstones whatever the state; ``delete`` forgets
      the id. After a tombstone every write and freeze raises
      :class:`~tokcap_spec.errors.RolloutRetiredError`.
    - Every answer is true under resends: a call whose reply was lost and that the client sent
      again answers as its first copy did (a drop that retired its snapshot says True).
    - A call returns only once the server replied (and, with ``wait_replicas``, once that many
      replicas acknowledged); a failure to reach the server, or no reply within
      ``call_timeout`` seconds, raises :class:`~tokcap_spec.errors.StoreWriteError`, naming the
      URL without its password.

    The first call of an instance asks the server whether it is a cluster node (unless
    ``cluster`` says so) and reads its settings: an ``allkeys-*`` eviction policy is refused,
    with ``StoreWriteError``, unless ``allow_eviction`` is true; persistence weaker than an
    fsynced append-only file is accepted, logged once as a warning and reported by
    :attr:`durability`. After that call ``cluster`` says which client is used. On a cluster
    every key of a rollout is in one hash slot and each script runs on the primary serving it;
    ``wait_replicas`` needs a single node.

    ``tombstone_ttl_seconds`` lets tombstones expire; after that the id is no longer fenced.
    ``retries`` is how often the client reconnects and resends on a connection error or a
    timeout, within ``call_timeout``.
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "tokcap",
        cluster: bool | None = None,
        allow_eviction: bool = False,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        socket_timeout: float = 10.0,
        retries: int = 3,
        call_timeout: float = 30.0,
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
        self.namespace = validate_namespace(namespace)
        self.cluster = _flag("cluster", cluster, allow_none=True)
        self.allow_eviction = _flag("allow_eviction", allow_eviction)
        self.wait_replicas = _whole("wait_replicas", wait_replicas, minimum=0)
        self.wait_timeout_ms = _whole("wait_timeout_ms", wait_timeout_ms, minimum=0)
        self.socket_timeout = _seconds("socket_timeout", socket_timeout)
        self.retries = _whole("retries", retries, minimum=0)
        self.call_timeout = _seconds("call_timeout", call_timeout)
        ttl = tombstone_ttl_seconds
        self._ttl = "" if ttl is None else str(_whole("tombstone_ttl_seconds", ttl, minimum=1))
        self._options = ClientOptions(url, self.socket_timeout, self.retries)
        self._durability: str | None = None
        self._evicting = False
        # redis.asyncio connections belong to the loop that opened them.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Client] = (
            weakref.WeakKeyDictionary()
        )
        self._opening: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        return f"RedisTokenStore(url={self._shown.text!r}, namespace={self.namespace!r})"

    @property
    def durability(self) -> str | None:
        """How durable an acknowledged write is on this server, once a call reached it.

        One of ``aof-always`` (fsynced before the reply), ``aof-everysec``, ``aof-no``,
        ``rdb-only``, ``none`` or ``unknown`` (``CONFIG GET`` refused); the weakest node's
        on a cluster. None before the first call.
        """
        return self._durability

    async def _client(self) -> Client:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is not None:
            return client
        async with self._opening.setdefault(loop, asyncio.Lock()):
            client = self._clients.get(loop)
            if client is None:
                if self.cluster is None:
                    self.cluster = await is_cluster_node(self._options)
                client = open_client(self._options, cluster=self.cluster)
                try:
                    if self._durability is None:
                        await self._inspect(client)
                except BaseException:
                    await client.aclose()
                    raise
                self._clients[loop] = client
        return client

    async def _inspect(self, client: Client) -> None:
        """Refuse an evicting server unless allowed; note and warn about weak persistence."""
        if self.cluster and self.wait_replicas:
            raise StoreWriteError(
                f"redis store at {self._shown}: wait_replicas needs a single Redis node; "
                "expected wait_replicas=0 on a cluster (replicate each primary and rely on "
                "its own persistence instead)"
            )
        try:
            verdict = judge(await node_config(client, SETTINGS))
        except ResponseError:
            verdict = judge(None)
        if verdict.evicting and not self.allow_eviction:
            nodes = ", ".join(f"{node} has {policy}" for node, policy in verdict.evicting)
            raise StoreWriteError(
                f"redis store at {self._shown}: maxmemory-policy evicts captured entries "
                f"silently ({nodes}); expected noeviction (CONFIG SET maxmemory-policy "
                "noeviction) or a volatile-* policy, or pass allow_eviction=True to accept "
                "losing entries, which freeze then reports as incomplete"
            )
        self._durability = verdict.durability
        # Settings that cannot be read may evict as well; the scripts then check INFO stats.
        self._evicting = bool(verdict.evicting) or verdict.durability == "unknown"
        if verdict.durability != "aof-always" and (self._shown.text, verdict.durability) not in (
            _warned
        ):
            _warned.add((self._shown.text, verdict.durability))
            _log.warning(
                "redis store at %s: durability %s: %s; expected appendonly yes and appendfsync "
                "always for captured entries that must survive a crash (see docs/redis.md)",
                self._shown,
                verdict.durability,
                DURABILITY[verdict.durability],
            )

    async def _run(self, script: Script, rollout_id: str, args: Sequence[str | bytes]) -> Any:
        """Run ``script`` on the rollout's keys within ``call_timeout``; wait for replicas."""
        keys = rollout_keys(self.namespace, rollout_id)
        try:
            return await asyncio.wait_for(self._attempt(script, keys, args), self.call_timeout)
        except asyncio.TimeoutError:
            cause = f"not done within call_timeout={self.call_timeout:g} s"
        except TokenCaptureError:
            raise
        except Exception as exc:
            # Not only RedisError: when redis-py's cluster client closes its pool under calls in
            # flight (it does on a failover), they can fail with a bare AttributeError.
            cause = f"{type(exc).__name__}: {self._shown.scrub(str(exc))}"
        raise StoreWriteError(
            f"redis store at {self._shown}: {script.name} on rollout {rollout_id!r} failed "
            f"({cause}); expected the server's acknowledgement, so the call is not "
            "acknowledged (repeating it is safe)"
        ) from None

    async def _attempt(
        self, script: Script, keys: Sequence[str], args: Sequence[str | bytes]
    ) -> Any:
        client = await self._client()
        # Every script reads its last argument as "the server's policy may evict keys".
        args = [*args, "1" if self._evicting else ""]
        if not self.wait_replicas:
            return await run_script(client, script, keys, args)
        assert isinstance(client, aioredis.Redis)
        return await self._run_and_wait(client, script, keys, args)

    async def _run_and_wait(
        self,
        client: aioredis.Redis,
        script: Script,
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
                raise _WaitError(
                    f"reached {replicas} replicas within {self.wait_timeout_ms} ms; expected "
                    f"{self.wait_replicas}. The primary has it, a failover may lose it"
                )
            return result
        raise _WaitError("the server forgot the script twice in a row; expected it to keep it")

    async def put(self, entry: TokenEntry) -> None:
        """Store ``entry`` under its rollout; see the class promises."""
        with refusing_invalid(entry):
            entry = as_token_entry(entry)
            rollout_id = validate_rollout_id(entry.rollout_id)
            call = validate_call_id(entry.model_call_id)
            # An entry that skipped validation would make every later freeze refuse the rollout.
            payload = entry.checked_json_bytes()
        outcome = await self._run(PUT, rollout_id, [_nonce(), call, payload, _nonce()])
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
        if await self._run(MARK_INCOMPLETE, rollout_id, [_nonce(), _nonce()]) == b"retired":
            raise RolloutRetiredError.for_rollout(rollout_id)

    async def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        """Announce ``model_call_id``; a freeze before its entry arrives is incomplete."""
        rollout_id = validate_rollout_id(rollout_id)
        call = validate_call_id(model_call_id)
        outcome = await self._run(BEGIN_CALL, rollout_id, [_nonce(), call, _nonce()])
        if outcome == b"retired":
            raise RolloutRetiredError.for_rollout(rollout_id)
        if outcome == b"frozen":
            raise RolloutFrozenError.for_call(rollout_id, call)

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        """Fence ``rollout_id`` on the server and return a snapshot of everything it holds."""
        rollout_id = validate_rollout_id(rollout_id)
        reply = await self._run(FREEZE, rollout_id, [_nonce()])
        if reply[0] == b"retired":
            raise RolloutRetiredError.for_rollout(rollout_id)
        epoch, version, incomplete, *payloads = reply[1:]
        return TokenCaptureSnapshot(
            rollout_id=rollout_id,
            entries=self._entries(rollout_id, payloads),
            incomplete=incomplete == b"1",
            snapshot_id=f"{epoch.decode()}-{int(version)}",
            version=int(version),
        )

    async def peek(self, rollout_id: str) -> tuple[TokenEntry, ...]:
        """The entries ``rollout_id`` holds on the server now, without fencing it.

        A rollout never written, or retired, holds none; nothing changes on the server.
        """
        rollout_id = validate_rollout_id(rollout_id)
        return self._entries(rollout_id, await self._run(PEEK, rollout_id, []))

    def _entries(self, rollout_id: str, payloads: Sequence[bytes]) -> tuple[TokenEntry, ...]:
        try:
            return tuple(TokenEntry.from_json_bytes(payload) for payload in payloads)
        except ValueError as exc:
            raise CorruptStoreError(
                f"redis store at {self._shown}: rollout {rollout_id!r} holds an entry that is "
                f"not a valid TokenEntry; expected canonical JSON ({type(exc).__name__})"
            ) from None

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        """Retire ``rollout_id`` if it is frozen at exactly this snapshot; say whether it was."""
        rollout_id = validate_rollout_id(rollout_id)
        if type(version) is not int or not isinstance(snapshot_id, str):
            return False
        args = [_nonce(), snapshot_id, str(version), repr(time.time()), self._ttl]
        return bool(await self._run(DROP, rollout_id, args) == b"dropped")

    async def retire(self, rollout_ids: Iterable[str]) -> None:
        """Remove and fence each rollout whatever its state; repeating it is a no-op."""
        for rollout_id in validate_rollout_ids(rollout_ids):
            await self._run(RETIRE, rollout_id, [_nonce(), repr(time.time()), self._ttl])

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
