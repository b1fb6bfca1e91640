"""The bytes a staging store keeps per key: one JSON document, floats written bit for bit.

A document holds the format name, the staging key, the record's fields and the attachments.
The mask and log prob columns are written with ``float.hex``, so every float64 bit pattern
(``-0.0``, subnormals) reads back as it was; extras are JSON, whose Python floats read back bit
for bit too, and which the extras digest checks on every read. Bytes attachments are base64,
text attachments text. The JSON is ASCII, so any string survives.

:func:`decode` validates what it reads as a :class:`StagedCallRecord`; nothing it returns is
not a valid staged call under the key it names.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Final

from pydantic import ValidationError

from reference._staging_entry import Attachment, StagedEntry
from tokcap_spec.staging import StagedCallRecord, distinct_staging_key

__all__ = ["FORMAT", "decode", "encode", "explain"]

FORMAT: Final = "tokcap-staged-call/1"
_FLOAT_COLUMNS: Final = ("token_mask_delta", "generation_log_probs_delta")


def encode(entry: StagedEntry) -> bytes:
    """The document of ``entry``; :func:`decode` reads it back to the same call, bit for bit.

    ``ValueError`` when the extras hold what JSON cannot write, which a valid record's never do.
    """
    fields = entry.record.model_dump()
    for column in _FLOAT_COLUMNS:
        fields[column] = [value.hex() for value in fields[column]]
    document = {
        "format": FORMAT,
        "key": entry.key,
        "record": fields,
        "attachments": {name: _attachment(value) for name, value in entry.attachments.items()},
    }
    return json.dumps(document, ensure_ascii=True, allow_nan=False, sort_keys=True).encode()


def decode(data: bytes) -> StagedEntry:
    """The staged call a document holds; ``ValueError`` saying what is wrong with any other.

    The record must validate (both its digests recompute) and the key must be the
    :func:`~tokcap_spec.staging.distinct_staging_key` of its ids.
    """
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a JSON document: {exc}") from exc
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} document")
    fields, attachments = document.get("record"), document.get("attachments")
    if not isinstance(fields, dict) or not isinstance(attachments, dict):
        raise ValueError("the document lacks its record or its attachments")
    for column in _FLOAT_COLUMNS:
        if column in fields:
            fields[column] = _float_column(fields[column], column)
    try:
        record = StagedCallRecord.model_validate(fields)
    except ValidationError as exc:
        raise ValueError(f"the record is not a valid staged call: {explain(exc)}") from None
    key = distinct_staging_key(record.rollout_id, record.model_call_id)
    if document.get("key") != key:
        raise ValueError(f"the document names key {document.get('key')!r}, its ids make {key!r}")
    return StagedEntry(
        key=key,
        record=record,
        attachments={name: _read_attachment(name, value) for name, value in attachments.items()},
    )


def explain(error: ValidationError) -> str:
    """A one-line account of a validation error: each failing field and why."""
    parts = []
    for detail in error.errors():
        where = ".".join(str(part) for part in detail["loc"]) or "record"
        parts.append(f"{where}: {detail['msg']}")
    return "; ".join(parts)


def _float_column(values: object, column: str) -> list[float]:
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise ValueError(f"{column} is not a list of hex floats")
    try:
        return [float.fromhex(value) for value in values]
    except ValueError as exc:
        raise ValueError(f"{column} holds a value that is not a hex float: {exc}") from None


def _attachment(value: Attachment) -> dict[str, str]:
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode("ascii")}
    return {"text": value}


def _read_attachment(name: str, value: Any) -> Attachment:
    if isinstance(value, dict) and len(value) == 1:
        if isinstance(value.get("text"), str):
            return str(value["text"])
        if isinstance(value.get("bytes"), str):
            try:
                return base64.b64decode(value["bytes"], validate=True)
            except binascii.Error as exc:
                raise ValueError(f"attachment {name!r} is not valid base64: {exc}") from None
    raise ValueError(f"attachment {name!r} is neither bytes nor text")
