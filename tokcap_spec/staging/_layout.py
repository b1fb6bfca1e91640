"""The field encodings every staging digest is built from.

Lengths and unsigned integers are eight big-endian bytes; text is the length of its UTF-8 bytes
and the bytes; an absent value is one ``0x00`` byte and a present one ``0x01`` before its
encoding; a digest is the 32 bytes its hex spells. Each function refuses a value its layout
cannot hold rather than encode another in its place; the one rounding there is, to float32, is
part of the layout.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Final

U64_MAX: Final = 2**64 - 1
ABSENT: Final = b"\x00"
PRESENT: Final = b"\x01"

_HEX_DIGITS: Final = frozenset("0123456789abcdef")
_U64: Final = struct.Struct(">Q")
_FLOAT32: Final = struct.Struct(">f")


def u64(value: object, *, field: str) -> bytes:
    """Eight big-endian bytes; ``ValueError`` unless ``value`` is an ``int`` (not a ``bool``)
    from 0 to 2**64 - 1."""
    if type(value) is not int or not 0 <= value <= U64_MAX:
        raise ValueError(f"{field} must be an unsigned 64-bit integer, got {value!r}")
    return _U64.pack(value)


def framed(data: bytes) -> bytes:
    """``data`` after its length, so that no two sequences of fields encode alike."""
    return _U64.pack(len(data)) + data


def text(value: object, *, field: str) -> bytes:
    """The UTF-8 bytes of ``value``, framed; ``TypeError`` for a value that is not ``str``.

    A string UTF-8 cannot encode (a lone surrogate) raises ``UnicodeEncodeError``, a
    ``ValueError``.
    """
    if not isinstance(value, str):
        raise TypeError(f"{field} must be text, got {type(value).__name__}")
    return framed(value.encode("utf-8"))


def optional_text(value: object, *, field: str) -> bytes:
    """``0x00`` for ``None``, else ``0x01`` and :func:`text` of ``value``."""
    return ABSENT if value is None else PRESENT + text(value, field=field)


def digest_bytes(value: object, *, field: str) -> bytes:
    """The 32 bytes a SHA-256 hex digest spells.

    ``ValueError`` unless ``value`` is a string of exactly 64 lowercase hex digits.
    """
    if isinstance(value, str) and len(value) == 64 and _HEX_DIGITS.issuperset(value):
        return bytes.fromhex(value)
    raise ValueError(f"{field} must be a SHA-256 digest in 64 lowercase hex digits, got {value!r}")


def token_id_column(token_ids: Sequence[int], *, field: str = "token id") -> bytes:
    """The count of ``token_ids``, then each id, every one as :func:`u64`.

    ``ValueError`` names the first id that is not an ``int`` from 0 to 2**64 - 1.
    """
    for index, token_id in enumerate(token_ids):
        if type(token_id) is not int or not 0 <= token_id <= U64_MAX:
            raise ValueError(
                f"{field} {index} must be an unsigned 64-bit integer, got {token_id!r}"
            )
    return struct.pack(f">Q{len(token_ids)}Q", len(token_ids), *token_ids)


def float32_column(values: Sequence[float], *, field: str) -> bytes:
    """The count of ``values`` as :func:`u64`, then each value's IEEE-754 float32 bits.

    Each value is rounded to the nearest float32, so the sign of zero is kept and two floats
    that round to the same float32 encode alike. ``ValueError`` names the first value that is
    not a finite ``float`` (an ``int`` is refused too), or that rounds beyond the float32 range.
    """
    for index, value in enumerate(values):
        if type(value) is not float or not math.isfinite(value):
            raise ValueError(f"{field} {index} must be a finite float, got {value!r}")
    try:
        return struct.pack(f">Q{len(values)}f", len(values), *values)
    except OverflowError:
        index = next(i for i, value in enumerate(values) if not _fits_float32(value))
        raise ValueError(
            f"{field} {index} rounds beyond the float32 range, got {values[index]!r}"
        ) from None


def _fits_float32(value: float) -> bool:
    try:
        _FLOAT32.pack(value)
    except OverflowError:
        return False
    return True
