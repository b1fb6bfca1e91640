"""A staging sink and source in one object, on Redis: one node or a cluster, shared by hosts."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from typing import Any, Final, cast

import redis
from redis.asyncio.connection import parse_url
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError
from redis.retry import Retry

from reference._redis_client import _text
from reference._redis_scripts import validate_namespace
from reference._redis_settings import DURABILITY, SETTINGS, judge
from reference._redis_url import ShownUrl
from reference._staging_store import KeyedStagingStore
from reference.redis_store import _flag, _seconds, _whole

__all__ = ["RedisStagingStore"]

_log = logging.getLogger(__name__)

_Client = redis.Redis | RedisCluster
_Command = Callable[[_Client, str], object]
"""One command on the key's name in Redis, returning its reply."""


class _Refused(Exception):
    """A reason of the store's own to fail a call; the message says it."""


# Read and write in one server step: a key that holds a document is only read, so staging a
# stored call again works on a server out of memory; a new key is written whole or not at all.
_PUT_IF_ABSENT: Final = """
local stored = redis.call('GET', KEYS[1])
if stored then
  return stored
end
redis.call('SET', KEYS[1], ARGV[1])
return false
"""

_WEAK: Final = (
    "redis staging store at %s: durability %s: %s; staged calls that must survive a crash need "
    "appendonly yes and appendfsync always"
)

# One warning per server and durability level in a process, however many instances it builds.
_warned: set[tuple[str, str]] = set()


