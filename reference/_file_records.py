"""The record format of a rollout log, and the state a log's records replay to.

A log is UTF-8 JSON, one record per line, appended under an exclusive lock. In formats 2 and 3
every line ends with ``,"crc":"XXXXXXXX"}`` and a newline, where ``XXXXXXXX`` is the CRC-32 (8
lower case hex digits) of the line's bytes before ``,"crc":``. A line whose checksum does not
match is refused, so a flipped bit never turns one valid record into another. Format 1 lines are
the same without the checksum. Format 3 adds the packed entry record; a log keeps the format it
was started in (its first line says which), so format 1 and 2 logs are still read and appended
to in their own format. Format 4 keeps an entry's packed arrays as raw bytes right after its
line, without base64. Without the checksum field, the lines are:

- ``{"epoch":E,"format":F,"kind":"open","rollout_id":R}``: always the first line; ``E`` names
  this incarnation of the rollout id, so a snapshot of a deleted and reused id never matches.
- ``{"kind":"packed","call":C,"tokens":T,"entry":J}`` (format 3 only): ``T`` is the base64 of
  the entry's token arrays packed little-endian (see ``_file_packed``) and ``J`` the canonical
  JSON of its other fields. Its identity is ``T`` and ``J`` together.
- ``{"kind":"blob","call":C,"size":N,"sum":S,"entry":J}`` (format 4 only), followed by ``N``
  bytes: the entry's token arrays packed little-endian, whose CRC-32 is ``S`` (8 hex digits),
  and ``J`` the canonical JSON of its other fields. The line's own checksum covers ``N`` and
  ``S``, so a damaged size is never mistaken for a torn tail. Its identity is the bytes and
  ``J`` together. A record is a line and, for a blob, its bytes: :func:`parse_frame` reads one.
- ``{"kind":"entry","call":C,"entry":J}``: ``J`` is exactly ``TokenEntry.to_json_bytes()``,
  embedded verbatim so the stored payload is the canonical bytes and nothing is re-serialized;
  in formats 3 and 4 only for an entry that cannot be packed.
  ``C`` (ASCII-escaped) repeats its ``model_call_id`` so that replaying a line never parses
  the payload; ``RolloutLog.entries`` parses it once, at freeze.
- ``{"call":C,"kind":"intent"}``: ``begin_call`` announced call ``C``.
- ``{"call":C,"kind":"mark","reason":W}``: the rollout lost evidence; sticky.
- ``{"kind":"freeze"}``: the fence; no new call is accepted after it.
- ``{"at":T,"kind":"tombstone","reason":W,"rollout_id":R}``: the only line of a rollout that was
  dropped or retired.

``json.dumps`` escapes newlines inside strings, so a line never spans two lines whatever the
call id holds; a blob's bytes, which may hold any byte, are found by their size, never by a
newline.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]
from json.encoder import encode_basestring_ascii
from typing import Any, Final

__all__ = [
    "BLOB",
    "BLOB_PREFIX",
    "ENTRY",
    "ENTRY_PREFIX",
    "ENTRY_SUFFIX",
    "FORMAT",
    "FORMATS",
    "FREEZE",
    "INTENT",
    "MARK",
    "OPEN",
    "PACKED",
    "PACKED_PREFIX",
    "TOMBSTONE",
    "IncompleteFrame",
    "Record",
    "ReplayedRollout",
    "blob_record",
    "digest",
    "entry_record",
    "freeze_record",
    "has_checksum",
    "intent_record",
    "mark_record",
    "open_record",
    "packed_record",
    "parse_record",
    "seal",
    "parse_frame",
    "parse_log",
    "tombstone_record",
]

FORMAT: Final = 4
"""The log format this module starts new logs in: checksummed lines, raw packed token arrays."""

FORMATS: Final = (1, 2, 3, 4)
"""The log formats this module reads and appends to."""

SEALED_FORMATS: Final = (2, 3, 4)
"""The log formats whose lines carry a checksum."""

OPEN: Final = "open"
ENTRY: Final = "entry"
INTENT: Final = "intent"
MARK: Final = "mark"
FREEZE: Final = "freeze"
TOMBSTONE: Final = "tombstone"
PACKED: Final = "packed"
BLOB: Final = "blob"

ENTRY_PREFIX: Final = b'{"kind":"entry","call":'
_ENTRY_FIELD: Final = ',"entry":'
ENTRY_SUFFIX: Final = b"}\n"
PACKED_PREFIX: Final = b'{"kind":"packed","call":'
_TOKENS_FIELD: Final = ',"tokens":"'
_PACKED_ENTRY_FIELD: Final = b'","entry":'
BLOB_PREFIX: Final = b'{"kind":"blob","call":'
_SIZE_FIELD: Final = ',"size":'
_SUM_FIELD: Final = b',"sum":"'
_BLOB_ENTRY_FIELD: Final = b'","entry":'
_DIGITS: Final = frozenset(b"0123456789")

_CRC_FIELD: Final = b',"crc":"'
_CRC_END: Final = b'"}\n'
_CRC_DIGITS: Final = 8
_SEAL_SIZE: Final = len(_CRC_FIELD) + _CRC_DIGITS + len(_CRC_END)
_HEX: Final = frozenset(b"0123456789abcdef")


def seal(line: bytes) -> bytes:
    """Return the format 2 form of a format 1 ``line``: the same object with its checksum."""
    body = line[: -len(ENTRY_SUFFIX)]
    return b"%s%s%08x%s" % (body, _CRC_FIELD, zlib.crc32(body), _CRC_END)


def has_checksum(line: bytes) -> bool:
    """Return whether ``line`` ends the way a format 2 line does (its sum is not verified)."""
    digits = line[-len(_CRC_END) - _CRC_DIGITS : -len(_CRC_END)]
    return (
        line.endswith(_CRC_END)
        and line.startswith(_CRC_FIELD, len(line) - _SEAL_SIZE)
        and len(digits) == _CRC_DIGITS
        and _HEX.issuperset(digits)
    )


def _unseal(line: bytes) -> bytes:
    """Return the format 1 form of a sealed ``line``; raise ``ValueError`` if its sum is wrong."""
    if not has_checksum(line):
        raise ValueError('the line does not end with its checksum ,"crc":"XXXXXXXX"}')
    body = line[:-_SEAL_SIZE]
    stored = line[-len(_CRC_END) - _CRC_DIGITS : -len(_CRC_END)]
    actual = b"%08x" % zlib.crc32(body)
    if stored != actual:
        raise ValueError(
            f"checksum mismatch: the line says {stored.decode()}, its bytes sum to "
            f"{actual.decode()}; the line was damaged after it was written"
        )
    return body + ENTRY_SUFFIX


def _json_string(text: str) -> bytes:
    """Return ``text`` as a JSON string literal, ASCII-escaped: what ``json.dumps`` writes."""
    return encode_basestring_ascii(text).encode("ascii")


def digest(*parts: bytes) -> bytes:
    """Return the digest two sequences of parts share exactly when their bytes are equal.

    The parts are hashed one after another, joined by a NUL byte, without copying them into one.
    """
    hasher = hashlib.sha256(parts[0])
    for part in parts[1:]:
        hasher.update(b"\0")
        hasher.update(part)
    return hasher.digest()


@dataclass(frozen=True)
class Record:
    """One parsed (or about to be written) log line.

    ``line`` is the record in format 1, without a checksum; :meth:`encode` gives the bytes a log
    of any format holds. An entry's ``payload`` is its JSON (all of it, or for a packed entry
    or a blob the fields besides ``tokens``); ``payload_digest`` is its identity. ``tokens`` is
    the base64 of the packed arrays in a packed record, the packed arrays themselves in a blob.
    """

    kind: str
    line: bytes
    call: str = ""
    payload: bytes = b""
    payload_digest: bytes = b""
    epoch: str = ""
    rollout_id: str = ""
    at: float = 0.0
    format: int = 0
    tokens: bytes = b""

    def encode(self, *, sealed: bool) -> bytes:
        """Return the bytes of this record in a log whose lines are ``sealed`` (format 2) or not.

        A blob is its sealed line followed by its bytes; only a sealed log holds one.
        """
        if self.kind == BLOB:
            if not sealed:
                raise ValueError("a blob record belongs only in a log whose lines are sealed")
            return seal(self.line) + self.tokens
        return seal(self.line) if sealed else self.line


class IncompleteFrame(ValueError):
    """The bytes end inside a record: a torn tail, once every earlier record was complete."""


def _encode(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode(
        "ascii"
    ) + (b"\n")


def open_record(rollout_id: str, epoch: str) -> Record:
    """Return the header that starts every new log of ``rollout_id`` (in :data:`FORMAT`)."""
    line = _encode({"epoch": epoch, "format": FORMAT, "kind": OPEN, "rollout_id": rollout_id})
    return Record(OPEN, line, epoch=epoch, rollout_id=rollout_id, format=FORMAT)


def entry_record(model_call_id: str, payload: bytes) -> Record:
    """Return the record of an entry whose canonical JSON is ``payload``."""
    call = _json_string(model_call_id)
    return Record(
        ENTRY,
        b"".join((ENTRY_PREFIX, call, _ENTRY_FIELD.encode("ascii"), payload, ENTRY_SUFFIX)),
        call=model_call_id,
        payload=payload,
        payload_digest=digest(payload),
    )


def packed_record(model_call_id: str, rest: bytes, tokens: bytes) -> Record:
    """Return the record of a packed entry: ``rest`` its other fields, ``tokens`` its arrays."""
    call = _json_string(model_call_id)
    line = b"".join(
        (PACKED_PREFIX, call, _TOKENS_FIELD.encode("ascii"), tokens, _PACKED_ENTRY_FIELD, rest)
    )
    return _packed(line + ENTRY_SUFFIX, model_call_id, rest, tokens)


def blob_record(model_call_id: str, rest: bytes, raw: bytes) -> Record:
    """Return the record of a format 4 entry: ``rest`` its other fields, ``raw`` its arrays."""
    call = _json_string(model_call_id)
    line = b"%s%s%s%d%s%08x%s%s}\n" % (
        BLOB_PREFIX,
        call,
        _SIZE_FIELD.encode("ascii"),
        len(raw),
        _SUM_FIELD,
        zlib.crc32(raw),
        _BLOB_ENTRY_FIELD,
        rest,
    )
    return Record(
        BLOB, line, call=model_call_id, payload=rest, payload_digest=digest(raw, rest), tokens=raw
    )


def _packed(line: bytes, call: str, rest: bytes, tokens: bytes, *, identify: bool = True) -> Record:
    # Base64 never holds a NUL, so the identity cannot be split between the parts another way.
    identity = digest(tokens, rest) if identify else b""
    return Record(PACKED, line, call=call, payload=rest, payload_digest=identity, tokens=tokens)


def intent_record(model_call_id: str) -> Record:
    """Return the record of a ``begin_call`` intent."""
    return Record(INTENT, _encode({"call": model_call_id, "kind": INTENT}), call=model_call_id)


def mark_record(model_call_id: str, reason: str) -> Record:
    """Return the record that marks the rollout incomplete."""
    line = _encode({"call": model_call_id, "kind": MARK, "reason": reason})
    return Record(MARK, line, call=model_call_id)


def freeze_record() -> Record:
    """Return the fence record."""
    return Record(FREEZE, _encode({"kind": FREEZE}))


def tombstone_record(rollout_id: str, reason: str, at: float) -> Record:
    """Return the single record of a dropped or retired rollout, written at time ``at``."""
    line = _encode({"at": at, "kind": TOMBSTONE, "reason": reason, "rollout_id": rollout_id})
    return Record(TOMBSTONE, line, rollout_id=rollout_id, at=at)


def _string(fields: dict[str, Any], name: str) -> str:
    value = fields.get(name)
    if not isinstance(value, str):
        raise ValueError(f"field {name!r} must be a string, got {type(value).__name__}")
    return value


def _parse_call(line: bytes, prefix: bytes, field: str) -> tuple[str, int]:
    """Return the call id after ``prefix`` and where ``field`` after it ends (ASCII lines only)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"the line is not UTF-8: {exc}") from None
    start = len(prefix)
    if not text.startswith('"', start):
        raise ValueError("an entry record must name its call as a JSON string")
    try:
        call, end = scanstring(text, start + 1)
    except ValueError as exc:
        raise ValueError(f"the call id of the entry is not a JSON string: {exc}") from None
    if not text.startswith(field, end) or not text[:end].isascii():
        raise ValueError("an entry record must hold an ASCII call id followed by its entry")
    return call, end + len(field)


