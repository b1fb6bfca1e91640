"""Reference implementations of the token-capture contract, each passing the kit.

- :class:`FileTokenStore`: the embedded default, a directory on a node-local disk.
- :class:`MemoryTokenStore`: process memory, for unit tests; cannot serve spawned workers.
- :class:`RedisTokenStore`: a shared data plane on Redis (needs the ``redis`` extra).
- :mod:`reference.consumer`: freezing, building a training row and retiring after handoff.
- :class:`FileLineageResolver`, :class:`MemoryLineageResolver`, :class:`RedisLineageResolver`:
  which captured call a new request continues, over each store (:mod:`reference.lineage`).
- :class:`FileStagingStore`, :class:`MemoryStagingStore`, :class:`RedisStagingStore`: staging
  sinks and sources of the external staging path (:mod:`tokcap_spec.staging`), on a local
  disk, in process memory or on Redis (needs the ``redis`` extra).

Names are imported on first use, so ``import reference`` stays cheap and the Redis client
is needed only by those who use Redis.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reference.file_store import FileTokenStore
    from reference.lineage import FileLineageResolver, MemoryLineageResolver, RedisLineageResolver
    from reference.memory_store import MemoryTokenStore
    from reference.redis_store import RedisTokenStore
    from reference.staging_file import FileStagingStore
    from reference.staging_memory import MemoryStagingStore
    from reference.staging_redis import RedisStagingStore

__all__ = [
    "FileLineageResolver",
    "FileStagingStore",
    "FileTokenStore",
    "MemoryLineageResolver",
    "MemoryStagingStore",
    "MemoryTokenStore",
    "RedisLineageResolver",
    "RedisStagingStore",
    "RedisTokenStore",
]

_HOMES = {
    "FileTokenStore": "reference.file_store",
    "MemoryTokenStore": "reference.memory_store",
    "RedisTokenStore": "reference.redis_store",
    "FileStagingStore": "reference.staging_file",
    "MemoryStagingStore": "reference.staging_memory",
    "RedisStagingStore": "reference.staging_redis",
    "FileLineageResolver": "reference.lineage",
    "MemoryLineageResolver": "reference.lineage",
    "RedisLineageResolver": "reference.lineage",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'reference' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
