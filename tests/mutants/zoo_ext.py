"""EXT mutants: intents that are ignored or mismatched, retire and delete that half work."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from base import BaseStore, RolloutFileState


class IgnoresIntents(BaseStore):
    """EXT-BEGIN-1: begin_call is acked and records nothing.

    A call that began and never put its entry leaves no trace, so the rollout freezes clean
    with a call missing.
    """

    breaks: ClassVar[str] = "EXT-BEGIN-1"

    def apply_begin(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        self.refuse_retired(rollout_id, state)


class FirstLineIntents(BaseStore):
    """EXT-BEGIN-1: intents are recorded by the first line of the call id.

    The intent log is line-oriented, so an intent for a multi-line call id never matches its
    entry and the rollout freezes incomplete although every call finished.
    """

    breaks: ClassVar[str] = "EXT-BEGIN-1"

    def apply_begin(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        super().apply_begin(rollout_id, state, call.split("\n", 1)[0] or "-")


class RetireWithoutFence(BaseStore):
    """EXT-RETIRE-1: retire removes the records but leaves no fence.

    Retire is implemented as delete, so a late write after retirement starts a new rollout.
    """

    breaks: ClassVar[str] = "EXT-RETIRE-1"

    async def retire(self, rollout_ids: Iterable[str]) -> None:
        await self.delete(rollout_ids)


class DeleteKeepsFence(BaseStore):
    """EXT-RETIRE-1: delete removes the records but keeps the tombstone.

    Delete is implemented as retire, so the id can never be used again.
    """

    breaks: ClassVar[str] = "EXT-RETIRE-1"

    def forget(self, state: RolloutFileState) -> None:
        self.tombstone(state)


class RetireRefusesUnknown(BaseStore):
    """EXT-RETIRE-1: retire raises KeyError for a rollout the store never saw.

    A batch retire that looks each id up first fails on ids whose writers never got to run.
    """

    breaks: ClassVar[str] = "EXT-RETIRE-1"

    def tombstone(self, state: RolloutFileState) -> None:
        if state == RolloutFileState():
            raise KeyError("unknown rollout")
        super().tombstone(state)