def _entry_json(line: bytes, start: int) -> bytes:
    payload = line[start : -len(ENTRY_SUFFIX)]
    if not payload.startswith(b"{") or not line.endswith(b"}" + ENTRY_SUFFIX):
        raise ValueError("the entry of an entry record must be a JSON object")
    return payload


def _parse_entry(line: bytes, identify: bool) -> Record:
    # Only the call id is decoded; the payload is checked for shape and parsed at freeze.
    call, start = _parse_call(line, ENTRY_PREFIX, _ENTRY_FIELD)
    payload = _entry_json(line, start)
    identity = digest(payload) if identify else b""
    return Record(ENTRY, line, call=call, payload=payload, payload_digest=identity)


def _parse_packed(line: bytes, identify: bool) -> Record:
    call, start = _parse_call(line, PACKED_PREFIX, _TOKENS_FIELD)
    end = line.find(_PACKED_ENTRY_FIELD, start)
    if end < 0:
        raise ValueError('a packed record must hold its tokens followed by ","entry":')
    # Whether the tokens are base64 is checked when they are decoded, at freeze.
    tokens = line[start:end]
    rest = _entry_json(line, end + len(_PACKED_ENTRY_FIELD))
    return _packed(line, call, rest, tokens, identify=identify)


def _parse_blob_line(line: bytes) -> tuple[str, int, int, bytes]:
    """Return the call, size, checksum and other fields a blob's (unsealed) line names."""
    call, start = _parse_call(line, BLOB_PREFIX, _SIZE_FIELD)
    end = line.find(_SUM_FIELD, start)
    digits = line[start:end] if end >= 0 else b""
    if not digits or not _DIGITS.issuperset(digits) or (len(digits) > 1 and digits[0] == 48):
        raise ValueError("a blob record must give its size as a decimal number")
    hex_start = end + len(_SUM_FIELD)
    checksum = line[hex_start : hex_start + _CRC_DIGITS]
    if len(checksum) != _CRC_DIGITS or not _HEX.issuperset(checksum):
        raise ValueError("a blob record must give the checksum of its bytes as 8 hex digits")
    if not line.startswith(_BLOB_ENTRY_FIELD, hex_start + _CRC_DIGITS):
        raise ValueError('a blob record must hold its checksum followed by ","entry":')
    rest = _entry_json(line, hex_start + _CRC_DIGITS + len(_BLOB_ENTRY_FIELD))
    return call, int(digits), int(checksum, 16), rest


