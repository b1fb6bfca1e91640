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
import marshal
import math
import struct
import sys
from dataclasses import dataclass
from typing import Any, Final

from tokcap_spec.records import MAX_TOKEN_ID, TokenEntry

__all__ = ["ARRAY_FIELDS", "CheckedEntry", "check_entry", "unpack_base64_entry", "unpack_entry"]

ARRAY_FIELDS: Final = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
"""The fields a packed entry keeps as binary, in the order they are packed."""

_COUNTS = struct.Struct("<III")
# The settings of the canonical JSON, so that equal fields encode to equal bytes.
_ENCODER: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True
)
_SWAP = sys.byteorder == "big"
_NON_NEGATIVE_TOP_BYTES: Final = bytes(range(0x80))
_ARRAY_NAMES: Final[set[str]] = set(ARRAY_FIELDS)
_NO_ARRAYS: Final[dict[str, list[Any]]] = {name: [] for name in ARRAY_FIELDS}
_LIST_HEADER: Final = 5
"""marshal's list header: a type byte and a 4-byte length."""
if array.array("i").itemsize != 4 or array.array("d").itemsize != 8:
    raise ImportError("packed token arrays need 4-byte C ints and 8-byte C doubles")


@dataclass(slots=True)
class CheckedEntry:
    """An entry that passed the record rules, encoded for whichever log format takes it.

    ``packed`` is ``(other fields as canonical JSON, the packed arrays)``, or None when the
    entry must be stored as JSON; :meth:`json_bytes` gives the canonical JSON.
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
    ``ValidationError``; a value JSON cannot hold raises ``TypeError``. Arrays that are plain
    lists of plain ints and floats are checked against the record rules in a few C passes,
    read in place without a copy, and the other fields validated as a record; anything else is
    validated whole, exactly as ``checked_json_bytes`` would.
    """
    values = entry.__dict__
    raw = _packed_if_plain(*(values.get(name) for name in ARRAY_FIELDS))
    if raw is not None:
        fields = entry.model_dump(mode="python", warnings=False, exclude=_ARRAY_NAMES)
        # In the order checked_json_bytes takes: what JSON cannot hold fails before validation.
        rest = _ENCODER.encode(fields).encode("ascii")
        TokenEntry.model_validate({**fields, **_NO_ARRAYS})
        return CheckedEntry(entry, (rest, raw))
    payload = entry.checked_json_bytes()
    fields = entry.model_dump(mode="python", warnings=False)
    prompt, generated, log_probs = (fields.pop(name) for name in ARRAY_FIELDS)
    if not all(issubclass(kind, float) for kind in set(map(type, log_probs))):
        return CheckedEntry(entry, None, payload)
    rest = _ENCODER.encode(fields).encode("ascii")
    return CheckedEntry(entry, (rest, _pack(prompt, generated, log_probs)), payload)


def _pack(prompt: list[int], generated: list[int], log_probs: list[float]) -> bytes:
    ids = array.array("i", prompt)
    ids.extend(generated)
    probs = array.array("d", log_probs)
    if _SWAP:
        ids.byteswap()
        probs.byteswap()
    return b"".join((_COUNTS.pack(len(prompt), len(generated), len(probs)), ids, probs))


def _marshalled(values: list[Any], tag: bytes, width: int) -> bytes | None:
    """Return ``marshal``'s bytes of ``values`` if each is written as ``tag`` and ``width`` bytes.

    ``marshal`` version 2 (which never shares objects) writes a list as a 5-byte header and
    each value as one tag byte and its little-endian bytes: ``i`` and an int32 for an ``int``
    that fits one, ``g`` and a double for a ``float``. A bool, a larger int or any other object
    gets another tag or length, and a subclass is refused; so one C pass checks every value's
    type, and for ints its 32-bit range.
    """
    try:
        data = marshal.dumps(values, 2)
    except ValueError:
        return None
    if len(data) != _LIST_HEADER + (width + 1) * len(values):
        return None
    return None if data[_LIST_HEADER :: width + 1].translate(None, tag) else data


