"""Reading an implementation's objects only through what the contract names.

A store may return its own snapshot and record classes (NeMo Gym's own, a dataclass, a
mapping). The kit reads a snapshot through its five attributes and an entry through the
record's fields, and compares entries by a canonical form it computes itself from those field
values: JSON with sorted keys in which every float is written with its shortest exact repr,
so ``-inf`` and ``-0.0`` compare bit for bit and an int never equals a float. It never calls a
method that only tokcap's own classes have.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tokcap_spec.records import TokenEntry

__all__ = [
    "RECORD_FIELDS",
    "SNAPSHOT_ATTRIBUTES",
    "EntryView",
    "SnapshotView",
    "Unreadable",
    "canonical",
    "entry_view",
    "read_snapshot",
    "record_fields",
]

RECORD_FIELDS: Final = tuple(TokenEntry.model_fields)
"""The record's fields (REC-1), in the contract's order."""

SNAPSHOT_ATTRIBUTES: Final = ("rollout_id", "entries", "incomplete", "snapshot_id", "version")
"""The five attributes through which a snapshot is read (SHAPE-1)."""


class Unreadable(Exception):
    """An object cannot be read as the contract says; the message says what came back.

    ``clause`` is the clause the shape belongs to: SHAPE-1 for a snapshot or entry that lacks
    what the contract names, FREEZE-1 for a snapshot whose identity has the wrong type.
    """

    def __init__(self, clause: str, message: str) -> None:
        super().__init__(message)
        self.clause = clause


def record_fields(entry: object) -> dict[str, Any]:
    """Return an entry's field values: from a mapping, ``model_dump()``, a dataclass or attributes.

    Extra fields are included when the object exposes them. Raises :class:`Unreadable` when
    the object has no ``model_call_id`` or ``rollout_id``.
    """
    if isinstance(entry, Mapping):
        data = dict(entry)
    elif callable(getattr(entry, "model_dump", None)):
        dumped = entry.model_dump()  # type: ignore[attr-defined]
        if not isinstance(dumped, Mapping):
            raise Unreadable(
                "SHAPE-1",
                f"{_kind(entry)}.model_dump() returned {type(dumped).__name__}, not a mapping",
            )
        data = dict(dumped)
    elif dataclasses.is_dataclass(entry) and not isinstance(entry, type):
        data = {item.name: getattr(entry, item.name) for item in dataclasses.fields(entry)}
        data.update(_public_attributes(entry))
    else:
        data = {name: getattr(entry, name) for name in RECORD_FIELDS if hasattr(entry, name)}
        data.update(_public_attributes(entry))
    missing = [name for name in ("rollout_id", "model_call_id") if name not in data]
    if missing:
        raise Unreadable(
            "SHAPE-1",
            f"an entry of type {_kind(entry)} has no {' or '.join(missing)}",
        )
    return data


def _public_attributes(entry: object) -> dict[str, Any]:
    found = getattr(entry, "__dict__", None)
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if not k.startswith("_") and not callable(v)}


def _kind(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _plain(value: Any) -> Any:
    """Turn field values into JSON data: mappings, sequences, scalars."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain({item.name: getattr(value, item.name) for item in dataclasses.fields(value)})
    if isinstance(value, Iterable) and not isinstance(value, (bytes, bytearray)):
        return [_plain(item) for item in value]
    return {"<unjsonable>": f"{type(value).__name__}: {value!r}"[:200]}


_ENCODER: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True
)


def canonical(fields: Mapping[str, Any]) -> bytes:
    """Return the kit's canonical form of an entry's field values.

    Floats keep their bits (``-inf``, ``-0.0``), ints stay ints, tuples read as lists.
    """
    return _ENCODER.encode(_plain(fields)).encode("ascii")


@dataclass(frozen=True)
class EntryView:
    """One entry as the kit reads it: its call id, its field values and their canonical form."""

    model_call_id: str
    rollout_id: Any
    fields: Mapping[str, Any]
    payload: bytes


def entry_view(entry: object) -> EntryView:
    """Read one entry through the record's fields."""
    fields = record_fields(entry)
    call = fields["model_call_id"]
    if not isinstance(call, str):
        raise Unreadable(
            "SHAPE-1", f"an entry's model_call_id is {type(call).__name__}, not a str: {call!r}"
        )
    return EntryView(call, fields["rollout_id"], fields, canonical(fields))


@dataclass(frozen=True)
class SnapshotView:
    """What one freeze returned, read through the five attributes the contract names.

    ``raw`` is the implementation's own object, kept only to prove it immutable (SHAPE-3).
    """

    rollout_id: Any
    entries: tuple[EntryView, ...]
    incomplete: bool
    snapshot_id: str
    version: int
    raw: Any

    def payloads(self) -> dict[str, bytes]:
        """Return the canonical payload per call id."""
        return {entry.model_call_id: entry.payload for entry in self.entries}

    def entry_for(self, model_call_id: str) -> EntryView | None:
        """Return the entry of ``model_call_id``, or None."""
        return next((e for e in self.entries if e.model_call_id == model_call_id), None)


def read_snapshot(snapshot: object) -> SnapshotView:
    """Read a snapshot through its five attributes; raise :class:`Unreadable` on a wrong shape."""
    missing = [name for name in SNAPSHOT_ATTRIBUTES if not hasattr(snapshot, name)]
    if missing:
        raise Unreadable(
            "SHAPE-1",
            f"freeze returned {_kind(snapshot)} without {', '.join(map(repr, missing))}",
        )
    raw: Any = snapshot
    entries = raw.entries
    if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Iterable):
        raise Unreadable(
            "SHAPE-1",
            f"the snapshot's entries is {type(entries).__name__} ({str(entries)[:60]!r}), "
            "not an iterable of entries",
        )
    views = tuple(entry_view(entry) for entry in entries)
    snapshot_id, version = raw.snapshot_id, raw.version
    if not isinstance(snapshot_id, str) or not snapshot_id:
        raise Unreadable("FREEZE-1", f"the snapshot_id is {snapshot_id!r}, not a non-empty str")
    if not isinstance(version, int) or isinstance(version, bool):
        raise Unreadable(
            "FREEZE-1", f"the version is {type(version).__name__} {version!r}, not an int"
        )
    incomplete = raw.incomplete
    if not isinstance(incomplete, int) or incomplete not in (0, 1):
        raise Unreadable(
            "FREEZE-1",
            f"incomplete is {type(incomplete).__name__} {incomplete!r}, not a bool",
        )
    return SnapshotView(raw.rollout_id, views, bool(incomplete), snapshot_id, version, raw)
