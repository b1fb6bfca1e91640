"""The digest of a staged call's extras, byte for byte NeMo Gym 0.7.0's (extras version 1).

Extras are the optional, engine-specific material of a call (routed experts, for one). The
staged record commits to them through ``extras_digest`` alone, so a consumer can check the
tokens without loading them, and check them later against the same record.

The digest is a SHA-256 of the domain ``nemo-gym-staging-extras-v1``, the version as one byte,
and the extras in a typed encoding rather than JSON, so that every runtime arrives at the same
bytes. Each value is one tag byte and its payload:

- ``N`` for ``None``; ``B`` and ``0x01`` or ``0x00`` for ``True`` or ``False``;
- ``I`` and eight big-endian bytes, two's complement, for an ``int`` in the signed 64-bit range;
- ``F`` and the eight big-endian bytes of a finite ``float`` as float64 (so ``-0.0`` is kept);
- ``S`` and the string as length-delimited UTF-8;
- ``L``, the number of items as eight bytes, and each item;
- ``D``, the number of entries as eight bytes, then each entry's key as length-delimited UTF-8
  and its value, in the order of the keys' UTF-8 bytes.

Gym names this function ``compute_extras_digest``.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

from tokcap_spec.staging import _layout
from tokcap_spec.staging.versions import EXTRAS_DIGEST_VERSION

__all__ = ["EMPTY_EXTRAS_DIGEST", "extras_digest"]

_DOMAIN: Final = b"nemo-gym-staging-extras-v1"
_I64: Final = struct.Struct(">q")
_F64: Final = struct.Struct(">d")
_I64_RANGE: Final = range(-(2**63), 2**63)


def extras_digest(extras: Mapping[str, Any] | None) -> str:
    """The ``extras_digest`` of a staged call whose extras are ``extras``.

    ``extras`` is ``None`` (no extras, :data:`EMPTY_EXTRAS_DIGEST`) or a mapping of string keys
    to JSON-like values: ``None``, ``bool``, ``int``, ``float``, ``str``, ``list`` and ``dict``,
    by exact type, nested to any depth Python's recursion allows. Equal extras digest alike
    whatever the order of their keys; ``1``, ``1.0`` and ``True`` digest apart.

    Raises ``TypeError`` for any other type (a tuple, a numpy scalar, an ``int`` subclass, a
    mapping that is not a ``dict`` below the top) or a key that is not a string, and
    ``ValueError`` for an ``int`` beyond the signed 64-bit range, a NaN or infinite ``float``, or
    text UTF-8 cannot encode.
    """
    if extras is not None and not isinstance(extras, Mapping):
        raise TypeError(f"extras must be a mapping or None, got {type(extras).__name__}")
    digest = hashlib.sha256(_DOMAIN + bytes((EXTRAS_DIGEST_VERSION,)))
    _feed(digest.update, None if extras is None else dict(extras))
    return digest.hexdigest()


Write = Callable[[bytes], object]


def _feed(write: Write, value: object) -> None:
    if value is None:
        write(b"N")
    elif type(value) is bool:
        write(b"B\x01" if value else b"B\x00")
    elif type(value) is int:
        if value not in _I64_RANGE:
            raise ValueError(f"an extras int must fit in a signed 64-bit integer, got {value}")
        write(b"I" + _I64.pack(value))
    elif type(value) is float:
        if not math.isfinite(value):
            raise ValueError(f"an extras float must be finite, got {value!r}")
        write(b"F" + _F64.pack(value))
    elif type(value) is str:
        write(b"S" + _layout.text(value, field="an extras string"))
    elif type(value) is list:
        write(b"L" + _layout.u64(len(value), field="an extras list's length"))
        for item in value:
            _feed(write, item)
    elif type(value) is dict:
        _feed_mapping(write, value)
    else:
        raise TypeError(f"extras cannot hold a {type(value).__name__}")


def _feed_mapping(write: Write, mapping: dict[Any, object]) -> None:
    for key in mapping:
        if type(key) is not str:
            raise TypeError(f"extras keys must be strings, got a {type(key).__name__}")
    keys = [key.encode("utf-8") for key in mapping]
    values = list(mapping.values())
    write(b"D" + _layout.u64(len(keys), field="an extras mapping's length"))
    for index in sorted(range(len(keys)), key=keys.__getitem__):
        write(_layout.framed(keys[index]))
        _feed(write, values[index])


EMPTY_EXTRAS_DIGEST: Final = extras_digest(None)
"""The ``extras_digest`` of a call without extras, the record's default."""
