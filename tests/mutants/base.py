"""A small, correct, cross-process token store: the yardstick every mutant varies.

:class:`BaseStore` keeps one JSON state file per rollout under ``root/rollouts``. Every
operation is a read-modify-write of that file under an exclusive ``fcntl.flock`` on the
rollout's lock file, and every change is written to a temporary file, fsynced and renamed
into place, so a fresh instance in any process sees exactly what was acknowledged.
Simplicity wins over speed: the event loop blocks on disk I/O.

Promises, per rollout:

* ``put`` of a new call before ``freeze`` stores it and bumps the version; an identical
  re-put is a no-op; a different payload under a known call id marks the rollout incomplete,
  bumps the version and raises :class:`ConflictingEntryError`. A new call after ``freeze``
  raises :class:`RolloutFrozenError` under the strict fence (``fence = "strict"``, the
  default) and is stored with a version bump under the relaxed one (``fence = "relaxed"``,
  :class:`RelaxedFileStore`), so the earlier snapshot no longer drops.
* ``mark_incomplete`` is sticky, bumps the version and works after ``freeze``.
* ``begin_call`` records an intent; an intent with no entry at freeze makes it incomplete.
  After ``freeze`` a new intent is refused or recorded as a new call is.
* ``freeze`` fences the rollout, even one never written, and mints a new ``snapshot_id`` only
  when the state changed since the last freeze; entries are fresh copies.
* ``drop`` returns True only for the exact ``(snapshot_id, version)`` of a frozen rollout,
  then removes its records and leaves a tombstone. ``retire`` tombstones whatever the state;
  ``delete`` forgets the rollout so its id can be used again.
* After a drop or retire every write and every freeze raises :class:`RolloutRetiredError`.

The storage steps (locking, loading, saving, the version bump, the write a put makes) and
the rules of each operation are separate methods, so that each mutant replaces exactly one.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import ClassVar, Literal

from tokcap_spec.errors import ConflictingEntryError, RolloutFrozenError, RolloutRetiredError
from tokcap_spec.ids import validate_rollout_id
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry

__all__ = ["BaseStore", "RelaxedFileStore", "RolloutFileState"]


@dataclass
class RolloutFileState:
    """Everything one rollout's state file holds; ``version`` counts every state change."""

    entries: dict[str, str] = field(default_factory=dict)
    intents: list[str] = field(default_factory=list)
    incomplete: bool = False
    frozen: bool = False
    retired: bool = False
    version: int = 0
    snapshot_id: str = ""
    snapshot_version: int = -1
    deleted: bool = False


