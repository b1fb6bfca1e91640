"""A correct store with a relaxed fence, shared by processes through one directory.

Each rollout is one JSON state file guarded by its own ``flock``; every method is a single
locked read-modify-replace, so every step is atomic across processes. A put of a new call
after ``freeze`` is accepted and bumps the version (relaxed fence, FENCE-1); ``strict = True``
in a subclass refuses it instead. The concurrency mutants subclass this store and break one
step each.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

from tokcap_spec.errors import ConflictingEntryError, RolloutFrozenError, RolloutRetiredError
from tokcap_spec.ids import validate_rollout_id
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry

__all__ = ["RelaxedFileStore", "RolloutState", "StrictFileStore"]

RolloutState = dict[str, Any]
"""``entries`` (call id -> canonical JSON text), ``incomplete``, ``version``, ``frozen``
(``[snapshot_id, version]`` or None) and ``dropped``."""


def _empty() -> RolloutState:
    return {"entries": {}, "incomplete": False, "version": 0, "frozen": None, "dropped": False}


class RelaxedFileStore:
    """A TokenSink and TokenSource over the directory ``root``, with a relaxed fence."""

    strict = False

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)

    @contextlib.contextmanager
    def locked(self, rollout_id: str) -> Iterator[None]:
        """Hold the rollout's lock, excluding every other instance in every process."""
        path = os.path.join(self.root, validate_rollout_id(rollout_id) + ".lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def load(self, rollout_id: str) -> RolloutState:
        """Read the rollout's state; call with its lock held."""
        try:
            with open(os.path.join(self.root, rollout_id + ".json"), encoding="utf-8") as file:
                state: RolloutState = json.load(file)
        except FileNotFoundError:
            return _empty()
        return state

    def save(self, rollout_id: str, state: RolloutState) -> None:
        """Replace the rollout's state in one rename; call with its lock held."""
        path = os.path.join(self.root, rollout_id + ".json")
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump(state, file)
        os.replace(temporary, path)

    def bump(self, state: RolloutState) -> None:
        """Record one state change: the version moves so older snapshots no longer drop."""
        state["version"] += 1

    async def put(self, entry: TokenEntry) -> None:
        rollout_id = entry.rollout_id
        payload = entry.to_json_bytes().decode("utf-8")
        with self.locked(rollout_id):
            state = self.load(rollout_id)
            self.apply_put(rollout_id, state, entry.model_call_id, payload)

    def apply_put(self, rollout_id: str, state: RolloutState, call: str, payload: str) -> None:
        """Apply one put to ``state`` and save it; raise when the contract refuses it."""
        if state["dropped"]:
            raise RolloutRetiredError(f"rollout {rollout_id!r} was dropped")
        known = state["entries"].get(call)
        if known == payload:
            return
        if known is not None:
            state["incomplete"] = True
            self.bump(state)
            self.save(rollout_id, state)
            raise ConflictingEntryError(f"call {call!r} came back with another payload")
        if self.strict and state["frozen"] is not None:
            raise RolloutFrozenError(f"rollout {rollout_id!r} is frozen")
        state["entries"][call] = payload
        self.bump(state)
        self.save(rollout_id, state)

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        with self.locked(rollout_id):
            state = self.load(rollout_id)
            state["incomplete"] = True
            self.bump(state)
            self.save(rollout_id, state)

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        with self.locked(rollout_id):
            state = self.load(rollout_id)
            self.stamp(rollout_id, state)
        return self.snapshot(rollout_id, state)

    def stamp(self, rollout_id: str, state: RolloutState) -> None:
        """Name the current state with a snapshot id (kept while the state stays) and save it."""
        frozen = state["frozen"]
        if frozen is None or frozen[1] != state["version"]:
            state["frozen"] = [uuid.uuid4().hex, state["version"]]
            self.save(rollout_id, state)

    def snapshot(self, rollout_id: str, state: RolloutState) -> TokenCaptureSnapshot:
        """Return the snapshot a stamped state describes."""
        snapshot_id, version = state["frozen"]
        return TokenCaptureSnapshot(
            rollout_id=rollout_id,
            entries=tuple(TokenEntry.from_json_bytes(text) for text in state["entries"].values()),
            incomplete=state["incomplete"],
            snapshot_id=snapshot_id,
            version=version,
        )

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        with self.locked(rollout_id):
            state = self.load(rollout_id)
            if not self.matches(state, snapshot_id, version):
                return False
            self.retire(rollout_id, state)
        return True

    def matches(self, state: RolloutState, snapshot_id: str, version: int) -> bool:
        """Return whether ``state`` is still frozen at exactly this snapshot."""
        return (
            not state["dropped"]
            and state["frozen"] == [snapshot_id, version]
            and version == state["version"]
        )

    def retire(self, rollout_id: str, state: RolloutState) -> None:
        """Delete the records and leave a tombstone; a mark after it is still recorded."""
        tombstone = _empty()
        tombstone.update(dropped=True, version=state["version"] + 1)
        self.save(rollout_id, tombstone)

    async def close(self) -> None:
        return None


class StrictFileStore(RelaxedFileStore):
    """The same store with a strict fence: a new call after freeze raises."""

    strict = True