def parse_frame(
    data: bytes, start: int = 0, *, sealed: bool = True, blobs: bool = True, identify: bool = True
) -> tuple[Record, int]:
    """Parse the record at ``start`` of ``data``; return it and the offset where it ends.

    A record is one line, and for a blob (``blobs``: a format 4 log) the bytes after it too.
    Raises :class:`IncompleteFrame` if ``data`` ends inside the record, and ``ValueError``
    saying what is wrong if it is damaged; a blob's line is verified before its size is
    trusted, and its bytes against their checksum.
    """
    newline = data.find(b"\n", start)
    if newline < 0:
        raise IncompleteFrame("the bytes end inside a line")
    line = data[start : newline + 1]
    if not (blobs and line.startswith(BLOB_PREFIX)):
        return parse_record(line, sealed=sealed, identify=identify), newline + 1
    if not sealed:
        raise ValueError("a blob record in a log whose lines carry no checksum")
    plain = _unseal(line)
    call, size, checksum, rest = _parse_blob_line(plain)
    end = newline + 1 + size
    if end > len(data):
        raise IncompleteFrame(f"the bytes end inside the {size} bytes of a blob")
    raw = data[newline + 1 : end]
    if zlib.crc32(raw) != checksum:
        raise ValueError(
            "checksum mismatch: the bytes of the blob do not sum to what its line says; they "
            "were damaged after they were written"
        )
    identity = digest(raw, rest) if identify else b""
    record = Record(BLOB, plain, call=call, payload=rest, payload_digest=identity, tokens=raw)
    return record, end


