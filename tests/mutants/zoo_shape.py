"""SHAPE mutants: wrong method kinds, wrong drop keywords, snapshots that change after the fact."""

from __future__ import annotations

import copy
import json
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, NamedTuple

from base import BaseStore, RelaxedFileStore, RolloutFileState

from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry


def _run_now(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Drive a coroutine that never suspends (every BaseStore method) to its result."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("the coroutine suspended")


class PlainFunctionSink(BaseStore):
    """SHAPE-1: put, mark_incomplete and close are plain functions, not coroutine functions.

    A store ported from a synchronous client library keeps its blocking methods; a framework
    that awaits them gets a TypeError on the first captured call.
    """

    breaks: ClassVar[str] = "SHAPE-1"

    def put(self, entry: TokenEntry) -> None:  # type: ignore[override]
        _run_now(BaseStore.put(self, entry))

    def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:  # type: ignore[override]
        _run_now(BaseStore.mark_incomplete(self, rollout_id, model_call_id))

    def close(self) -> None:  # type: ignore[override]
        _run_now(BaseStore.close(self))


class PlainFunctionFreeze(BaseStore):
    """SHAPE-1: freeze is a plain function that returns the snapshot directly.

    The read side was written for a synchronous trainer loop; the consumer awaits it.
    """

    breaks: ClassVar[str] = "SHAPE-1"

    def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:  # type: ignore[override]
        snapshot: TokenCaptureSnapshot = _run_now(BaseStore.freeze(self, rollout_id))
        return snapshot


class _LeanSnapshot(NamedTuple):
    rollout_id: str
    entries: tuple[TokenEntry, ...]
    snapshot_id: str
    version: int


class LeanSnapshot(BaseStore):
    """SHAPE-1: freeze returns its own snapshot type, which has no ``incomplete`` attribute.

    A transport defines a lighter snapshot than TokenCaptureSnapshot and forgets the flag
    that tells a consumer the rollout lost evidence.
    """

    breaks: ClassVar[str] = "SHAPE-1"

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> Any:
        full = super().snapshot(rollout_id, state)
        return _LeanSnapshot(full.rollout_id, full.entries, full.snapshot_id, full.version)


class PositionalDrop(BaseStore):
    """SHAPE-2: drop takes snapshot_id and version as positional-only parameters.

    A store wrapping an RPC stub mirrors its positional signature; ``drop(rid,
    snapshot_id=..., version=...)`` raises TypeError.
    """

    breaks: ClassVar[str] = "SHAPE-2"

    async def drop(self, rollout_id: str, snapshot_id: str, version: int, /) -> bool:  # type: ignore[override]
        return await BaseStore.drop(self, rollout_id, snapshot_id=snapshot_id, version=version)


class RenamedDropKeywords(BaseStore):
    """SHAPE-2: drop spells its keywords ``snapshot`` and ``expected_version``.

    The store's own naming convention leaks into the protocol method, so the consumer's
    keyword call fails.
    """

    breaks: ClassVar[str] = "SHAPE-2"

    async def drop(  # type: ignore[override]
        self, rollout_id: str, *, snapshot: str, expected_version: int
    ) -> bool:
        return await BaseStore.drop(
            self, rollout_id, snapshot_id=snapshot, version=expected_version
        )


class SharedEntryObjects(BaseStore):
    """SHAPE-3: freeze hands out the same parsed entry objects every time.

    A per-instance parse cache saves decoding work, so a caller that edits the lists inside a
    returned entry edits what the next freeze returns.
    """

    breaks: ClassVar[str] = "SHAPE-3"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._parsed: dict[str, TokenEntry] = {}

    def decode(self, stored: str) -> TokenEntry:
        if stored not in self._parsed:
            self._parsed[stored] = super().decode(stored)
        return self._parsed[stored]


@dataclass(frozen=True)
class _MappingSnapshot:
    rollout_id: str
    entries: tuple[Mapping[str, Any], ...]
    incomplete: bool
    snapshot_id: str
    version: int


class ReadOnlyViewsOfCache(BaseStore):
    """SHAPE-3: entries come back as read-only mapping views of a per-instance parse cache.

    The view refuses item assignment, which looked safe enough to share the parsed dicts, but
    the lists inside them are the cache's own: a caller who appends to one changes what the
    next freeze returns.
    """

    breaks: ClassVar[str] = "SHAPE-3"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._parsed: dict[str, dict[str, Any]] = {}

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> Any:
        full = super().snapshot(rollout_id, state)
        views = []
        for stored in state.entries.values():
            if stored not in self._parsed:
                self._parsed[stored] = json.loads(stored)
            views.append(MappingProxyType(self._parsed[stored]))
        return _MappingSnapshot(
            rollout_id, tuple(views), full.incomplete, full.snapshot_id, full.version
        )


@dataclass
class _LiveView:
    rollout_id: str
    entries: tuple[TokenEntry, ...] = ()
    incomplete: bool = False
    snapshot_id: str = ""
    version: int = 0
    history: list[str] = field(default_factory=list)

    def entry_for(self, model_call_id: str) -> TokenEntry | None:
        return next((e for e in self.entries if e.model_call_id == model_call_id), None)


_VIEWS: dict[tuple[str, str], _LiveView] = {}


class LiveSnapshotView(BaseStore):
    """SHAPE-3: a snapshot already returned changes when the rollout is marked afterwards.

    A process-wide cache keeps one mutable view per rollout and patches it in place on every
    write instead of building a new snapshot, so a consumer's snapshot moves under its feet.
    """

    breaks: ClassVar[str] = "SHAPE-3"

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> Any:
        full = super().snapshot(rollout_id, state)
        view = _VIEWS.setdefault((self.root, rollout_id), _LiveView(rollout_id))
        view.entries = full.entries
        view.incomplete = full.incomplete
        view.snapshot_id = full.snapshot_id
        view.version = full.version
        return view

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        super().apply_mark(rollout_id, state, call)
        view = _VIEWS.get((self.root, rollout_id))
        if view is not None:
            view.incomplete = True
            view.version = state.version


@dataclass
class _ListSnapshot:
    rollout_id: str
    entries: list[TokenEntry]
    incomplete: bool
    snapshot_id: str
    version: int


class SnapshotSharesRolloutList(RelaxedFileStore):
    """SHAPE-3: every snapshot of a rollout holds the one list the instance keeps for it.

    The store avoids rebuilding the list at each freeze and only appends what is new, so a
    snapshot returned earlier grows when the rollout is frozen again.
    """

    breaks: ClassVar[str] = "SHAPE-3"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._lists: dict[str, list[TokenEntry]] = {}

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> Any:
        full = super().snapshot(rollout_id, state)
        kept = self._lists.setdefault(rollout_id, [])
        known = {entry.model_call_id for entry in kept}
        kept.extend(entry for entry in full.entries if entry.model_call_id not in known)
        return _ListSnapshot(rollout_id, kept, full.incomplete, full.snapshot_id, full.version)


class CopiesOnlyTheRecordsFields(SharedEntryObjects):
    """SHAPE-3: freeze copies the record's own fields out of a parse cache, not its extras.

    The cache saves decoding work, and each freeze hands out a copy of the cached entry with
    fresh token lists; an extra field the entry carries is shared with the cache, so a caller
    that edits it edits what the next freeze returns.
    """

    breaks: ClassVar[str] = "SHAPE-3"

    def decode(self, stored: str) -> TokenEntry:
        cached = super().decode(stored)
        own = {name: copy.deepcopy(getattr(cached, name)) for name in type(cached).model_fields}
        return cached.model_copy(update=own)
