"""Staging stores written against NeMo Gym 0.7.0's own classes, as a Gym user writes one.

Importable only where Gym's staging records are (the interop tests put the released modules
on ``PYTHONPATH``). :class:`GymTypedStore` is correct: it takes only Gym's ``StagedCallRecord``,
answers Gym's ``StageResult`` and fetches Gym's ``StagedCallBaseSnapshot`` rows.
:class:`OwnResultClass` differs in one thing: it answers a result class of its own, which
Gym's capture refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nemo_gym.token_id_capture.staging import records as gym
from pydantic import BaseModel
from staging_base import Refused, StagingBase

from tokcap_spec.staging import StagedCallRecord


class GymTypedStore(StagingBase):
    """A correct staging store typed against Gym's classes: any other record is refused."""

    def admit(self, record: object) -> StagedCallRecord:
        if not isinstance(record, gym.StagedCallRecord):
            raise Refused(f"expected a Gym StagedCallRecord, got {type(record).__qualname__}")
        try:
            valid = gym.StagedCallRecord.model_validate(dict(vars(record)))
        except ValueError as exc:
            raise Refused(f"invalid record: {exc}") from None
        return StagedCallRecord.model_validate(valid.model_dump())

    def answer(self, ok: bool, key: str | None, error: str | None) -> Any:
        return gym.StageResult(ok=ok, staging_key=key, error=error)

    def stage(  # type: ignore[override]
        self, record: Any, *, attachments: Mapping[str, Any] | None = None
    ) -> Any:
        result = StagingBase.stage(self, record, attachments=attachments)
        return self.answer(result.ok, result.staging_key, result.error)

    def fetch(self, staging_keys: list[str]) -> list[Any]:  # type: ignore[override]
        rows = StagingBase.fetch(self, staging_keys)
        return [gym.StagedCallBaseSnapshot.model_validate(row.model_dump()) for row in rows]


class Outcome(BaseModel):
    """A result class of the store's own, with the fields of Gym's."""

    ok: bool
    staging_key: str | None = None
    error: str | None = None


class OwnResultClass(GymTypedStore):
    """STAGE-1: stage answers a result class of its own with the fields of Gym's.

    Read by its fields it is a fine answer; Gym's capture checks ``isinstance`` against its own
    ``StageResult`` and turns every call into a failed capture.
    """

    def answer(self, ok: bool, key: str | None, error: str | None) -> Any:
        return Outcome(ok=ok, staging_key=key, error=error)