class RedisStagingStore(KeyedStagingStore):
    """A :class:`~tokcap_spec.staging.StagingSink` and ``StagingSource`` in Redis.

    Built from plain JSON kwargs, so a spawned process builds its own; it connects on its first
    call, not when built. Any number of instances with the same ``url`` and ``namespace``, in
    any threads, processes and hosts, stage into and fetch from the same calls at once. The
    same store runs on one node or on a Redis Cluster. Every method is safe to call from many
    threads at once.

    - ``stage`` never raises. It returns ``ok`` with the key
      :func:`~tokcap_spec.staging.distinct_staging_key` makes of the record's ids once the
      server serving that key replied that it holds the call. How durable that is is the
      server's persistence, which :attr:`durability` reports (a write is fsynced before the
      reply only with ``appendonly yes`` and ``appendfsync always``; nothing waits for
      replicas, so a failover may lose an ok call: ``fetch`` then reports it missing, and its
      key is free again). Otherwise it returns ``ok=False`` with an error saying what is wrong:
      a record that is not a valid ``StagedCallRecord``, tokcap_spec's or NeMo Gym's (another
      type, another schema or digest version, a digest that does not recompute), attachments
      that are not a mapping of ``str`` to ``bytes`` or ``str``, or a failure of the server or
      of reaching it (refused connection, timeout, out of memory, a read-only replica, a
      cluster error, a wrong password), naming the URL without its password. A failure leaves
      nothing under the key, with one exception no client can rule out: the server applied the
      write and every reply to it, resends included, was lost; the key then holds exactly the
      offered call, and staging it again is ok.
    - Staging exactly the call a key holds again (the same digest, which commits to the
      extras and to the columns as float32, and the same attachments) changes nothing and is
      ok, with the same key, also on a server out of memory. Another call for a key that holds
      one is refused, and the stored call is kept: the check and the write are one script on
      the server, so of calls racing for a key exactly one is stored.
    - Attachments are stored in the same value as the record; ``None`` and ``{}`` both mean
      none. ``fetch_attachments`` and ``fetch_extras`` read them back.
    - ``fetch`` returns a new, validated row per key, in the order asked for and as often as
      asked for, with the columns' float bits as staged (``-0.0`` and subnormals included);
      if any key holds nothing it raises :class:`~tokcap_spec.staging.StagedCallMissingError`
      naming every such key, and returns nothing; a value damaged on the server raises
      :class:`~tokcap_spec.staging.StagedCallCorruptError`, and a failure of the server
      ``OSError``, naming the URL without its password.

    The first call of an instance asks the server whether it is a cluster node (unless
    ``cluster`` says so) and reads its settings: an ``allkeys-*`` eviction policy, which would
    delete staged calls, is refused (the call fails) unless ``allow_eviction`` is true;
    persistence weaker than an fsynced append-only file is accepted and logged once as a
    warning. ``socket_timeout`` bounds each attempt to reach the server or read its reply;
    ``retries`` is how often the client reconnects and resends after a connection error or a
    timeout (a resent stage finds its own call and is ok).

    Layout: ``<namespace>:staged:<sha256 of the key>`` is a string holding one call, key
    included, as :mod:`reference._staging_codec` writes it (a hashed name is safe for any id and
    any length, and spreads the calls over a cluster's slots); nothing else is stored.
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "tokcap",
        cluster: bool | None = None,
        allow_eviction: bool = False,
        socket_timeout: float = 10.0,
        retries: int = 3,
        classes: str | None = None,
    ) -> None:
        """Check the arguments, connecting to nothing; ``ValueError`` or ``TypeError`` naming
        the one that is wrong, never the password. ``classes`` names the staging classes it
        answers with (``"gym"`` for NeMo Gym's capture; see
        :class:`~reference._staging_store.KeyedStagingStore`)."""
        self._answer_with(classes)
        self._shown = ShownUrl.parse(url)
        try:
            parse_url(url)
        except ValueError as exc:
            reason = self._shown.scrub(str(exc))
            raise ValueError(f"url {self._shown} is not one redis-py accepts: {reason}") from None
        self._url = url
        self.namespace = validate_namespace(namespace)
        self.cluster = _flag("cluster", cluster, allow_none=True)
        self.allow_eviction = _flag("allow_eviction", allow_eviction)
        self.socket_timeout = _seconds("socket_timeout", socket_timeout)
        self.retries = _whole("retries", retries, minimum=0)
        self._durability: str | None = None
        self._client: _Client | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RedisStagingStore(url={self._shown.text!r}, namespace={self.namespace!r})"

    def __getstate__(self) -> dict[str, Any]:
        # A copy in another process opens its own connections.
        state = dict(self.__dict__)
        state.update(_client=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    @property
    def durability(self) -> str | None:
        """How durable an ok stage is here, once a call reached the server: a key of
        :data:`reference._redis_settings.DURABILITY` (``aof-always``: fsynced before the reply),
        the weakest primary's on a cluster; None before."""
        return self._durability

    def close(self) -> None:
        """Close the connections; idempotent. The store stays usable: a later call reconnects."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _put_if_absent(self, key: str, document: bytes) -> bytes | None:
        return self._call(
            "stage", key, lambda client, name: client.eval(_PUT_IF_ABSENT, 1, name, document)
        )

    def _load(self, key: str) -> bytes | None:
        return self._call("fetch", key, lambda client, name: client.get(name))

    def _call(self, operation: str, key: str, command: _Command) -> bytes | None:
        """The document ``command(client, name)`` returns for the key's name in Redis, or
        ``None``; any failure as ``OSError`` naming the URL without its password."""
        name = f"{self.namespace}:staged:{hashlib.sha256(key.encode('utf-8')).hexdigest()}"
        try:
            reply = command(self._connected(), name)
            if reply is None or isinstance(reply, bytes):
                return reply
            raise _Refused(f"the server answered a {type(reply).__name__}, expected bytes")
        except _Refused as exc:
            cause = str(exc)
        except Exception as exc:
            # Not only RedisError: the cluster client raises RedisClusterException when it
            # finds no node, and a pool closed under a call may fail with anything.
            cause = f"{type(exc).__name__}: {self._shown.scrub(str(exc))}"
        raise OSError(
            f"redis staging store at {self._shown}: {operation} of {key!r} failed ({cause})"
        )

    def _connected(self) -> _Client:
        with self._lock:
            if self._client is None:
                client = self._open()
                try:
                    if self._durability is None:
                        self._inspect(client)
                except BaseException:
                    client.close()
                    raise
                self._client = client
            return self._client

    def _open(self) -> _Client:
        common: dict[str, Any] = {
            "decode_responses": False,
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_timeout,
            "retry": Retry(ExponentialWithJitterBackoff(cap=0.5, base=0.01), self.retries),
        }
        if self.cluster is None:
            probe = redis.Redis.from_url(self._url, **common)
            try:
                self.cluster = bool(probe.info("cluster").get("cluster_enabled"))
            finally:
                probe.close()
        if self.cluster:
            # Follow each MOVED alone rather than rebuilding the slot map under other calls.
            return RedisCluster.from_url(self._url, reinitialize_steps=0, **common)
        return redis.Redis.from_url(self._url, **common)

    def _inspect(self, client: _Client) -> None:
        """Refuse an evicting server unless allowed; note and warn about weak persistence."""
        try:
            verdict = judge(_settings(client))
        except ResponseError:
            verdict = judge(None)
        if verdict.evicting and not self.allow_eviction:
            nodes = ", ".join(f"{node} has {policy}" for node, policy in verdict.evicting)
            raise _Refused(
                f"maxmemory-policy evicts staged calls ({nodes}); expected noeviction or a "
                "volatile-* policy, or allow_eviction=True to accept losing staged calls"
            )
        self._durability = verdict.durability
        _warn_if_weak(self._shown.text, verdict.durability)


def _settings(client: _Client) -> dict[str, dict[str, str]]:
    """``CONFIG GET`` of each of :data:`SETTINGS` on the node, or on every cluster primary."""
    nodes: list[Any] = [None]
    if isinstance(client, RedisCluster):
        nodes = cast(Any, client).get_primaries()
    per_node: dict[str, dict[str, str]] = {}
    for node in nodes:
        where = "server" if node is None else str(node.name)
        for setting in SETTINGS:
            if node is None:
                reply = client.config_get(setting)
            else:
                reply = client.config_get(setting, target_nodes=node)
            values = {_text(name): _text(value) for name, value in dict(reply).items()}
            per_node.setdefault(where, {})[setting] = values.get(setting, "")
    return per_node


def _warn_if_weak(server: str, durability: str) -> None:
    """Warn once per process, server and level that an ok stage may not survive a crash."""
    if durability == "aof-always" or (server, durability) in _warned:
        return
    _warned.add((server, durability))
    _log.warning(_WEAK, server, durability, DURABILITY[durability])
