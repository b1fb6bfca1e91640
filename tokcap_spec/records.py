"""The training-token record: one model call's prompt, generation and log probs.

A :class:`TokenEntry` is what a sink stores and a source hands back. Its promises (REC-1 to
REC-4) hold for every instance that exists: lengths agree, log probs are never NaN, token ids
fit in 31 bits, and a record written by a newer schema is refused rather than misread.

:meth:`TokenEntry.to_json_bytes` is the canonical serialization. Two entries are the same
payload (PUT-3) exactly when their canonical bytes are equal. It keeps ``-inf`` and ``-0.0``
bit for bit, which plain ``model_dump_json`` does not.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Annotated, Any, Final

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tokcap_spec.errors import InvalidEntryError

__all__ = [
    "TOKEN_ENTRY_RECORD_SCHEMA_VERSION",
    "TOKEN_FIELDS",
    "MAX_TOKEN_ID",
    "TokenEntry",
    "as_token_entry",
    "refusing_invalid",
]

TOKEN_ENTRY_RECORD_SCHEMA_VERSION: Final = 1
"""The record schema this reader writes and the newest it accepts."""

TOKEN_FIELDS: Final = (
    "prompt_token_ids",
    "generation_token_ids",
    "generation_log_probs",
    "routed_experts",
)
"""The fields that carry training tokens, as opposed to call metadata."""

MAX_TOKEN_ID: Final = 2**31 - 1


def _refuse_nan(values: list[float]) -> list[float]:
    # One check per list, not per element: a per-element validator costs a Python call each.
    if any(map(math.isnan, values)):
        index = next(i for i, value in enumerate(values) if math.isnan(value))
        raise ValueError(f"log prob {index} is NaN; -inf is the only non-finite log prob allowed")
    return values


TokenId = Annotated[int, Field(strict=True, ge=0, le=MAX_TOKEN_ID)]
LogProbs = Annotated[list[Annotated[float, Field(strict=True)]], AfterValidator(_refuse_nan)]


_ENCODER: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True
)


def _canonical(fields: dict[str, Any]) -> bytes:
    return _ENCODER.encode(fields).encode("ascii")


class TokenEntry(BaseModel):
    """One captured model call, scoped by ``rollout_id`` and keyed by ``model_call_id``.

    Instances are frozen: fields cannot be reassigned. Unknown fields are kept and
    round-trip through every conforming store (REC-1).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    schema_version: int = TOKEN_ENTRY_RECORD_SCHEMA_VERSION
    rollout_id: str = Field(min_length=1)
    model_call_id: str = Field(min_length=1)
    model: str = ""
    prompt_token_ids: list[TokenId] = Field(default_factory=list)
    generation_token_ids: list[TokenId] = Field(default_factory=list)
    generation_log_probs: LogProbs = Field(default_factory=list)
    # Any JSON value, as NeMo Gym's record allows: per-token expert ids, a string, a mapping.
    routed_experts: Any = None
    output_items: list[dict[str, Any]] = Field(default_factory=list)
    token_item_index: int | None = None
    created_at: float = Field(default_factory=time.time)

    @field_validator("schema_version")
    @classmethod
    def _known_schema(cls, version: int) -> int:
        if version > TOKEN_ENTRY_RECORD_SCHEMA_VERSION:
            raise ValueError(
                f"record schema_version {version} is newer than this reader's schema_version "
                f"{TOKEN_ENTRY_RECORD_SCHEMA_VERSION}; upgrade tokcap to read it"
            )
        if version < 1:
            raise ValueError(f"record schema_version must be at least 1, got {version}")
        return version

    @model_validator(mode="after")
    def _consistent(self) -> TokenEntry:
        if len(self.generation_token_ids) != len(self.generation_log_probs):
            raise ValueError(
                "generation_token_ids and generation_log_probs must have equal length, got "
                f"{len(self.generation_token_ids)} and {len(self.generation_log_probs)}"
            )
        index = self.token_item_index
        if index is not None and not 0 <= index < len(self.output_items):
            raise ValueError(
                f"token_item_index {index} does not index output_items "
                f"(length {len(self.output_items)})"
            )
        return self

    def to_json_bytes(self) -> bytes:
        """Return the canonical JSON of this entry: sorted keys, no spaces, one line.

        Non-finite floats are written as ``-Infinity``/``Infinity`` so they survive; every
        float is written with Python's shortest round-tripping repr. Non-ASCII text is escaped,
        so every Python string, even one holding a lone surrogate, comes back unchanged.
        """
        return _canonical(self.model_dump(mode="python", warnings=False))

    def checked_json_bytes(self) -> bytes:
        """Return :meth:`to_json_bytes`, having checked that :meth:`from_json_bytes` takes it.

        An instance can break the record rules without having been validated: built with
        ``model_construct`` or ``model_copy(update=...)``, or with a token list changed after
        construction. A store that accepted such an entry would hold a record no reader takes
        back, so stores call this before acknowledging a put. Raises pydantic's
        ``ValidationError`` (a ``ValueError``) naming the broken field, and ``TypeError`` for a
        value JSON cannot hold. It costs a validation of the fields, not a parse of the bytes.
        The bytes read back as validation sees the entry: a value it coerces (``1.0`` in an int
        field) reads back coerced.
        """
        fields = self.model_dump(mode="python", warnings=False)
        payload = _canonical(fields)
        # The fields are what the bytes decode to, up to what JSON merges: tuple and list, a
        # subclass and its base (validation takes either alike), and a dict's int key and its
        # string (validation of output_items refuses the int, the reader would not: the safe way).
        TokenEntry.model_validate(fields)
        return payload

    @classmethod
    def from_json_bytes(cls, data: bytes | str) -> TokenEntry:
        """Parse what :meth:`to_json_bytes` wrote (or any JSON object with the same fields)."""
        return cls.model_validate(json.loads(data))

    def same_payload(self, other: TokenEntry) -> bool:
        """Return whether ``other`` serializes to exactly the same bytes (PUT-3)."""
        return self.to_json_bytes() == other.to_json_bytes()


