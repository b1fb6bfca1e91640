"""What both staging stores do alike: admit a call, settle a re-stage, gather rows by key.

A store supplies only its storage: a put that keeps what is already under a key and a load
by key. Everything a staging store promises beyond that is decided here, once for both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from reference._staging_codec import decode, encode, explain
from reference._staging_entry import StagedEntry, checked_attachments
from tokcap_spec.staging import (
    StagedCallCorruptError,
    StagedCallMissingError,
    StagedCallRecord,
    StageResult,
    distinct_staging_key,
)
from tokcap_spec.staging.classes import WireClasses, wire_classes, wire_classes_of

__all__ = ["PutIfAbsent", "gather", "stage_with"]

PutIfAbsent = Callable[[str, bytes], "bytes | None"]
"""Stores the document under the key durably and returns ``None``, or stores nothing and
returns the document already there; raises ``OSError`` when the storage fails."""


class _Refused(Exception):
    """A call the store will not stage; the message says why."""


def stage_with(
    record: object, attachments: object, put: PutIfAbsent, classes: WireClasses | None = None
) -> Any:
    """Stage ``record`` with ``attachments`` through ``put``, never raising.

    Ok with the key when the call is now stored, or was already stored as exactly this call;
    a failure saying why otherwise: an invalid record or attachments, a key holding another
    call, a storage error, or anything else that went wrong. The answer is a ``StageResult`` of
    ``classes`` when given, else of the record's own classes (NeMo Gym's for Gym's record),
    else tokcap_spec's.
    """
    answer = classes or wire_classes_of(record) or wire_classes()
    try:
        result = _staged(record, attachments, put)
    except Exception as exc:  # stage reports every failure in its result, never raises
        result = StageResult(
            ok=False, error=f"staging failed unexpectedly: {type(exc).__name__}: {exc}"
        )
    try:
        return answer.result_of(result)
    except Exception as exc:  # a result class that refuses the answer is reported, not raised
        failed = f"the answer could not be built as {answer.describe()}: {exc}"
        return StageResult(ok=False, error=failed)


def _staged(record: object, attachments: object, put: PutIfAbsent) -> StageResult:
    try:
        entry, document = _admit(record, attachments)
        stored = put(entry.key, document)
        if stored is not None:
            _settle(entry, stored)
        return StageResult(ok=True, staging_key=entry.key)
    except _Refused as exc:
        return StageResult(ok=False, error=str(exc))
    except OSError as exc:
        return StageResult(ok=False, error=f"the staging store could not store the call: {exc}")


def gather(keys: Iterable[str], load: Callable[[str], bytes | None]) -> list[StagedEntry]:
    """The entry under each of ``keys``, in order and as often as asked for.

    Raises :class:`StagedCallMissingError` naming every key ``load`` finds nothing under, and
    :class:`StagedCallCorruptError` for a document that is not a valid staged call under its
    key; ``TypeError`` when ``keys`` is a string or holds anything but strings.
    """
    if isinstance(keys, str | bytes):
        raise TypeError("staging_keys must be a list of keys, not one string")
    wanted = list(keys)
    for key in wanted:
        if not isinstance(key, str):
            raise TypeError(f"a staging key is a str, got {type(key).__name__}")
    found: dict[str, StagedEntry] = {}
    missing: list[str] = []
    for key in dict.fromkeys(wanted):
        document = load(key)
        if document is None:
            missing.append(key)
        else:
            found[key] = _read(key, document)
    if missing:
        raise StagedCallMissingError(missing)
    return [found[key] for key in wanted]


def _admit(record: object, attachments: object) -> tuple[StagedEntry, bytes]:
    if not _is_staged_record(record):
        raise _Refused(
            "stage takes a StagedCallRecord (tokcap_spec.staging's or NeMo Gym's), got "
            f"{_type_name(record)}"
        )
    try:
        checked = checked_attachments(attachments)
    except TypeError as exc:
        raise _Refused(f"the attachments cannot be staged: {exc}") from None
    # Validated afresh from its fields: an instance may have been built without validation,
    # and a record of another set of classes (NeMo Gym's) is read by its wire fields.
    try:
        valid = StagedCallRecord.model_validate(dict(vars(record)))
    except ValidationError as exc:
        raise _Refused(f"the record is not a valid staged call: {explain(exc)}") from None
    key = distinct_staging_key(valid.rollout_id, valid.model_call_id)
    document = encode(StagedEntry(key=key, record=valid, attachments=checked))
    # What is stored is what reads back: the document, not the caller's objects.
    return decode(document), document


def _settle(offered: StagedEntry, stored_document: bytes) -> None:
    try:
        stored = _read(offered.key, stored_document)
    except StagedCallCorruptError as exc:
        raise _Refused(f"{exc}; it is kept as it is, and nothing was staged") from None
    if not stored.same_call(offered):
        raise _Refused(
            f"staging key {offered.key!r} already holds another call, kept as it is: "
            f"{stored.difference(offered)}"
        )


def _read(key: str, document: bytes) -> StagedEntry:
    try:
        entry = decode(document)
    except ValueError as exc:
        raise StagedCallCorruptError(key, str(exc)) from None
    if entry.key != key:
        raise StagedCallCorruptError(key, f"it holds the call of key {entry.key!r}")
    return entry


def _is_staged_record(record: object) -> bool:
    """Whether ``record`` is a pydantic ``StagedCallRecord`` of any set of staging classes."""
    return isinstance(record, BaseModel) and any(
        cls.__name__ == "StagedCallRecord" for cls in type(record).__mro__
    )


def _type_name(value: Any) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"