def parse_log(data: bytes) -> list[Record]:
    """Return every record of a whole log's ``data``, in order; raise what :func:`parse_frame` does.

    The first line says whether lines carry checksums and, in its header, the log's format.
    """
    records: list[Record] = []
    start = 0
    sealed = has_checksum(data[: data.find(b"\n") + 1])
    blobs = False
    while start < len(data):
        record, start = parse_frame(data, start, sealed=sealed, blobs=blobs)
        blobs = blobs or (record.kind == OPEN and record.format >= 4)
        records.append(record)
    return records


def parse_record(line: bytes, *, sealed: bool = True, identify: bool = True) -> Record:
    """Parse one complete line (its ``\\n`` included); raise ``ValueError`` saying what is wrong.

    ``sealed`` says whether the log's lines carry checksums (formats 2 and 3) or not (format 1);
    a sealed line's checksum is verified before anything else is read from it. Without
    ``identify`` an entry's ``payload_digest`` is left empty, for a reader that needs only its
    payload.
    """
    if not line.endswith(b"\n"):
        raise ValueError("the line does not end with a newline")
    if sealed:
        line = _unseal(line)
    elif has_checksum(line):
        raise ValueError("the line carries a checksum, but the log's first line has none")
    if line.startswith(ENTRY_PREFIX):
        return _parse_entry(line, identify)
    if line.startswith(PACKED_PREFIX):
        return _parse_packed(line, identify)
    if line.startswith(BLOB_PREFIX):
        raise ValueError("a blob record is a line and its bytes; parse_frame reads it")
    try:
        fields = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"the line is not JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise ValueError(f"a record must be a JSON object, got {type(fields).__name__}")
    kind = fields.get("kind")
    if kind == OPEN:
        expected = SEALED_FORMATS if sealed else (1,)
        log_format = fields.get("format")
        if type(log_format) is not int or log_format not in expected:
            raise ValueError(
                f"log format {log_format!r} is not one this reader knows (it reads "
                f"formats {', '.join(map(str, FORMATS))}; a header "
                f"{'with' if sealed else 'without'} a checksum must say format "
                f"{' or '.join(map(str, expected))})"
            )
        return Record(
            OPEN,
            line,
            epoch=_string(fields, "epoch"),
            rollout_id=_string(fields, "rollout_id"),
            format=log_format,
        )
    if kind in (INTENT, MARK):
        return Record(kind, line, call=_string(fields, "call"))
    if kind == FREEZE:
        return Record(FREEZE, line)
    if kind == TOMBSTONE:
        at = fields.get("at")
        if not isinstance(at, int | float) or isinstance(at, bool):
            raise ValueError(f"field 'at' must be a number, got {type(at).__name__}")
        return Record(TOMBSTONE, line, rollout_id=_string(fields, "rollout_id"), at=float(at))
    if kind in (ENTRY, PACKED, BLOB):
        raise ValueError(f"an {kind} record must start with its kind and call")
    raise ValueError(f"unknown record kind {kind!r}")