def as_token_entry(record: object) -> TokenEntry:
    """Return ``record`` as a :class:`TokenEntry`, validated exactly as a native entry is.

    A ``TokenEntry`` is returned as it is. Any other record is read field by field: a pydantic
    model through ``model_dump()``, a dataclass through its fields, a mapping through its keys,
    any other object through its attributes. Fields the record exposes beyond the contract's
    (extra fields of a pydantic model, a mapping's other keys, an object's other public
    attributes) are kept, so the result has the canonical bytes the same native entry has.

    Raises ``TypeError`` naming the record's class as ``module.QualName`` and the required
    fields it lacks, and pydantic's ``ValidationError`` (a ``ValueError``) for fields that
    break the record rules.
    """
    if isinstance(record, TokenEntry):
        return record
    fields = _record_fields(record)
    missing = [
        name
        for name, info in TokenEntry.model_fields.items()
        if info.is_required() and name not in fields
    ]
    if missing:
        kind = type(record)
        raise TypeError(
            f"expected a record with the TokenEntry fields, got {kind.__name__} "
            f"({kind.__module__}.{kind.__qualname__}) without {', '.join(missing)}"
        )
    return TokenEntry.model_validate(fields)


def _record_fields(record: object) -> dict[str, Any]:
    if isinstance(record, BaseModel):
        return record.model_dump(mode="python", warnings=False)
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    if isinstance(record, Mapping):
        return dict(record)
    exposed = getattr(record, "__dict__", None)
    fields = (
        {name: value for name, value in exposed.items() if not name.startswith("_")}
        if isinstance(exposed, dict)
        else {}
    )
    for name in TokenEntry.model_fields:
        if name not in fields and hasattr(record, name):
            fields[name] = getattr(record, name)
    return fields


@contextmanager
def refusing_invalid(record: object) -> Iterator[None]:
    """Turn a record-rule failure inside the block into :class:`InvalidEntryError`.

    A sink wraps its ``put`` in this, so a caller learns that the entry was refused, nothing
    was stored, and the rollout must be marked incomplete: masked, never trained on with a
    hole where this call was. The message names the rollout, the call and each broken field
    with its rule, never a value; the ``ValidationError`` stays attached as the cause.
    """
    try:
        yield
    except ValidationError as exc:
        reasons = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'entry'}: {error['msg']}"
            for error in exc.errors(include_url=False, include_input=False)
        )
        raise InvalidEntryError(
            f"rollout {_identity(record, 'rollout_id')}: the entry of model_call_id "
            f"{_identity(record, 'model_call_id')} was refused and nothing was stored "
            f"({reasons}); mark the rollout incomplete so that it is masked rather than "
            "trained on"
        ) from exc


def _identity(record: object, name: str) -> str:
    value = record.get(name) if isinstance(record, Mapping) else getattr(record, name, None)
    return repr(value)[:120] if isinstance(value, str) else "(none)"
