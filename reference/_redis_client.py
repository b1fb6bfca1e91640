"""Talking to Redis from one event loop: one node or a cluster, and scripts run on the right node.

:func:`is_cluster_node` asks the node named by the URL whether it runs in cluster mode;
:func:`open_client` opens redis-py's single-node or cluster client accordingly. The cluster
client routes each script by its keys, which share one hash slot, and follows ``MOVED`` and
``ASK`` redirects while a slot moves. :func:`run_script` loads a script on every primary when
a node does not know it (after a restart, a failover or a slot move) and runs it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import NoScriptError

from reference._redis_scripts import Script

__all__ = [
    "Client",
    "ClientOptions",
    "is_cluster_node",
    "node_config",
    "open_client",
    "run_script",
]

Client = aioredis.Redis | RedisCluster


@dataclass(frozen=True)
class ClientOptions:
    """How to reach the server: the URL (secrets included) and the per-attempt limits."""

    url: str
    socket_timeout: float
    retries: int

    def _common(self) -> dict[str, Any]:
        return {
            "decode_responses": False,
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_timeout,
            "retry": Retry(ExponentialWithJitterBackoff(cap=0.5, base=0.01), self.retries),
        }


async def is_cluster_node(options: ClientOptions) -> bool:
    """Return whether the node the URL names has cluster mode enabled (``INFO cluster``)."""
    probe = aioredis.Redis.from_url(options.url, **options._common())
    try:
        info = await probe.info("cluster")
    finally:
        await probe.aclose()
    return bool(info.get("cluster_enabled"))


def open_client(options: ClientOptions, *, cluster: bool) -> Client:
    """Open redis-py's cluster client when ``cluster`` is true, its single-node client otherwise."""
    if cluster:
        # Every fifth MOVED would otherwise make redis-py close the whole pool, failing the
        # other calls in flight on it; following each MOVED alone is enough.
        return RedisCluster.from_url(options.url, reinitialize_steps=0, **options._common())
    return aioredis.Redis.from_url(options.url, **options._common())


async def node_config(client: Client, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """Return ``CONFIG GET`` of each of ``names``, per node (every primary of a cluster)."""
    per_node: dict[str, dict[str, str]] = {}
    for name in names:
        replies: dict[str, dict[Any, Any]]
        if isinstance(client, RedisCluster):
            replies = cast(Any, await client.config_get(name, target_nodes=RedisCluster.PRIMARIES))
        else:
            replies = {"server": cast(Any, await client.config_get(name))}
        for node, reply in replies.items():
            values = {_text(key): _text(value) for key, value in reply.items()}
            per_node.setdefault(node, {})[name] = values.get(name, "")
    return per_node


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


async def run_script(
    client: Client, script: Script, keys: Sequence[str], args: Sequence[str | bytes]
) -> Any:
    """Run ``script`` on the node serving ``keys``, loading it first if that node lacks it."""
    try:
        return await client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        await client.script_load(script.source)
        return await client.evalsha(script.sha, len(keys), *keys, *args)
