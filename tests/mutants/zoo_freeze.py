"""FREEZE mutants: badly typed identities, unstable snapshots, doubled or invented evidence."""

from __future__ import annotations

import hashlib
import os
import uuid
from typing import Any, ClassVar

from base import BaseStore, RolloutFileState

from tokcap_spec.ids import validate_rollout_id
from tokcap_spec.protocols import TokenCaptureSnapshot


def _with(found: TokenCaptureSnapshot, **changes: Any) -> TokenCaptureSnapshot:
    fields = {
        "rollout_id": found.rollout_id,
        "entries": found.entries,
        "incomplete": found.incomplete,
        "snapshot_id": found.snapshot_id,
        "version": found.version,
    }
    fields.update(changes)
    return TokenCaptureSnapshot(**fields)


class VersionAsString(BaseStore):
    """FREEZE-1: the snapshot's version is a str.

    The version is read back from a text protocol (a Redis reply, an HTTP header) and never
    converted, so it compares unequal to every int a consumer passes back.
    """

    breaks: ClassVar[str] = "FREEZE-1"

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        return _with(super().snapshot(rollout_id, state), version=str(state.version))


class VersionNone(BaseStore):
    """FREEZE-1: the snapshot's version is None.

    The store has no version of its own and leaves the field empty, so a consumer cannot
    name the state it consumed.
    """

    breaks: ClassVar[str] = "FREEZE-1"

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        return _with(super().snapshot(rollout_id, state), version=None)


class EmptySnapshotId(BaseStore):
    """FREEZE-1: the snapshot_id is always empty.

    The store relies on the version alone and leaves snapshot_id at its default.
    """

    breaks: ClassVar[str] = "FREEZE-1"

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        return _with(super().snapshot(rollout_id, state), snapshot_id="")


class StorageKeyAsRolloutId(BaseStore):
    """FREEZE-1: the snapshot names its storage file instead of the rollout id it was frozen from.

    The reader builds snapshots from the files it scanned and fills rollout_id from the file
    name.
    """

    breaks: ClassVar[str] = "FREEZE-1"

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        name = os.path.basename(self.state_path(rollout_id))
        return _with(super().snapshot(rollout_id, state), rollout_id=name)


class NewSnapshotIdEachFreeze(BaseStore):
    """FREEZE-2: every freeze mints a new snapshot_id, even with no write in between.

    The id is minted per call instead of per state, so a consumer that freezes twice (a retry,
    a second reader) holds two names for one state.
    """

    breaks: ClassVar[str] = "FREEZE-2"

    def apply_freeze(self, rollout_id: str, state: RolloutFileState) -> None:
        super().apply_freeze(rollout_id, state)
        state.snapshot_id = uuid.uuid4().hex


class FreezeBumpsVersion(BaseStore):
    """FREEZE-2: every freeze counts as a state change and bumps the version.

    The store treats "frozen at" as part of the state, so two freezes never agree.
    """

    breaks: ClassVar[str] = "FREEZE-2"

    def apply_freeze(self, rollout_id: str, state: RolloutFileState) -> None:
        state.version += 1
        super().apply_freeze(rollout_id, state)


