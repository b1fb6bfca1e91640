"""The staging wire records of NeMo Gym 0.7.0 (schema version 2), field for field.

A :class:`StagedCallRecord` is one call's token delta as a staging sink makes it durable; a
:class:`StagedCallBaseSnapshot` is the same record without its extras, the row a staging source
fetches; :class:`StageResult` is what the sink answers. What validates here validates as Gym's
records, and the other way round:

- fields are Gym's, by name, type and order; an unknown field is refused; in a staged call a
  string is never read as a number nor a float as an ``int`` (an ``int`` mask or log prob is
  read as a ``float``), while ``StageResult.ok`` reads as pydantic reads a ``bool`` (``"true"``
  and ``1`` are ``True``); NaN and infinity are refused; token ids and lengths go up to
  2**64 - 1; a version is compared by value, as pydantic compares literals (``2.0`` is read as
  schema version 2, ``True`` as extras digest version 1), and any other is refused;
- a root (no ``parent_call_id``) is a ``"text"`` call with ``prev_len`` 0, a child a
  ``"token_in"`` call with ``prev_len`` above 0; the delta has ``delta_len`` tokens, at least
  one, and ``cum_len`` is ``prev_len + delta_len``;
- masks are ``0.0`` or ``1.0``, and a token masked out has log prob zero;
- ``digest`` is :func:`~tokcap_spec.staging.digest.staged_call_digest` of the other fields, and
  on a record with extras ``extras_digest`` is
  :func:`~tokcap_spec.staging.extras.extras_digest` of them.

``chain_hash`` and ``cumulative_hash`` are committed to by ``digest`` but cannot be checked on
one record: they need the parent and the tokens before the delta.

Records are frozen. Validation keeps every float as given: the digest commits to its float32
rounding, so two records whose log probs differ only beyond float32 share one digest.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)

from tokcap_spec.staging.digest import staged_call_digest
from tokcap_spec.staging.extras import EMPTY_EXTRAS_DIGEST, extras_digest
from tokcap_spec.staging.versions import (
    EXTRAS_DIGEST_VERSION,
    STAGING_DIGEST_VERSION,
    STAGING_SCHEMA_VERSION,
)

__all__ = [
    "CaptureMode",
    "StageResult",
    "StagedCallBaseSnapshot",
    "StagedCallRecord",
    "StagedCallSnapshot",
    "staging_key",
]

CaptureMode = Literal["token_in", "text"]
"""``"text"`` for a root call, ``"token_in"`` for a call continuing its parent's tokens."""

Identifier = Annotated[StrictStr, Field(min_length=1)]
Count = Annotated[StrictInt, Field(ge=0)]
HexDigest = Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{64}$")]


def staging_key(rollout_id: str, model_call_id: str) -> str:
    """The default key a call is staged under: ``"{rollout_id}/{model_call_id}"``.

    Raises ``ValueError`` when either id is empty. Ids may themselves hold ``/``, so two calls
    can share a key (``"a/b", "c"`` and ``"a", "b/c"``): a sink that keys by it must keep
    such ids apart some other way, as :func:`~tokcap_spec.staging.distinct_staging_key` does:
    every valid call must stage, whatever its ids hold (STAGE-5).
    """
    if not rollout_id or not model_call_id:
        raise ValueError("rollout_id and model_call_id must not be empty")
    return f"{rollout_id}/{model_call_id}"


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    schema_version: Literal[2] = STAGING_SCHEMA_VERSION


class _DigestedWire(_Wire):
    digest_version: Literal[2] = STAGING_DIGEST_VERSION
    extras_digest_version: Literal[1] = EXTRAS_DIGEST_VERSION


class StagedCallBaseSnapshot(_DigestedWire):
    """One staged call's identity, lengths and token columns, without its extras.

    Validation recomputes ``digest`` from the fields, ``extras_digest`` included, and refuses a
    record it does not match. Whether extras exist that match ``extras_digest`` is not checked:
    a consumer that loads them checks them with
    :func:`~tokcap_spec.staging.extras.extras_digest`.
    """

    rollout_id: Identifier
    model_call_id: Identifier
    parent_call_id: Identifier | None = None
    mode: CaptureMode
    prev_len: Count
    delta_len: Count
    cum_len: Count
    weight_version: Count
    digest: HexDigest
    token_ids_delta: list[StrictInt]
    token_mask_delta: list[StrictFloat]
    generation_log_probs_delta: list[StrictFloat]
    extras_digest: HexDigest = EMPTY_EXTRAS_DIGEST
    chain_hash: HexDigest
    cumulative_hash: HexDigest

    @property
    def staging_key(self) -> str:
        """This call's default staging key (:func:`staging_key`)."""
        return staging_key(self.rollout_id, self.model_call_id)

    @model_validator(mode="after")
    def _digest_matches(self) -> StagedCallBaseSnapshot:
        fields = {name: getattr(self, name) for name in _DIGESTED_FIELDS}
        if staged_call_digest(**fields) != self.digest:
            raise ValueError("digest is not the digest of the staged call's fields")
        return self


class StagedCallRecord(StagedCallBaseSnapshot):
    """One call's token delta as a staging sink makes it durable, with its extras if any.

    Validation also recomputes ``extras_digest`` from ``extras`` (``None`` when there are
    none) and refuses a record it does not match, or whose extras hold a value the extras
    digest has no encoding for.
    """

    extras: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _extras_digest_matches(self) -> StagedCallRecord:
        try:
            actual = extras_digest(self.extras)
        except TypeError as exc:
            # Refused as every other invalid field is: a ValidationError, not a bare TypeError.
            raise ValueError(str(exc)) from exc
        if actual != self.extras_digest:
            raise ValueError("extras_digest is not the digest of extras")
        return self


class StagedCallSnapshot(StagedCallRecord):
    """A staged record exactly as a staging source returns it, extras included."""


class StageResult(_Wire):
    """A staging sink's answer to one ``stage``: the key it staged under, or why it did not.

    A success (``ok``) names its ``staging_key``; a failure carries a non-empty ``error``.
    """

    ok: bool
    staging_key: Identifier | None = None
    error: str | None = None

    @model_validator(mode="after")
    def _says_where_or_why(self) -> StageResult:
        if self.ok and self.staging_key is None:
            raise ValueError("a successful stage names its staging_key")
        if not self.ok and not self.error:
            raise ValueError("a failed stage says why in error")
        return self


_DIGESTED_FIELDS = tuple(
    name for name in StagedCallBaseSnapshot.model_fields if name not in {"digest", "extras"}
)
