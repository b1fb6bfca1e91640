"""EXT mutants: intents that are ignored or mismatched, retire and delete that half work."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import unicodedata
from collections.abc import Iterable
from typing import ClassVar

from base import BaseStore, RolloutFileState

from tokcap_spec.ids import validate_rollout_id, validate_rollout_ids
from tokcap_spec.protocols import TokenCaptureSnapshot


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


class CaseFoldedIntents(BaseStore):
    """EXT-BEGIN-1: an intent counts as answered by an entry whose call id folds to the same.

    The store matches intents to entries case-insensitively and NFKC-normalized, as it would
    for user names; call ids are opaque, so ``Call-X`` began and never put looks answered by
    the entry of ``call-x``.
    """

    breaks: ClassVar[str] = "EXT-BEGIN-1"

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        found = super().snapshot(rollout_id, state)
        stored = {_folded(call) for call in state.entries}
        dangling = any(_folded(intent) not in stored for intent in state.intents)
        return dataclasses.replace(found, incomplete=state.incomplete or dangling)


def _folded(call: str) -> str:
    return unicodedata.normalize("NFKC", call).casefold().replace("/", "_").strip()


class RetireKeepsRecords(BaseStore):
    """EXT-RETIRE-1: retire fences the rollout but keeps its records, and freeze still reads them.

    Retire was written as "stop accepting writes"; the records stay for an audit, and a freeze
    of a retired rollout answers them, so an operator's cleanup brings abandoned calls back.
    """

    breaks: ClassVar[str] = "EXT-RETIRE-1"

    def _kept(self, rollout_id: str) -> str:
        folder = os.path.join(self.root, "kept")
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, self.key(rollout_id) + ".json")

    async def retire(self, rollout_ids: Iterable[str]) -> None:
        for rollout_id in validate_rollout_ids(rollout_ids):
            with self.transaction(rollout_id) as state:
                if not state.retired:
                    with open(self._kept(rollout_id), "w", encoding="utf-8") as handle:
                        json.dump(state.entries, handle)
                self.tombstone(state)

    async def delete(self, rollout_ids: Iterable[str]) -> None:
        ids = validate_rollout_ids(rollout_ids)
        for rollout_id in ids:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._kept(rollout_id))
        await super().delete(ids)

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        try:
            with open(self._kept(validate_rollout_id(rollout_id)), encoding="utf-8") as handle:
                kept = json.load(handle)
        except FileNotFoundError:
            return await super().freeze(rollout_id)
        with self.transaction(rollout_id) as state:
            return TokenCaptureSnapshot(
                rollout_id=rollout_id,
                entries=tuple(self.decode(stored) for stored in kept.values()),
                incomplete=state.incomplete,
                snapshot_id=state.snapshot_id or "retired",
                version=state.version,
            )


class DeleteOnlyTombstones(BaseStore):
    """EXT-RETIRE-1: delete clears only rollouts that were retired, and ignores live ones.

    Delete was written to let retired ids be used again, so it removes tombstones; a rollout
    deleted without being retired keeps its records and marks, and the id's next attempt
    inherits them.
    """

    breaks: ClassVar[str] = "EXT-RETIRE-1"

    def forget(self, state: RolloutFileState) -> None:
        if state.retired:
            super().forget(state)


class DeleteBindsOneKey(BaseStore):
    """EXT-RETIRE-1: delete of several ids at once removes none of them.

    The ids are joined into one parameter for a single ``IN (?)`` query, so one id is
    deleted and several match nothing: the ids stay fenced and keep their records.
    """

    breaks: ClassVar[str] = "EXT-RETIRE-1"

    async def delete(self, rollout_ids: Iterable[str]) -> None:
        ids = [rollout_ids] if isinstance(rollout_ids, str) else list(rollout_ids)
        if len(ids) == 1:
            await super().delete(ids)