class InstanceLocalSnapshotId(BaseStore):
    """FREEZE-2: snapshot ids live in the source instance's memory.

    Each reader process mints its own id for the same state, so freezes from two instances
    disagree and only the instance that froze can drop.
    """

    breaks: ClassVar[str] = "FREEZE-2"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._ids: dict[tuple[str, int], str] = {}
        self._dropping = ""

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        local = self._ids.setdefault((rollout_id, state.version), uuid.uuid4().hex)
        return _with(super().snapshot(rollout_id, state), snapshot_id=local)

    def apply_drop(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        known = self._ids.get((self._dropping, version))
        return known == snapshot_id and super().apply_drop(state, state.snapshot_id, version)

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        self._dropping = rollout_id
        return await super().drop(rollout_id, snapshot_id=snapshot_id, version=version)


_PROCESS_KEY = os.urandom(16).hex()
"""A key each process draws when it imports the store, as ``hash()`` salts itself."""


class ProcessSaltedSnapshotId(BaseStore):
    """FREEZE-2: the snapshot id is a hash keyed by a secret each process draws at start.

    Every instance in one process agrees, so freezes and drops within it work; a consumer in
    another process (a trainer, a sweeper) gets another id for the same state, and its drop
    never matches. ``hash()`` of the stored state does the same: Python salts it per process.
    """

    breaks: ClassVar[str] = "FREEZE-2"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._dropping = ""

    def _salted(self, rollout_id: str, stored_id: str) -> str:
        return hashlib.sha256(f"{_PROCESS_KEY}:{rollout_id}:{stored_id}".encode()).hexdigest()

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        salted = self._salted(rollout_id, state.snapshot_id)
        return _with(super().snapshot(rollout_id, state), snapshot_id=salted)

    def apply_drop(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        mine = self._salted(self._dropping, state.snapshot_id)
        return snapshot_id == mine and super().apply_drop(state, state.snapshot_id, version)

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        self._dropping = rollout_id
        return await super().drop(rollout_id, snapshot_id=snapshot_id, version=version)


class SetOrderedSnapshotId(BaseStore):
    """FREEZE-2: the snapshot id hashes the rollout's entries in the order a set of them gives.

    Entry order carries no meaning, so a set seemed the honest container; but a set of strings
    iterates in an order Python salts per process. Once a rollout holds a few entries, a
    consumer in another process gets another id for the same state, and its drop never matches.
    """

    breaks: ClassVar[str] = "FREEZE-2"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._dropping = ""

    def _ordered(self, rollout_id: str, state: RolloutFileState) -> str:
        members = {f"{call}={len(stored)}" for call, stored in state.entries.items()}
        digest = hashlib.sha256(f"{rollout_id}|{state.snapshot_id}".encode())
        for member in members:
            digest.update(member.encode())
        return digest.hexdigest()

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        found = super().snapshot(rollout_id, state)
        return _with(found, snapshot_id=self._ordered(rollout_id, state))

    def apply_drop(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        mine = self._ordered(self._dropping, state)
        return snapshot_id == mine and super().apply_drop(state, state.snapshot_id, version)

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        self._dropping = rollout_id
        return await super().drop(rollout_id, snapshot_id=snapshot_id, version=version)


class DoubledEntries(BaseStore):
    """FREEZE-3: freeze returns every entry twice.

    The reader merges the write-ahead log with the compacted table and does not de-duplicate
    by model_call_id.
    """

    breaks: ClassVar[str] = "FREEZE-3"

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        found = super().snapshot(rollout_id, state)
        copies = tuple(self.decode(stored) for stored in state.entries.values())
        return _with(found, entries=found.entries + copies)


class StaleIndexAppends(BaseStore):
    """FREEZE-3: an identical re-put of a call another sink stored is logged a second time.

    Each instance indexes a rollout's call ids when it first touches the rollout, so a put
    never re-reads the log, and trusts that index after: a call another sink put since is
    new to it, its identical re-put is appended again, and the snapshot lists the call twice.
    """

    breaks: ClassVar[str] = "FREEZE-3"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._known: dict[str, set[str]] = {}

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        known = self._known.setdefault(rollout_id, set(state.entries))
        stale = call in state.entries and call not in known and not state.frozen
        if stale and state.entries[call] == payload:
            self.refuse_retired(rollout_id, state)
            state.entries[f"{call}\x00again-{len(state.entries)}"] = payload
            self.bump(state)
        else:
            super().apply_put(rollout_id, state, call, payload)
        known.add(call)


class OwnPutsDeduplicated(BaseStore):
    """FREEZE-3: a sink recognises re-puts only of calls it put itself.

    Each instance keeps the digests of the entries it acked and appends any other put to the
    log without looking there: a retry that lands on another serving process (a fresh sink)
    logs the call a second time, and the snapshot lists it twice.
    """

    breaks: ClassVar[str] = "FREEZE-3"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._acked: set[tuple[str, str, str]] = set()

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        mine = (rollout_id, call, payload)
        if call in state.entries and mine not in self._acked and state.entries[call] == payload:
            self.refuse_retired(rollout_id, state)
            if state.frozen and self.fence == "strict":
                super().apply_put(rollout_id, state, call, payload)
                return
            state.entries[f"{call}\x00again-{len(state.entries)}"] = payload
            self.bump(state)
        else:
            super().apply_put(rollout_id, state, call, payload)
        self._acked.add(mine)


class UnknownIsIncomplete(BaseStore):
    """FREEZE-4: a rollout that was never written freezes incomplete.

    The store reads "no state file" as "evidence lost", so a rollout whose model never got to
    run is masked instead of being empty and clean.
    """

    breaks: ClassVar[str] = "FREEZE-4"

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        found = super().snapshot(rollout_id, state)
        never_written = not state.entries and not state.intents and state.version == 0
        return _with(found, incomplete=True) if never_written else found


class UnknownRaises(BaseStore):
    """FREEZE-4: freezing a rollout that was never written raises KeyError.

    The reader looks the rollout up and treats a miss as an error instead of an empty
    snapshot.
    """

    breaks: ClassVar[str] = "FREEZE-4"

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        if not os.path.exists(self.state_path(rollout_id)):
            raise KeyError(rollout_id)
        return await super().freeze(rollout_id)


class ReadThenFence(BaseStore):
    """FREEZE-5: freeze reads the entries first and fences in a second, separate step.

    A put acked between the read and the fence is missing from the snapshot, yet the
    snapshot carries the version that includes it, so dropping it retires an entry nobody
    consumed.
    """

    breaks: ClassVar[str] = "FREEZE-5"

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        rollout_id = validate_rollout_id(rollout_id)
        seen = self.load(rollout_id)
        with self.transaction(rollout_id) as state:
            self.apply_freeze(rollout_id, state)
            found = self.snapshot(rollout_id, state)
        return _with(found, entries=tuple(self.decode(stored) for stored in seen.entries.values()))


class ConflictKeptBeside(BaseStore):
    """FREEZE-3: a conflicting re-put masks the rollout and is kept beside the first payload.

    Keeping both versions as evidence is well meant, but the snapshot then lists the call
    twice, and a consumer that builds turns by call id gets one turn two ways.
    """

    breaks: ClassVar[str] = "FREEZE-3"

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        known = state.entries.get(call)
        if known is not None and known != payload:
            state.incomplete = True
            state.entries[f"{call}\x00conflict-{len(state.entries)}"] = payload
            self.bump(state)
            return
        super().apply_put(rollout_id, state, call, payload)


class ComparesVersionsByIdentity(BaseStore):
    """FREEZE-2: whether the rollout changed since its last snapshot is asked with ``is``.

    CPython keeps one int object per value only from -5 to 256, and the state is parsed anew
    from its file on every freeze. Every short rollout passes; once a conversation has seen
    more than 256 changes, each freeze finds "another" version and mints a new snapshot id.
    """

    breaks: ClassVar[str] = "FREEZE-2"

    def apply_freeze(self, rollout_id: str, state: RolloutFileState) -> None:
        self.refuse_retired(rollout_id, state)
        state.frozen = True
        if not state.snapshot_id or state.snapshot_version is not state.version:
            state.snapshot_id = uuid.uuid4().hex
            state.snapshot_version = state.version
