"""An entry's token arrays as packed little-endian binary: how a format 3 log keeps them.

Formatting 2,048 floats and 10,240 ints as JSON costs milliseconds; packing them costs a tenth of
that and keeps every float bit for bit (``-inf``, ``-0.0``) by construction. The rest of the
entry stays canonical JSON.

Identity (PUT-3) is unchanged: two entries have equal canonical JSON bytes exactly when their
other fields have equal canonical JSON and their arrays are equal element for element, floats
compared bit for bit (``repr`` tells apart every two non-NaN floats, and NaN is refused). Log
probs that are not all floats (an ``int`` is accepted and kept as an ``int`` by the canonical
JSON) cannot be packed without changing what reads back, so such an entry keeps its JSON form;
which form an entry takes depends on its values alone, so a re-put always takes the same one.
"""

from __future__ import annotations

import array
import base64
import binascii
import json
import math
import struct
import sys
from dataclasses import dataclass
from typing import Any, Final

from tokcap_spec.records import MAX_TOKEN_ID, TokenEntry

__all__ = ["ARRAY_FIELDS", "CheckedEntry", "check_entry", "unpack_entry"]

ARRAY_FIELDS: Final = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
"""The fields a packed entry keeps as binary, in the order they are packed."""

_COUNTS = struct.Struct("<III")
# The settings of the canonical JSON, so that equal fields encode to equal bytes.
_ENCODER: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True
)
_SWAP = sys.byteorder == "big"
_NON_NEGATIVE_TOP_BYTES: Final = bytes(range(0x80))
if array.array("i").itemsize != 4 or array.array("d").itemsize != 8:
    raise ImportError("packed token arrays need 4-byte C ints and 8-byte C doubles")


@dataclass(slots=True)
class CheckedEntry:
    """An entry that passed the record rules, encoded for whichever log format takes it.

    ``packed`` is ``(other fields as canonical JSON, base64 of the packed arrays)``, or None
    when the entry must be stored as JSON; :meth:`json_bytes` gives the canonical JSON.
    """

    entry: TokenEntry | None
    packed: tuple[bytes, bytes] | None
    json: bytes | None = None

    @classmethod
    def from_json(cls, payload: bytes) -> CheckedEntry:
        """Return the form of an entry known only by its canonical JSON ``payload``."""
        return cls(None, None, payload)

    def json_bytes(self) -> bytes:
        """Return ``TokenEntry.to_json_bytes()`` of the entry (checked again if computed here)."""
        if self.json is None:
            assert self.entry is not None
            self.json = self.entry.checked_json_bytes()
        return self.json


def check_entry(entry: TokenEntry) -> CheckedEntry:
    """Check ``entry`` as ``checked_json_bytes`` does and encode it; raise what that raises.

    An entry built without validation that breaks the record rules raises pydantic's
    ``ValidationError``; a value JSON cannot hold raises ``TypeError``. Arrays of plain ints
    and floats are checked against the record rules directly and the other fields validated as
    a record; anything else is validated whole, exactly as ``checked_json_bytes`` would.
    """
    fields = entry.model_dump(mode="python", warnings=False)
    arrays = [fields.pop(name) for name in ARRAY_FIELDS]
    raw = _packed_if_plain(*arrays)
    if raw is not None:
        TokenEntry.model_validate({**fields, **{name: [] for name in ARRAY_FIELDS}})
    else:
        TokenEntry.model_validate({**fields, **dict(zip(ARRAY_FIELDS, arrays, strict=True))})
        prompt, generated, log_probs = arrays
        if not all(issubclass(kind, float) for kind in set(map(type, log_probs))):
            return CheckedEntry(entry, None, entry.checked_json_bytes())
        raw = _pack(prompt, generated, log_probs)
    return CheckedEntry(entry, (_ENCODER.encode(fields).encode("ascii"), base64.b64encode(raw)))


def _pack(prompt: list[int], generated: list[int], log_probs: list[float]) -> bytes:
    ids = array.array("i", prompt)
    ids.extend(generated)
    probs = array.array("d", log_probs)
    if _SWAP:
        ids.byteswap()
        probs.byteswap()
    return b"".join((_COUNTS.pack(len(prompt), len(generated), len(probs)), ids, probs))


def _packed_if_plain(prompt: Any, generated: Any, log_probs: Any) -> bytes | None:
    """Return the packed arrays if they are plain values the record rules accept, else None."""
    if not isinstance(prompt, list) or not isinstance(generated, list):
        return None
    if not isinstance(log_probs, list) or len(generated) != len(log_probs):
        return None
    if not {*map(type, prompt), *map(type, generated)} <= {int}:
        return None
    if not set(map(type, log_probs)) <= {float} or any(map(math.isnan, log_probs)):
        return None
    try:
        raw = _pack(prompt, generated, log_probs)
    except OverflowError:
        return None
    return None if _has_negative_id(raw, len(prompt) + len(generated)) else raw


def _has_negative_id(raw: bytes, count: int) -> bool:
    # A little-endian int32 is negative exactly when its top byte is >= 0x80.
    top = raw[_COUNTS.size + 3 : _COUNTS.size + 4 * count : 4]
    return bool(top.translate(None, _NON_NEGATIVE_TOP_BYTES))


def unpack_entry(rest: bytes, tokens: bytes) -> TokenEntry:
    """Return the entry whose other fields are ``rest`` and whose packed arrays are ``tokens``.

    The other fields are validated as a record; the arrays are checked against the record's
    rules directly (lengths, token id range, no NaN) instead of element by element. Raises
    ``ValueError`` saying what is wrong.
    """
    try:
        raw = base64.b64decode(tokens, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"the packed tokens are not base64: {exc}") from None
    if len(raw) < _COUNTS.size:
        raise ValueError("the packed tokens are shorter than their header")
    prompt, generated, probs = _COUNTS.unpack_from(raw)
    ids_end = _COUNTS.size + 4 * (prompt + generated)
    if len(raw) != ids_end + 8 * probs:
        raise ValueError(
            f"the packed tokens hold {len(raw)} bytes, their header promises {ids_end + 8 * probs}"
        )
    if generated != probs:
        raise ValueError(
            "generation_token_ids and generation_log_probs must have equal length, got "
            f"{generated} and {probs}"
        )
    # An int32 is at most MAX_TOKEN_ID, so only a negative one breaks the rule.
    if _has_negative_id(raw, prompt + generated):
        raise ValueError(f"a packed token id is outside [0, {MAX_TOKEN_ID}]")
    ids = array.array("i", raw[_COUNTS.size : ids_end])
    log_probs = array.array("d", raw[ids_end:])
    if _SWAP:
        ids.byteswap()
        log_probs.byteswap()
    if any(map(math.isnan, log_probs)):
        raise ValueError("a packed log prob is NaN")
    fields: Any = json.loads(rest)
    if not isinstance(fields, dict) or any(name in fields for name in ARRAY_FIELDS):
        raise ValueError("the fields of a packed entry must be a JSON object without its arrays")
    values = ids.tolist()
    base = TokenEntry.model_validate(fields)
    return base.model_copy(
        update={
            "prompt_token_ids": values[:prompt],
            "generation_token_ids": values[prompt:],
            "generation_log_probs": log_probs.tolist(),
        }
    )
