"""FENCE mutants: frozen rollouts that take new calls quietly, dropped rollouts that take any."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from base import BaseStore, RelaxedFileStore, RolloutFileState

from tokcap_spec.records import TokenEntry


class LateWriteKeepsVersion(BaseStore):
    """FENCE-1: a new call after freeze is stored without bumping the version.

    A relaxed fence that forgot the version: the old snapshot still drops, and the late entry
    is retired without ever being consumed.
    """

    breaks: ClassVar[str] = "FENCE-1"

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        if state.frozen and not state.retired and call not in state.entries:
            state.entries[call] = payload
            return
        super().apply_put(rollout_id, state, call, payload)


class DiscardsLateWrites(BaseStore):
    """FENCE-1: a new call after freeze is acked and thrown away.

    The store treats frozen rollouts as read-only and "fails open": the worker believes the
    call was captured.
    """

    breaks: ClassVar[str] = "FENCE-1"

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        if state.frozen and not state.retired and call not in state.entries:
            return
        super().apply_put(rollout_id, state, call, payload)


class RelaxedFenceJudgedStrict(RelaxedFileStore):
    """FENCE-1: the correct relaxed-fence baseline store, run with ``--tokcap-fence=strict``.

    A new call after freeze is stored under a new version, which the contract allows, but a
    framework that needs a strict fence declares it and must see the put refused.
    """

    breaks: ClassVar[str] = "FENCE-1"
    flags: ClassVar[tuple[str, ...]] = ("--tokcap-fence=strict",)


class TrustsItsOpenCache(RelaxedFileStore):
    """FENCE-1: each instance remembers the rollouts it saw open and stops reading their fence.

    A relaxed fence must move the version when it takes a call after a freeze; a long-lived
    sink that wrote before another instance froze the rollout stores its next call as if the
    rollout were still open, so the old snapshot still drops and the late call is retired
    unseen.
    """

    breaks: ClassVar[str] = "FENCE-1"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._seen_open: set[str] = set()

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        if rollout_id in self._seen_open and not state.retired and call not in state.entries:
            state.entries[call] = payload
            return
        super().apply_put(rollout_id, state, call, payload)
        if not state.frozen:
            self._seen_open.add(rollout_id)

    def apply_freeze(self, rollout_id: str, state: RolloutFileState) -> None:
        self._seen_open.discard(rollout_id)
        super().apply_freeze(rollout_id, state)


class NoTombstone(BaseStore):
    """FENCE-2: drop deletes the rollout's file and leaves no tombstone.

    A late put after the consumer dropped the rollout starts a new rollout under the same id,
    which nobody will ever freeze.
    """

    breaks: ClassVar[str] = "FENCE-2"

    def tombstone(self, state: RolloutFileState) -> None:
        self.forget(state)


class RetryAckedAfterDrop(BaseStore):
    """FENCE-2: a re-put of a dropped call is acked as an idempotent retry.

    The tombstone remembers the dropped payloads for de-duplication, and the de-duplication
    runs before the tombstone check.
    """

    breaks: ClassVar[str] = "FENCE-2"
    also: ClassVar[tuple[str, ...]] = ("EXT-RETIRE-1",)
    """Retire lays the same tombstone, so a retired rollout acks the re-put of a call too."""

    def tombstone(self, state: RolloutFileState) -> None:
        remembered = dict(state.entries)
        super().tombstone(state)
        state.entries.update(remembered)

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        if state.entries.get(call) == payload:
            return
        super().apply_put(rollout_id, state, call, payload)


class TrustsItsOwnRollouts(RelaxedFileStore):
    """FENCE-2: a sink skips the tombstone check for rollouts it wrote itself.

    The check costs a read per put, so the sink remembers the rollouts it already wrote and
    treats them as live; one that another instance dropped since takes the late write.
    """

    breaks: ClassVar[str] = "FENCE-2"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._written: set[str] = set()

    def refuse_retired(self, rollout_id: str, state: RolloutFileState) -> None:
        if rollout_id not in self._written:
            super().refuse_retired(rollout_id, state)

    def write(self, entry: TokenEntry) -> None:
        super().write(entry)
        self._written.add(entry.rollout_id)


_FROZEN_HERE: set[tuple[str, str]] = set()
"""Rollouts this process froze, by store root: the fence :class:`ProcessLocalFence` keeps."""


class ProcessLocalFence(BaseStore):
    """FENCE-1: the strict fence is a set of frozen rollouts kept in this process's memory.

    A sink in the process that froze refuses late calls, but a model server's worker in
    another process puts into the frozen rollout and is acked with no version change, so two
    freezes name one snapshot with different entries (FREEZE-5 too).
    """

    breaks: ClassVar[str] = "FENCE-1"
    also: ClassVar[tuple[str, ...]] = ("FREEZE-5",)
    flags: ClassVar[tuple[str, ...]] = ("--tokcap-fence=strict",)

    async def delete(self, rollout_ids: Iterable[str]) -> None:
        ids = rollout_ids if isinstance(rollout_ids, str) else list(rollout_ids)
        await super().delete(ids)
        for rollout_id in ids:
            _FROZEN_HERE.discard((self.root, rollout_id))

    def apply_freeze(self, rollout_id: str, state: RolloutFileState) -> None:
        super().apply_freeze(rollout_id, state)
        _FROZEN_HERE.add((self.root, rollout_id))

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        stored = state.frozen
        state.frozen = (self.root, rollout_id) in _FROZEN_HERE
        try:
            super().apply_put(rollout_id, state, call, payload)
        finally:
            state.frozen = stored
