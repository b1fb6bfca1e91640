"""Mutants written on a store's own record and snapshot classes, not on tokcap's.

Each is :class:`independent.SqliteStore` with one step made wrong, so the kit's verdict is
proven on a store that imports nothing of tokcap: one bug there fails one clause.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from independent import Record, Snapshot, SqliteStore


class InfinityBecomesFloatMinimum(SqliteStore):
    """PUT-2: ``-inf`` log probs are stored as the lowest float32 and read back as that.

    A columnar transport that clamps non-finite values to the dtype's range turns an impossible
    token into a merely unlikely one.
    """

    breaks: ClassVar[str] = "PUT-2"

    @staticmethod
    def encode(record: Record) -> str:
        data = record.model_dump()
        data["generation_log_probs"] = [
            -3.4028234663852886e38 if value == float("-inf") else value
            for value in data["generation_log_probs"]
        ]
        return json.dumps(data, sort_keys=True, allow_nan=True)


class UnknownFieldsIgnored(SqliteStore):
    """PUT-2: the store's record model ignores unknown fields, so they are gone after freeze.

    A strict schema on the storage side (``extra="ignore"``) silently drops whatever a newer
    producer added.
    """

    breaks: ClassVar[str] = "PUT-2"

    @staticmethod
    def encode(record: Record) -> str:
        known = {name: getattr(record, name) for name in Record.model_fields}
        return json.dumps(known, sort_keys=True, allow_nan=True)


class NewlineSplitIntents(SqliteStore):
    """EXT-BEGIN-1: begin_call keeps only the first line of the call id.

    A line-oriented intent log splits a call id holding a newline, so the intent never matches
    its entry and a clean rollout freezes incomplete.
    """

    breaks: ClassVar[str] = "EXT-BEGIN-1"

    async def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        await super().begin_call(rollout_id, model_call_id.split("\n", 1)[0])


class VersionAsFloat(SqliteStore):
    """FREEZE-1: the snapshot's version is a float.

    A version read back from a JSON or numeric column as a float compares equal to the int
    but is not one; a consumer keying on it breaks.
    """

    breaks: ClassVar[str] = "FREEZE-1"

    async def freeze(self, rollout_id: str) -> Any:
        snapshot = await super().freeze(rollout_id)
        return Snapshot(
            rollout_id=snapshot.rollout_id,
            entries=snapshot.entries,
            incomplete=snapshot.incomplete,
            snapshot_id=snapshot.snapshot_id,
            version=float(snapshot.version),  # type: ignore[arg-type]
        )
