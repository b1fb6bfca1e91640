"""CLOSE mutants: a close that fails when repeated, and one that takes back what was acked."""

from __future__ import annotations

import copy
import os
from typing import ClassVar

from base import BaseStore, RolloutFileState

from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry


class CloseRaisesTwice(BaseStore):
    """CLOSE-1: the second close raises.

    The store closes its connection unconditionally, and closing a closed connection raises;
    a shutdown path that closes from two places crashes.
    """

    breaks: ClassVar[str] = "CLOSE-1"

    async def close(self) -> None:
        if self.closed:
            raise RuntimeError("store is already closed")
        await super().close()


class CloseReleasesHandleTwice(BaseStore):
    """CLOSE-1: once used, the second close raises.

    The first put opens a descriptor on the store's folder (to sync renames through it) and
    keeps it; close releases it but keeps the number, so a second close of a used store fails
    with EBADF. Closing an unused store twice is fine, so a test that never writes sees nothing.
    """

    breaks: ClassVar[str] = "CLOSE-1"

    async def put(self, entry: TokenEntry) -> None:
        if getattr(self, "_folder", None) is None:
            self._folder = os.open(self.root, os.O_RDONLY)
        await super().put(entry)

    async def close(self) -> None:
        folder = getattr(self, "_folder", None)
        if folder is not None:
            os.close(folder)
        await super().close()


class CloseAssumesUse(BaseStore):
    """CLOSE-1: closing an instance that never ran an operation raises.

    The store starts its worker pool at the first operation, and close shuts the pool down
    without asking whether there is one: a serving process that built its sink and shut down
    before any rollout came crashes on the way out.
    """

    breaks: ClassVar[str] = "CLOSE-1"

    async def put(self, entry: TokenEntry) -> None:
        self._pool = object()
        await super().put(entry)

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        self._pool = object()
        await super().mark_incomplete(rollout_id, model_call_id)

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        self._pool = object()
        return await super().freeze(rollout_id)

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        self._pool = object()
        return await super().drop(rollout_id, snapshot_id=snapshot_id, version=version)

    async def close(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is None and not self.closed:
            raise AttributeError("'NoneType' object has no attribute 'shutdown'")
        await super().close()


class CloseRevokesMarks(BaseStore):
    """CLOSE-2: close clears the incomplete marks this instance made.

    The sink treats its marks as provisional session state and withdraws them on a clean
    shutdown, so marks acked before close are lost.
    """

    breaks: ClassVar[str] = "CLOSE-2"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._marked: list[str] = []

    def apply_mark(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        super().apply_mark(rollout_id, state, call)
        self._marked.append(rollout_id)

    async def close(self) -> None:
        marked, self._marked = self._marked, []
        for rollout_id in marked:
            with self.transaction(rollout_id) as state:
                if not state.retired:
                    state.incomplete = False
        await super().close()


class TidiesEmptyRolloutsOnClose(BaseStore):
    """CLOSE-2: close removes the state of rollouts that hold no entry, marks and all.

    A tidy-up meant for rollouts that were opened and never used also takes those whose only
    call failed before it put anything, so their mark is gone and they freeze clean.
    """

    breaks: ClassVar[str] = "CLOSE-2"

    async def close(self) -> None:
        folder = os.path.join(self.root, "rollouts")
        for name in os.listdir(folder):
            if not name.endswith(".json") or name.startswith("."):
                continue
            rollout_id = name.removesuffix(".json")
            with self.locked(rollout_id):
                state = self.load(rollout_id)
                if not state.entries and not state.retired and not state.frozen:
                    os.unlink(os.path.join(folder, name))
        await super().close()


class CloseWritesBackStale(BaseStore):
    """CLOSE-2: close saves again every rollout state this instance wrote, to be sure.

    A belt-and-braces flush: but the copy it holds is its own last write, so whatever other
    instances acked to those rollouts since, entries and marks, is written over and lost.
    """

    breaks: ClassVar[str] = "CLOSE-2"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._written: dict[str, RolloutFileState] = {}

    def save(self, rollout_id: str, state: RolloutFileState) -> None:
        super().save(rollout_id, state)
        self._written[rollout_id] = copy.deepcopy(state)

    async def close(self) -> None:
        written, self._written = self._written, {}
        for rollout_id, state in written.items():
            with self.locked(rollout_id):
                super().save(rollout_id, state)
        await super().close()
