"""CLOSE mutants: a close that fails when repeated, and one that takes back what was acked."""

from __future__ import annotations

from typing import ClassVar

from base import BaseStore, RolloutFileState


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
