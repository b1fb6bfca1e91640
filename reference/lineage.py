"""Lineage resolvers over the reference stores, so each store is a whole capture backend.

A resolver is built from the same target string and kwargs as its store
(``reference:FileLineageResolver`` with ``{"root": ...}``, and so on). It reads what the sinks
committed with the store's ``peek``, a read that never fences or changes a rollout, and decides
with :func:`tokcap_spec.lineage.resolve_from`. It keeps no index of its own, so what a put
committed is seen by the next ``resolve`` of every resolver over the store, wherever it runs
and whenever it was built (LINEAGE-1).

- :class:`FileLineageResolver`: the file store's directory; shared by every process on the node.
- :class:`RedisLineageResolver`: the Redis store; shared by every process that reaches the server.
- :class:`MemoryLineageResolver`: the memory store's namespace; this process only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from reference.file_store import FileTokenStore
from reference.memory_store import MemoryTokenStore
from tokcap_spec.lineage import LineageResolution, resolve_from
from tokcap_spec.records import TokenEntry

__all__ = ["FileLineageResolver", "MemoryLineageResolver", "RedisLineageResolver"]


class _Peeking(Protocol):
    async def peek(self, rollout_id: str) -> tuple[TokenEntry, ...]: ...

    async def close(self) -> None: ...


class _StoreResolver:
    """A resolver reading one store through ``peek``."""

    _store: _Peeking
    _shared: bool

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._store!r})"

    async def resolve(
        self, rollout_id: str, request_items: Sequence[dict[str, Any]]
    ) -> LineageResolution:
        """Decide the parent of ``request_items`` from what ``rollout_id`` holds now.

        An invalid rollout id raises :class:`~tokcap_spec.errors.InvalidRolloutIdError`; a store
        that cannot be read raises its typed error. Every other answer is a resolution.
        """
        return resolve_from(await self._store.peek(rollout_id), request_items)

    def is_process_shared(self) -> bool:
        """Whether resolvers in other processes read the same committed entries."""
        return self._shared

    async def close(self) -> None:
        """Release the store's files or connections; idempotent."""
        await self._store.close()


class FileLineageResolver(_StoreResolver):
    """Lineage over a :class:`~reference.FileTokenStore`; takes the store's arguments."""

    def __init__(self, root: Any, **kwargs: Any) -> None:
        self._store = FileTokenStore(root, **kwargs)
        self._shared = True


class MemoryLineageResolver(_StoreResolver):
    """Lineage over a :class:`~reference.MemoryTokenStore` namespace, in this process only."""

    def __init__(self, namespace: str = "default") -> None:
        self._store = MemoryTokenStore(namespace)
        self._shared = False


class RedisLineageResolver(_StoreResolver):
    """Lineage over a :class:`~reference.RedisTokenStore`; takes the store's arguments."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        from reference.redis_store import RedisTokenStore  # the redis client is an extra

        self._store = RedisTokenStore(url, **kwargs)
        self._shared = True
