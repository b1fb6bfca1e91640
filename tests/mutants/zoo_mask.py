"""MASK mutants: marks that are lost, cleared, refused, unversioned, or that destroy evidence."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import uuid
from typing import ClassVar

from base import BaseStore, RolloutFileState

from tokcap_spec.errors import RolloutFrozenError
from tokcap_spec.ids import validate_rollout_id
from tokcap_spec.protocols import TokenCaptureSnapshot


def _incomplete(found: TokenCaptureSnapshot) -> TokenCaptureSnapshot:
    return TokenCaptureSnapshot(
        found.rollout_id, found.entries, True, found.snapshot_id, found.version
    )


class IgnoresMark(BaseStore):
    """MASK-1: mark_incomplete is acked and does nothing.

    The method was stubbed out "until masking is supported", so failed calls vanish and the
    rollout trains as if it were complete.
    """

    breaks: ClassVar[str] = "MASK-1"

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        self.refuse_retired(rollout_id, state)


class InstanceLocalMark(BaseStore):
    """MASK-1: marks are kept in the sink instance's memory.

    The sink remembers which rollouts it marked and reports them only through its own
    freezes; a fresh source never hears of them.
    """

    breaks: ClassVar[str] = "MASK-1"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._marked: set[str] = set()

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        self.refuse_retired(rollout_id, state)
        self._marked.add(rollout_id)
        state.version += 1

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        found = super().snapshot(rollout_id, state)
        return _incomplete(found) if rollout_id in self._marked else found


_MARKED: set[tuple[str, str]] = set()


class ProcessLocalMark(BaseStore):
    """MASK-1: marks are kept in a module-level set, per process.

    Entries are durable but marks are not: a mark made by a spawned worker is never seen by
    the consumer's process.
    """

    breaks: ClassVar[str] = "MASK-1"

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        self.refuse_retired(rollout_id, state)
        _MARKED.add((self.root, rollout_id))
        state.version += 1

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        found = super().snapshot(rollout_id, state)
        return _incomplete(found) if (self.root, rollout_id) in _MARKED else found


class PutClearsIncomplete(BaseStore):
    """MASK-2: a later successful put clears the incomplete flag.

    The store reads "a call succeeded" as "the rollout recovered".
    """

    breaks: ClassVar[str] = "MASK-2"

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        before = state.version
        super().apply_put(rollout_id, state, call, payload)
        if state.version != before:
            state.incomplete = False


class MarkClearedByItsCall(BaseStore):
    """MASK-2: a mark belongs to the call it names, and that call's entry, put later, clears it.

    The store reads a mark as "this call failed", so when the same call id is put after all (a
    retry that got through) it takes the rollout to be whole again.
    """

    breaks: ClassVar[str] = "MASK-2"

    def _marks(self, rollout_id: str) -> str:
        folder = os.path.join(self.root, "marked-calls")
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, self.key(rollout_id) + ".json")

    def _marked(self, rollout_id: str) -> list[str]:
        try:
            with open(self._marks(rollout_id), encoding="utf-8") as handle:
                found: list[str] = json.load(handle)
        except FileNotFoundError:
            return []
        return found

    def _keep(self, rollout_id: str, calls: list[str]) -> None:
        with open(self._marks(rollout_id), "w", encoding="utf-8") as handle:
            json.dump(calls, handle)

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        super().apply_mark(rollout_id, state, call)
        self._keep(rollout_id, [*self._marked(rollout_id), call])

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        super().apply_put(rollout_id, state, call, payload)
        marked = self._marked(rollout_id)
        if call in marked:
            left = [each for each in marked if each != call]
            self._keep(rollout_id, left)
            if not left:
                state.incomplete = False


class MarkToggles(BaseStore):
    """MASK-2: mark_incomplete flips the flag, so a second mark clears it.

    The flag is stored with a toggle (``XOR``, ``HINCRBY ... % 2``) instead of a set.
    """

    breaks: ClassVar[str] = "MASK-2"

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        self.refuse_retired(rollout_id, state)
        state.incomplete = not state.incomplete
        state.version += 1


class FreezeConsumesMark(BaseStore):
    """MASK-2: freeze reports incomplete once and then clears the flag.

    The flag is treated as a notification to be consumed, so the second reader sees a clean
    rollout.
    """

    breaks: ClassVar[str] = "MASK-2"

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        found = await super().freeze(rollout_id)
        with self.transaction(rollout_id) as state:
            state.incomplete = False
        return found


class IgnoresMarkAfterFreeze(BaseStore):
    """MASK-3: a mark after freeze is acked and ignored.

    The store treats a frozen rollout as read-only, so a failure discovered late never
    reaches the consumer.
    """

    breaks: ClassVar[str] = "MASK-3"

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        if state.frozen and not state.retired:
            return
        super().apply_mark(rollout_id, state, call)


class RefusesMarkAfterFreeze(BaseStore):
    """MASK-3: a mark after freeze raises RolloutFrozenError.

    The strict fence is applied to marks as well as to new calls.
    """

    breaks: ClassVar[str] = "MASK-3"

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        if state.frozen and not state.retired:
            raise RolloutFrozenError(f"rollout {rollout_id!r} is frozen")
        super().apply_mark(rollout_id, state, call)


class MarkKeepsVersion(BaseStore):
    """MASK-3: mark_incomplete sets the flag without moving the version.

    The version counts entries, not state changes, so the snapshot taken before the mark
    still drops.
    """

    breaks: ClassVar[str] = "MASK-3"

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        self.refuse_retired(rollout_id, state)
        state.incomplete = True


class ConflictKeptFirst(BaseStore):
    """MASK-4: a conflicting re-put is acked, keeps the first payload and leaves the rollout clean.

    The store treats every re-put of a known call id as a harmless retry without comparing
    the payload.
    """

    breaks: ClassVar[str] = "MASK-4"
    also: ClassVar[tuple[str, ...]] = ("PUT-4",)

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        if call in state.entries and not state.retired:
            return
        super().apply_put(rollout_id, state, call, payload)


class ConflictForgottenOnceReported(BaseStore):
    """MASK-4: an acked conflict is reported by one freeze, then compacted away.

    A conflicting re-put is not refused: its payload goes to a side file beside the rollout.
    The next freeze reports the rollout incomplete; the freeze after it compacts the side file
    away, keeping the first payload, moves the version, and reports the rollout clean.
    """

    breaks: ClassVar[str] = "MASK-4"

    def _side(self, rollout_id: str) -> str:
        return self.state_path(rollout_id) + ".conflicts"

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        known = state.entries.get(call)
        if known is None or known == payload or state.retired:
            super().apply_put(rollout_id, state, call, payload)
            return
        with open(self._side(rollout_id), "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"call": call, "payload": payload}) + "\n")
        self.bump(state)

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        rollout_id = validate_rollout_id(rollout_id)
        side = self._side(rollout_id)
        with self.transaction(rollout_id) as state:
            if os.path.exists(side + ".reported"):
                os.remove(side)  # compacted: the first payload stays
                os.remove(side + ".reported")
                self.bump(state)
            self.apply_freeze(rollout_id, state)
            snapshot = self.snapshot(rollout_id, state)
            if not os.path.exists(side):
                return snapshot
            with open(side + ".reported", "w", encoding="utf-8"):
                pass
            return dataclasses.replace(snapshot, incomplete=True)


class ConflictComparedByValue(BaseStore):
    """MASK-4: a re-put counts as identical when its decoded fields compare equal.

    Python's ``==`` says ``0.0 == -0.0`` and ``1 == True``, so a call that comes back differing
    only there is taken for a retry: acked, the first payload kept and the rollout clean.
    """

    breaks: ClassVar[str] = "MASK-4"
    also: ClassVar[tuple[str, ...]] = ("PUT-4",)

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        known = state.entries.get(call)
        if known is not None and json.loads(known) == json.loads(payload):
            return
        super().apply_put(rollout_id, state, call, payload)


class MaskDiscardsEntries(BaseStore):
    """MASK-5: marking a rollout incomplete deletes its entries.

    A masked rollout "will not be trained on anyway", so the store frees the space, and the
    evidence of what went wrong with it.
    """

    breaks: ClassVar[str] = "MASK-5"

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        super().apply_mark(rollout_id, state, call)
        state.entries.clear()


class MaskedNeverDrops(BaseStore):
    """DROP-1: drop refuses every incomplete rollout.

    The store only retires clean rollouts, so masked ones pile up for ever: the exact
    snapshot of a masked rollout does not retire.
    """

    breaks: ClassVar[str] = "DROP-1"

    def matches(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        return not state.incomplete and super().matches(state, snapshot_id, version)


class RequiresMarkCallId(BaseStore):
    """MASK-6: mark_incomplete refuses the empty model_call_id.

    The store validates the call id as it does for put, although ``""`` is the documented
    way to mark a rollout without naming a call.
    """

    breaks: ClassVar[str] = "MASK-6"

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        if not call:
            raise ValueError("model_call_id must not be empty")
        super().apply_mark(rollout_id, state, call)


class MarkerFilePerCall(BaseStore):
    """MASK-6: each mark also writes a marker file named by the call id.

    Call ids that are empty, contain ``/`` or exceed the file name limit cannot be file
    names, so those marks fail.
    """

    breaks: ClassVar[str] = "MASK-6"

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        super().apply_mark(rollout_id, state, call)
        folder = os.path.join(self.root, "marks", self.key(rollout_id))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, call), "w", encoding="utf-8") as marker:
            marker.write("incomplete\n")


class MarksOnlyKnownCalls(BaseStore):
    """MASK-6: a mark naming a call the rollout has no entry for is ignored.

    The store flags the failed call's record rather than the rollout, so a call that failed
    before it produced an entry (the usual case) masks nothing.
    """

    breaks: ClassVar[str] = "MASK-6"

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        if call in state.entries:
            super().apply_mark(rollout_id, state, call)


class MarkNeedsARollout(BaseStore):
    """MASK-1: a mark on a rollout nothing was written to yet is acked and not kept.

    The store finds no state file and so nothing to flag; but a rollout's first call can fail
    before any put, and its mark is then lost.
    """

    breaks: ClassVar[str] = "MASK-1"

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        if os.path.exists(self.state_path(rollout_id)):
            super().apply_mark(rollout_id, state, call)


class DropClearsLateMarks(BaseStore):
    """MASK-6: a dropped rollout keeps late marks until the next drop, which clears them.

    Drop empties the rollout and fences it against puts, but marks and freezes are still
    served: a late mark shows as incomplete, as it should, and the consumer's drop of that
    masked snapshot clears the flag with the records, so the rollout freezes clean again.
    """

    breaks: ClassVar[str] = "MASK-6"

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        state.incomplete = True
        self.bump(state)

    def apply_freeze(self, rollout_id: str, state: RolloutFileState) -> None:
        state.frozen = True
        if not state.snapshot_id or state.snapshot_version != state.version:
            state.snapshot_id = uuid.uuid4().hex
            state.snapshot_version = state.version

    def matches(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        return (
            state.frozen
            and state.snapshot_id == snapshot_id
            and state.snapshot_version == state.version
            and type(version) is int
            and state.version == version
        )

    def tombstone(self, state: RolloutFileState) -> None:
        super().tombstone(state)
        state.incomplete = state.frozen = False
        self.bump(state)


class SourceCachesByEntryCount(BaseStore):
    """MASK-3: a source keeps each snapshot it returned while the entry count is unchanged.

    Counting entries is a cheap way to tell that a rollout changed, but a mark adds none, so
    a long-lived source keeps answering the clean snapshot it froze before the mark.
    """

    breaks: ClassVar[str] = "MASK-3"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._kept: dict[str, TokenCaptureSnapshot] = {}

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        found = await super().freeze(rollout_id)
        kept = self._kept.get(rollout_id)
        if kept is not None and len(kept.entries) == len(found.entries):
            return copy.deepcopy(kept)
        self._kept[rollout_id] = copy.deepcopy(found)
        return found


_FLAGS: dict[tuple[str, str], bool] = {}


class ProcessCachedIncomplete(BaseStore):
    """MASK-1: each rollout's incomplete flag is read once per process, then kept.

    Marks are rare, so the consumer's process keeps the flag its first freeze read and
    refreshes it only for marks made here: a mark a worker makes after that first freeze is
    never seen by this process's sources, fresh ones included.
    """

    breaks: ClassVar[str] = "MASK-1"

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        super().apply_mark(rollout_id, state, call)
        _FLAGS[(self.root, rollout_id)] = True

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        found = super().snapshot(rollout_id, state)
        if _FLAGS.setdefault((self.root, rollout_id), found.incomplete) == found.incomplete:
            return found
        return TokenCaptureSnapshot(
            found.rollout_id, found.entries, False, found.snapshot_id, found.version
        )
