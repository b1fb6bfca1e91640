"""DROP mutants: drops that refuse the exact snapshot, accept a wrong one, or destroy on refusal."""

from __future__ import annotations

from typing import ClassVar

from base import BaseStore, RolloutFileState

from tokcap_spec.errors import ConflictingEntryError
from tokcap_spec.protocols import TokenCaptureSnapshot


class DropsOnlyOwnSnapshots(BaseStore):
    """DROP-1: drop refuses snapshots this source instance did not hand out itself.

    A guard against stale consumers remembers the snapshot ids it returned, in memory, so a
    consumer in another process (or a fresh instance) can never drop.
    """

    breaks: ClassVar[str] = "DROP-1"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._handed_out: set[str] = set()

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        found = super().snapshot(rollout_id, state)
        self._handed_out.add(found.snapshot_id)
        return found

    def apply_drop(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        return snapshot_id in self._handed_out and super().apply_drop(state, snapshot_id, version)


class DropExpectsNextVersion(BaseStore):
    """DROP-1: drop compares against the version the drop itself would write (off by one).

    The store bumps the version before comparing, so the exact snapshot is refused and the
    one after it accepted.
    """

    breaks: ClassVar[str] = "DROP-1"

    def matches(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        return super().matches(state, snapshot_id, version - 1)


class DropIgnoresVersion(BaseStore):
    """DROP-2: drop retires whenever the snapshot_id matches, whatever the version.

    The version is stored but never compared.
    """

    breaks: ClassVar[str] = "DROP-2"

    def matches(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        return super().matches(state, snapshot_id, state.version)


class DropIgnoresSnapshotId(BaseStore):
    """DROP-2: drop retires whenever the version matches, whatever the snapshot_id.

    Versions start at small numbers in every rollout, so a consumer holding another rollout's
    snapshot (or a stale one) retires this one.
    """

    breaks: ClassVar[str] = "DROP-2"

    def matches(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        return super().matches(state, state.snapshot_id, version)


class DropsUnfrozen(BaseStore):
    """DROP-2: a rollout that was never frozen drops when the version matches.

    The store checks the version but not that a freeze happened, so a consumer can retire a
    rollout whose writers are still running.
    """

    breaks: ClassVar[str] = "DROP-2"

    def matches(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        if not state.frozen and not state.retired:
            return version == state.version
        return super().matches(state, snapshot_id, version)


class UnknownDropSucceeds(BaseStore):
    """DROP-2: drop of a rollout the store never saw returns True.

    "Nothing to delete" is reported as success, as ``rm -f`` would.
    """

    breaks: ClassVar[str] = "DROP-2"

    def apply_drop(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        if state == RolloutFileState():
            return True
        return super().apply_drop(state, snapshot_id, version)


class DropAcceptsNewerVersion(BaseStore):
    """DROP-2: drop accepts any version at least the current one.

    A ``>=`` where ``==`` belongs: a consumer passing a version from the future retires the
    rollout.
    """

    breaks: ClassVar[str] = "DROP-2"

    def matches(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        return version >= state.version and super().matches(state, snapshot_id, state.version)


class RefusedDropLosesRecords(BaseStore):
    """DROP-3: a refused drop returns False but has already removed the records.

    The store moves the records aside before comparing and forgets to move them back when
    the comparison fails.
    """

    breaks: ClassVar[str] = "DROP-3"

    def apply_drop(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        matched = self.matches(state, snapshot_id, version)
        state.entries.clear()
        if matched:
            self.tombstone(state)
        return matched


class RefusedDropUnfreezes(BaseStore):
    """DROP-3: a refused drop lifts the fence so that the consumer can retry.

    The next freeze mints a new snapshot_id, so the evidence the consumer holds no longer
    names the rollout's state.
    """

    breaks: ClassVar[str] = "DROP-3"

    def apply_drop(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        if super().apply_drop(state, snapshot_id, version):
            return True
        state.frozen = False
        state.snapshot_id = ""
        return False


class DropComparesFrozenVersion(BaseStore):
    """DROP-4: drop compares the version recorded at freeze, not the rollout's live version.

    A mark after freeze moves the version, but the old snapshot still matches what freeze
    recorded, so the masked rollout is retired as if it were clean.
    """

    breaks: ClassVar[str] = "DROP-4"

    def matches(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        return (
            state.frozen
            and not state.retired
            and state.snapshot_id == snapshot_id
            and state.snapshot_version == version
        )


class _WritesRefusedWhenRetired(BaseStore):
    """Reads a retired rollout like any other, but still refuses puts and marks to it."""

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        if state.retired:
            BaseStore.refuse_retired(self, rollout_id, state)
        super().apply_put(rollout_id, state, call, payload)

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        if state.retired:
            BaseStore.refuse_retired(self, rollout_id, state)
        super().apply_mark(rollout_id, state, call)


class KeepsRecordsAfterDrop(_WritesRefusedWhenRetired):
    """DROP-5: drop says True and fences the rollout, but its records still freeze.

    The store claims to delete on drop yet only writes a tombstone flag; without
    ``--tokcap-capability=no-delete`` the kit expects the records gone.
    """

    breaks: ClassVar[str] = "DROP-5"

    def tombstone(self, state: RolloutFileState) -> None:
        state.retired = True

    def refuse_retired(self, rollout_id: str, state: RolloutFileState) -> None:
        pass


class DeletesDespiteNoDelete(BaseStore):
    """DROP-5: declared no-delete (``--tokcap-capability=no-delete``), yet drop deletes.

    The framework is told the transport is append-only and relies on dropped records staying
    readable for audit, but the store removes them.
    """

    breaks: ClassVar[str] = "DROP-5"
    flags: ClassVar[tuple[str, ...]] = ("--tokcap-capability=no-delete",)


class RetiresCurrentState(BaseStore):
    """DROP-2: drop compares against the rollout's current version, not the frozen one.

    After a freeze and a mark, ``drop(snapshot_id, version + 1)`` retires a state no freeze
    returned, so no consumer ever saw the mark it destroys.
    """

    breaks: ClassVar[str] = "DROP-2"

    def matches(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        return (
            state.frozen
            and not state.retired
            and state.snapshot_id == snapshot_id
            and state.version == version
        )


class ComparesVersionByIdentity(BaseStore):
    """DROP-1: drop compares versions with ``is``, which holds only for small ints.

    The exact snapshot of a rollout past 256 state changes is refused.
    """

    breaks: ClassVar[str] = "DROP-1"

    def matches(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        return super().matches(state, snapshot_id, version) and state.version is version


class ConflictMasksWithoutBump(BaseStore):
    """DROP-4: a conflicting re-put marks the rollout incomplete but leaves the version.

    After a freeze the snapshot taken before the conflict still drops, so the consumer
    retires a rollout that lost evidence since it read it.
    """

    breaks: ClassVar[str] = "DROP-4"

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        known = state.entries.get(call)
        if known is not None and known != payload:
            state.incomplete = True
            raise ConflictingEntryError(
                f"rollout {rollout_id!r}: model_call_id {call!r} came back with another payload"
            )
        super().apply_put(rollout_id, state, call, payload)


class DropSkipsDotCalls(_WritesRefusedWhenRetired):
    """DROP-5: drop deletes each call's record by a listing that skips names starting with ``.``.

    Entries are kept one per call id and removed with a glob, which leaves dot files alone: a
    call whose id starts with a dot survives the drop, and a freeze, which finds records again,
    answers them.
    """

    breaks: ClassVar[str] = "DROP-5"

    def tombstone(self, state: RolloutFileState) -> None:
        for call in [call for call in state.entries if not call.startswith(".")]:
            del state.entries[call]
        state.intents.clear()
        state.retired = True

    def refuse_retired(self, rollout_id: str, state: RolloutFileState) -> None:
        if not any(call.startswith(".") for call in state.entries):
            super().refuse_retired(rollout_id, state)