class BaseStore:
    """A durable, multi-process token sink and source kept under the directory ``root``."""

    fence: ClassVar[Literal["strict", "relaxed"]] = "strict"
    """What a new call after ``freeze`` meets: a refusal (strict) or a version bump (relaxed)."""

    def __init__(self, root: str) -> None:
        if not isinstance(root, str) or not root:
            raise TypeError(f"root must be a non-empty str path, got {type(root).__name__}")
        self.root = os.path.abspath(root)
        self.closed = False
        os.makedirs(os.path.join(self.root, "rollouts"), exist_ok=True)
        os.makedirs(os.path.join(self.root, "locks"), exist_ok=True)

    # Storage: where a rollout lives and how entries are written.

    def key(self, rollout_id: str) -> str:
        """Return the file stem of a rollout; ids are already safe file names."""
        return rollout_id

    def encode(self, entry: TokenEntry) -> str:
        """Return the stored form of an entry."""
        return entry.to_json_bytes().decode("utf-8")

    def decode(self, stored: str) -> TokenEntry:
        """Return a new entry from its stored form."""
        return TokenEntry.from_json_bytes(stored)

    def state_path(self, rollout_id: str) -> str:
        return os.path.join(self.root, "rollouts", self.key(rollout_id) + ".json")

    def load(self, rollout_id: str) -> RolloutFileState:
        """Return the rollout's state as stored, or a new empty state."""
        try:
            with open(self.state_path(rollout_id), encoding="utf-8") as handle:
                return RolloutFileState(**json.load(handle))
        except FileNotFoundError:
            return RolloutFileState()

    def save(self, rollout_id: str, state: RolloutFileState) -> None:
        """Make ``state`` the rollout's durable state: temporary file, fsync, rename, fsync."""
        path = self.state_path(rollout_id)
        directory = os.path.dirname(path)
        if state.deleted:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        else:
            descriptor, temporary = tempfile.mkstemp(prefix=".tmp-", dir=directory)
            try:
                with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                    json.dump(asdict(state), handle, ensure_ascii=False)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(temporary, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temporary)
                raise
        directory_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)

    @contextlib.contextmanager
    def locked(self, rollout_id: str) -> Iterator[None]:
        """Hold the rollout's exclusive lock, against every instance in every process."""
        lock_path = os.path.join(self.root, "locks", self.key(rollout_id))
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    @contextlib.contextmanager
    def saving(self, rollout_id: str, state: RolloutFileState) -> Iterator[RolloutFileState]:
        """Yield ``state`` to be changed, then save it if it changed, even when the body raises.

        Saving on a raise makes a refusal that also records something (a conflicting re-put
        marks the rollout) durable before it propagates.
        """
        before = copy.deepcopy(state)
        try:
            yield state
        finally:
            if state != before:
                self.save(rollout_id, state)

    @contextlib.contextmanager
    def transaction(self, rollout_id: str) -> Iterator[RolloutFileState]:
        """One read-modify-write of the rollout: load under its lock, save what changed."""
        with self.locked(rollout_id), self.saving(rollout_id, self.load(rollout_id)) as state:
            yield state

    def bump(self, state: RolloutFileState) -> None:
        """Record one change: the version moves, so earlier snapshots no longer drop."""
        state.version += 1

    # Rules: what each operation does to one rollout's state.

    def refuse_retired(self, rollout_id: str, state: RolloutFileState) -> None:
        if state.retired:
            raise RolloutRetiredError(
                f"rollout {rollout_id!r} was already dropped or retired; expected a live rollout"
            )

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        self.refuse_retired(rollout_id, state)
        known = state.entries.get(call)
        if known == payload:
            return
        if known is not None:
            state.incomplete = True
            self.bump(state)
            raise ConflictingEntryError(
                f"rollout {rollout_id!r}: model_call_id {call!r} was already stored with a "
                "different payload; the rollout is now marked incomplete"
            )
        if state.frozen and self.fence == "strict":
            raise RolloutFrozenError(
                f"rollout {rollout_id!r} is frozen; expected no new call, got {call!r}"
            )
        state.entries[call] = payload
        self.bump(state)

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        self.refuse_retired(rollout_id, state)
        state.incomplete = True
        self.bump(state)

    def apply_begin(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        self.refuse_retired(rollout_id, state)
        if call in state.intents or call in state.entries:
            return
        if state.frozen and self.fence == "strict":
            raise RolloutFrozenError(
                f"rollout {rollout_id!r} is frozen; expected no new call, got an intent {call!r}"
            )
        state.intents.append(call)
        self.bump(state)

    def apply_freeze(self, rollout_id: str, state: RolloutFileState) -> None:
        self.refuse_retired(rollout_id, state)
        state.frozen = True
        if not state.snapshot_id or state.snapshot_version != state.version:
            state.snapshot_id = uuid.uuid4().hex
            state.snapshot_version = state.version

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        entries = tuple(self.decode(stored) for stored in state.entries.values())
        dangling = any(intent not in state.entries for intent in state.intents)
        return TokenCaptureSnapshot(
            rollout_id=rollout_id,
            entries=entries,
            incomplete=state.incomplete or dangling,
            snapshot_id=state.snapshot_id,
            version=state.version,
        )

    def matches(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        """Return whether ``(snapshot_id, version)`` names the rollout's current frozen state."""
        return (
            state.frozen
            and not state.retired
            and bool(state.snapshot_id)
            and state.snapshot_id == snapshot_id
            and state.snapshot_version == state.version
            and type(version) is int
            and state.version == version
        )

    def apply_drop(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        if not self.matches(state, snapshot_id, version):
            return False
        self.tombstone(state)
        return True

    def tombstone(self, state: RolloutFileState) -> None:
        """Remove the records and fence the rollout for good."""
        state.entries.clear()
        state.intents.clear()
        state.retired = True

    def forget(self, state: RolloutFileState) -> None:
        """Remove the records and the fence."""
        state.deleted = True

    def write(self, entry: TokenEntry) -> None:
        """Make a checked entry durable before returning: the step a put acknowledges."""
        with self.transaction(entry.rollout_id) as state:
            self.apply_put(entry.rollout_id, state, entry.model_call_id, self.encode(entry))

    # The protocol.

    async def put(self, entry: TokenEntry) -> None:
        """Store ``entry`` durably; refuse conflicts, late calls (strict) and retired rollouts."""
        if not isinstance(entry, TokenEntry):
            raise TypeError(f"put expects a TokenEntry, got {type(entry).__name__}")
        validate_rollout_id(entry.rollout_id)
        self.write(entry)

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        """Mark the rollout incomplete for good and bump its version, frozen or not."""
        rollout_id = validate_rollout_id(rollout_id)
        if not isinstance(model_call_id, str):
            raise TypeError(f"model_call_id must be a str, got {type(model_call_id).__name__}")
        with self.transaction(rollout_id) as state:
            self.apply_mark(rollout_id, state, model_call_id)

    async def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        """Record that ``model_call_id`` started; a freeze before its entry is incomplete."""
        rollout_id = validate_rollout_id(rollout_id)
        if not isinstance(model_call_id, str) or not model_call_id:
            raise ValueError(f"model_call_id must be a non-empty str, got {model_call_id!r}")
        with self.transaction(rollout_id) as state:
            self.apply_begin(rollout_id, state, model_call_id)

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        """Fence the rollout and return a snapshot of fresh copies of its entries."""
        rollout_id = validate_rollout_id(rollout_id)
        with self.transaction(rollout_id) as state:
            self.apply_freeze(rollout_id, state)
            return self.snapshot(rollout_id, state)

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        """Retire the rollout if it is frozen at exactly this snapshot; else destroy nothing."""
        rollout_id = validate_rollout_id(rollout_id)
        with self.transaction(rollout_id) as state:
            return self.apply_drop(state, snapshot_id, version)

    async def retire(self, rollout_ids: Iterable[str]) -> None:
        """Remove and fence each rollout whatever its state; repeating it is a no-op."""
        for rollout_id in _rollout_ids(rollout_ids):
            with self.transaction(rollout_id) as state:
                self.tombstone(state)

    async def delete(self, rollout_ids: Iterable[str]) -> None:
        """Forget each rollout, records and fence alike, so its id starts from nothing."""
        for rollout_id in _rollout_ids(rollout_ids):
            with self.transaction(rollout_id) as state:
                self.forget(state)

    async def close(self) -> None:
        """Nothing to release: every acknowledged write is already durable. Idempotent."""
        self.closed = True


def _rollout_ids(rollout_ids: Iterable[str]) -> list[str]:
    if isinstance(rollout_ids, str):
        raise TypeError(f"expected an iterable of rollout ids, got the string {rollout_ids!r}")
    return [validate_rollout_id(rollout_id) for rollout_id in rollout_ids]


class RelaxedFileStore(BaseStore):
    """The correct baseline store with a relaxed fence (``base:RelaxedFileStore``).

    A put of a new call after ``freeze`` is stored and moves the version, so dropping the
    earlier snapshot returns False (FENCE-1, relaxed).
    """

    fence: ClassVar[Literal["strict", "relaxed"]] = "relaxed"