def _planes(data: bytes, count: int, width: int) -> bytearray:
    """Return the ``width``-byte values of :func:`_marshalled` ``data`` without their tags."""
    out = bytearray(width * count)
    for byte in range(width):
        out[byte::width] = data[_LIST_HEADER + 1 + byte :: width + 1]
    return out


def _packed_if_plain(prompt: Any, generated: Any, log_probs: Any) -> bytes | None:
    """Return the packed arrays if they are plain values the record rules accept, else None.

    Plain means exact lists of exact ``int`` and ``float`` values, as a validated entry holds.
    """
    if type(prompt) is not list or type(generated) is not list or type(log_probs) is not list:
        return None
    if len(generated) != len(log_probs):
        return None
    prompt_data = _marshalled(prompt, b"i", 4)
    generated_data = _marshalled(generated, b"i", 4)
    probs_data = _marshalled(log_probs, b"g", 8)
    if prompt_data is None or generated_data is None or probs_data is None:
        return None
    # A NaN makes the sum NaN, so only a NaN sum (or opposite infinities) needs a closer look.
    if math.isnan(sum(log_probs)) and any(map(math.isnan, log_probs)):
        return None
    raw = b"".join(
        (
            _COUNTS.pack(len(prompt), len(generated), len(log_probs)),
            _planes(prompt_data, len(prompt), 4),
            _planes(generated_data, len(generated), 4),
            _planes(probs_data, len(log_probs), 8),
        )
    )
    return None if _has_negative_id(raw, len(prompt) + len(generated)) else raw


def _has_negative_id(raw: bytes, count: int) -> bool:
    # A little-endian int32 is negative exactly when its top byte is >= 0x80.
    top = raw[_COUNTS.size + 3 : _COUNTS.size + 4 * count : 4]
    return bool(top.translate(None, _NON_NEGATIVE_TOP_BYTES))


def unpack_base64_entry(rest: bytes, tokens: bytes) -> TokenEntry:
    """Return the entry of a format 3 record: :func:`unpack_entry` of the base64 ``tokens``."""
    try:
        raw = base64.b64decode(tokens, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"the packed tokens are not base64: {exc}") from None
    return unpack_entry(rest, raw)


def unpack_entry(rest: bytes, raw: bytes) -> TokenEntry:
    """Return the entry whose other fields are ``rest`` and whose packed arrays are ``raw``.

    The other fields are validated as a record; the arrays are checked against the record's
    rules directly (lengths, token id range, no NaN) instead of element by element, and each
    is turned into its list in one pass, without an intermediate copy. Raises ``ValueError``
    saying what is wrong.
    """
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
    view = memoryview(raw)
    prompt_end = _COUNTS.size + 4 * prompt
    log_probs = _values("d", view[ids_end:])
    if math.isnan(sum(log_probs)) and any(map(math.isnan, log_probs)):
        raise ValueError("a packed log prob is NaN")
    fields: Any = json.loads(rest)
    if not isinstance(fields, dict) or any(name in fields for name in ARRAY_FIELDS):
        raise ValueError("the fields of a packed entry must be a JSON object without its arrays")
    entry = TokenEntry.model_validate(fields)
    # The entry is new and nobody else holds it: its empty arrays are replaced in place, as
    # model_copy(update=...) would set them, without a second instance for the collector.
    entry.__dict__.update(
        prompt_token_ids=_values("i", view[_COUNTS.size : prompt_end]),
        generation_token_ids=_values("i", view[prompt_end:ids_end]),
        generation_log_probs=log_probs,
    )
    entry.__pydantic_fields_set__.update(ARRAY_FIELDS)
    return entry


def _values(code: str, data: memoryview) -> list[Any]:
    """Return the little-endian values of type ``code`` in ``data`` as a list."""
    values = array.array(code)
    values.frombytes(data)
    if _SWAP:
        values.byteswap()
    return values.tolist()