@dataclass
class ReplayedRollout:
    """What the records of one rollout log say, replayed in order.

    ``version`` counts state changes (new entries, intents, marks); a freeze does not change
    it, so repeated freezes agree (FREEZE-2) and any mark after a freeze changes it (DROP-4).
    ``sealed`` says whether every line of the log carries a checksum; the log sets it from its
    first line, the one line whose format is not known before it is read. ``format`` is what
    the header says.
    """

    rollout_id: str
    epoch: str = ""
    digests: dict[str, bytes] = field(default_factory=dict)
    intents: set[str] = field(default_factory=set)
    marked: bool = False
    frozen: bool = False
    retired: bool = False
    retired_at: float = 0.0
    version: int = 0
    lines: int = 0
    sealed: bool = True
    format: int = FORMAT

    @property
    def opened(self) -> bool:
        """Whether the log has its header, that is whether anything was ever written to it."""
        return bool(self.epoch)

    @property
    def incomplete(self) -> bool:
        """Whether a freeze now reports lost evidence: a mark, or an intent with no entry."""
        return self.marked or any(call not in self.digests for call in self.intents)

    @property
    def snapshot_id(self) -> str:
        """The id naming this incarnation at this version."""
        return f"{self.epoch}-{self.version}"

    def apply(self, record: Record) -> None:
        """Advance by one record; raise ``ValueError`` if it cannot follow what came before."""
        if self.retired:
            raise ValueError(f"a {record.kind!r} record follows the tombstone")
        if record.kind in (OPEN, TOMBSTONE):
            if self.lines:
                raise ValueError(f"a {record.kind!r} record must be the first line")
            if record.rollout_id != self.rollout_id:
                raise ValueError(
                    f"the log belongs to rollout {record.rollout_id!r}, "
                    f"expected {self.rollout_id!r}"
                )
            if record.kind == OPEN:
                self.epoch = record.epoch
                self.format = record.format
            else:
                self.retired = True
                self.retired_at = record.at
        elif not self.epoch:
            raise ValueError(f"a {record.kind!r} record comes before the 'open' header")
        elif record.kind in (ENTRY, PACKED, BLOB):
            if record.kind == PACKED and self.format < 3:
                raise ValueError(f"a packed record in a format {self.format} log")
            if record.kind == BLOB and self.format < 4:
                raise ValueError(f"a blob record in a format {self.format} log")
            known = self.digests.get(record.call)
            if known is None:
                self.digests[record.call] = record.payload_digest
                self.version += 1
            elif known != record.payload_digest:
                # Never written by this store; fail closed if another writer left one.
                self.marked = True
                self.version += 1
        elif record.kind == INTENT:
            if record.call not in self.intents:
                self.intents.add(record.call)
                self.version += 1
        elif record.kind == MARK:
            self.marked = True
            self.version += 1
        elif record.kind == FREEZE:
            self.frozen = True
        self.lines += 1
