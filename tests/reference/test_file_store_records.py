"""The rollout-log record format and its replay (reference._file_records)."""

from __future__ import annotations

import base64
import json
import zlib

import pytest

from reference._file_packed import check_entry
from reference._file_records import (
    BLOB,
    ENTRY,
    FORMAT,
    FREEZE,
    INTENT,
    MARK,
    OPEN,
    PACKED,
    TOMBSTONE,
    IncompleteFrame,
    Record,
    ReplayedRollout,
    blob_record,
    digest,
    entry_record,
    freeze_record,
    has_checksum,
    intent_record,
    mark_record,
    open_record,
    packed_record,
    parse_frame,
    parse_log,
    parse_record,
    seal,
    tombstone_record,
)
from tokcap_spec.records import TokenEntry

PAYLOAD = TokenEntry(
    rollout_id="r", model_call_id="a\nb", generation_token_ids=[1], generation_log_probs=[-0.0]
).to_json_bytes()


PACKED_ENTRY = check_entry(TokenEntry.from_json_bytes(PAYLOAD)).packed
assert PACKED_ENTRY is not None


def opened(rollout_id: str = "r") -> ReplayedRollout:
    state = ReplayedRollout(rollout_id)
    state.apply(open_record(rollout_id, "e1"))
    return state


EVERY_KIND = pytest.mark.parametrize(
    "record",
    [
        open_record("r", "e1"),
        entry_record("a\nb", PAYLOAD),
        packed_record("a\nb", PACKED_ENTRY[0], base64.b64encode(PACKED_ENTRY[1])),
        intent_record("x\n\"y'"),
        mark_record("", "mark_incomplete"),
        freeze_record(),
        tombstone_record("r", "drop", 12.5),
    ],
    ids=[OPEN, ENTRY, PACKED, INTENT, MARK, FREEZE, TOMBSTONE],
)


class TestEncoding:
    @EVERY_KIND
    @pytest.mark.parametrize("sealed", [True, False], ids=["format-2", "format-1"])
    def test_every_record_is_one_json_line_that_parses_back(
        self, record: Record, sealed: bool
    ) -> None:
        """Each record encodes to one newline-terminated JSON object and parses to itself.

        The one exception: a header is always written sealed, and says format 4, so without its
        checksum it is refused. (A blob is a line and bytes: see TestBlob.)
        """
        line = record.encode(sealed=sealed)
        assert line.count(b"\n") == 1
        assert line.endswith(b"\n")
        assert json.loads(line)["kind"] == record.kind
        if record.kind == OPEN and not sealed:
            with pytest.raises(ValueError, match="must say format 1"):
                parse_record(line, sealed=sealed)
        else:
            assert parse_record(line, sealed=sealed) == record

    @EVERY_KIND
    def test_a_sealed_line_ends_with_the_crc_of_what_precedes_it(self, record: Record) -> None:
        """Formats 2 to 4 append the CRC-32 of the line's bytes before the field, as hex."""
        line = record.encode(sealed=True)
        body, field, rest = line.rpartition(b',"crc":"')
        assert field
        assert rest == b"%08x" % zlib.crc32(body) + b'"}\n'
        assert json.loads(line)["crc"] == rest[:8].decode()

    def test_a_new_header_says_the_current_format(self) -> None:
        """New logs start in format 4: checksummed lines and token arrays as raw bytes."""
        assert FORMAT == 4
        assert json.loads(open_record("r", "e").line)["format"] == 4

    def test_an_entry_line_is_valid_json(self) -> None:
        """An entry line parses as JSON holding the call id and the entry itself."""
        fields = json.loads(entry_record("a\nb", PAYLOAD).encode(sealed=True))
        assert fields.pop("crc")
        assert fields == {"kind": ENTRY, "call": "a\nb", "entry": json.loads(PAYLOAD)}

    def test_an_entry_embeds_the_canonical_bytes_verbatim(self) -> None:
        """The stored payload is exactly the entry's canonical JSON."""
        record = parse_record(entry_record("a\nb", PAYLOAD).encode(sealed=True))
        assert record.payload == PAYLOAD
        assert record.call == "a\nb"
        assert record.payload_digest == digest(PAYLOAD)

    def test_a_lone_surrogate_call_id_encodes(self) -> None:
        """Call ids that are not valid UTF-8 still encode, as ASCII escapes."""
        assert parse_record(intent_record("\ud800").encode(sealed=True)).call == "\ud800"

    def test_digests_differ_exactly_when_bytes_differ(self) -> None:
        """Equal payloads share a digest and different ones do not."""
        assert digest(b"{}") == digest(b"{}")
        assert digest(b"{}") != digest(b"{ }")


class TestFirstLine:
    @EVERY_KIND
    @pytest.mark.parametrize("sealed", [True, False], ids=["format-2", "format-1"])
    def test_a_line_shows_whether_it_carries_a_checksum(self, record: Record, sealed: bool) -> None:
        """A log's first line tells its format: has_checksum is true exactly for sealed lines."""
        assert has_checksum(record.encode(sealed=sealed)) is sealed

    @pytest.mark.parametrize(
        ("line", "reason"),
        [
            (open_record("r", "e").line, "log format 4 .*without a checksum must say format 1"),
            (
                b'{"epoch":"e","format":3,"kind":"open","rollout_id":"r"}\n',
                "log format 3 .*without a checksum must say format 1",
            ),
            (
                b'{"epoch":"e","format":2,"kind":"open","rollout_id":"r"}\n',
                "log format 2 .*without a checksum must say format 1",
            ),
            (
                seal(b'{"epoch":"e","format":1,"kind":"open","rollout_id":"r"}\n'),
                "log format 1 .*with a checksum must say format 2 or 3 or 4",
            ),
            (
                seal(b'{"epoch":"e","format":5,"kind":"open","rollout_id":"r"}\n'),
                "log format 5 is not one this reader knows .*formats 1, 2, 3, 4",
            ),
            (
                seal(b'{"epoch":"e","format":true,"kind":"open","rollout_id":"r"}\n'),
                "log format True is not one",
            ),
        ],
        ids=[
            "format-4-unsealed",
            "format-3-unsealed",
            "format-2-unsealed",
            "format-1-sealed",
            "format-5",
            "bool",
        ],
    )
    def test_a_header_whose_format_and_checksum_disagree_is_refused(
        self, line: bytes, reason: str
    ) -> None:
        """A format 2 to 4 header without its checksum, or a format 1 one with one, is refused."""
        with pytest.raises(ValueError, match=reason):
            parse_record(line, sealed=has_checksum(line))


class TestParsing:
    @pytest.mark.parametrize(
        ("line", "reason"),
        [
            (b'{"kind":"freeze"}', "newline"),
            (b"not json\n", "not JSON"),
            (b"[1]\n", "JSON object"),
            (b'{"kind":"teleport"}\n', "unknown record kind 'teleport'"),
            (b'{"epoch":"e","format":5,"kind":"open","rollout_id":"r"}\n', "log format 5"),
            (b'{"kind":"blob","call":"a","size":0,"sum":"00000000","entry":{}}\n', "parse_frame"),
            (b'{"call":1,"kind":"mark","reason":""}\n', "'call' must be a string, got int"),
            (b'{"kind":"entry","entry":{"x":1}}\n', "must start with"),
            (b'{"kind":"entry","call":1,"entry":{}}\n', "call as a JSON string"),
            (b'{"kind":"entry","call":"a\x01","entry":{}}\n', "not a JSON string"),
            (b'{"kind":"entry","call":"a,"entry":{}}\n', "call id followed by its entry"),
            (b'{"kind":"entry","call":"\xc3\xa9","entry":{}}\n', "ASCII call id"),
            (b'{"kind":"entry","call":"a","entry":[1]}\n', "must be a JSON object"),
            (b'{"kind":"entry","call":"a","entry":{"x":1}\n', "must be a JSON object"),
            (b'{"kind":"entry","call":"a","entry":{}}\xff\n', "not UTF-8"),
            (b'{"at":"soon","kind":"tombstone","reason":"","rollout_id":"r"}\n', "'at'"),
            (b'{"kind":"freeze"}\xff\n', "not JSON"),
        ],
    )
    def test_refuses_a_damaged_line_saying_why(self, line: bytes, reason: str) -> None:
        """A line that is not a record is refused with a reason naming what is wrong."""
        with pytest.raises(ValueError, match=reason):
            parse_record(line, sealed=False)
        if line.endswith(b"}\n"):
            with pytest.raises(ValueError, match=reason):
                parse_record(seal(line))

    @pytest.mark.parametrize(
        ("line", "reason"),
        [
            (b'{"kind":"freeze"}\n', "does not end with its checksum"),
            (b'{"kind":"freeze","crc":"0000000"}\n', "does not end with its checksum"),
            (b'{"kind":"freeze","crc":"0000000G"}\n', "does not end with its checksum"),
            (b'{"kind":"freeze","crc":"00000000"}\n', "checksum mismatch: the line says 00000000"),
            (seal(b'{"kind":"freeze"}\n').replace(b"freeze", b"frieze"), "checksum mismatch"),
            (seal(b'{"kind":"freeze"}\n').upper(), "does not end with its checksum"),
        ],
        ids=["missing", "short", "not-hex", "wrong", "changed-body", "upper-case"],
    )
    def test_refuses_a_line_whose_checksum_does_not_hold(self, line: bytes, reason: str) -> None:
        """In a format 2 log, a line without its exact checksum is refused before it is read."""
        with pytest.raises(ValueError, match=reason):
            parse_record(line)

    def test_a_flipped_bit_anywhere_in_a_sealed_line_is_refused(self) -> None:
        """Every single-bit change of a sealed entry line is refused (or ends the line early)."""
        line = entry_record("a", PAYLOAD).encode(sealed=True)
        for offset in range(len(line)):
            for bit in range(8):
                damaged = bytearray(line)
                damaged[offset] ^= 1 << bit
                with pytest.raises(ValueError, match=r"checksum|newline"):
                    parse_record(bytes(damaged))


BLOB_RECORD = blob_record("a\nb", *PACKED_ENTRY)


def frame(data: bytes) -> Record:
    """Parse ``data`` as exactly one record of a format 4 log."""
    record, end = parse_frame(data)
    assert end == len(data)
    return record


class TestBlob:
    def test_a_blob_is_its_sealed_line_and_then_its_bytes(self) -> None:
        """The line names the size and CRC-32 of the bytes that follow it, and parses back."""
        encoded = BLOB_RECORD.encode(sealed=True)
        line, raw = encoded[: encoded.index(b"\n") + 1], encoded[encoded.index(b"\n") + 1 :]
        assert raw == PACKED_ENTRY[1]
        fields = json.loads(line)
        assert fields["kind"] == BLOB
        assert fields["call"] == "a\nb"
        assert fields["size"] == len(raw)
        assert fields["sum"] == f"{zlib.crc32(raw):08x}"
        assert fields["entry"] == json.loads(PACKED_ENTRY[0])
        assert frame(encoded) == BLOB_RECORD
        assert BLOB_RECORD.payload_digest == digest(raw, PACKED_ENTRY[0])

    def test_a_blob_is_never_written_without_checksums(self) -> None:
        """Only a sealed (format 4) log holds blobs, and only parse_frame reads them."""
        with pytest.raises(ValueError, match="sealed"):
            BLOB_RECORD.encode(sealed=False)
        encoded = BLOB_RECORD.encode(sealed=True)
        with pytest.raises(ValueError, match="parse_frame"):
            parse_record(encoded[: encoded.index(b"\n") + 1])

    def test_a_blob_cut_anywhere_is_incomplete(self) -> None:
        """Every prefix of a blob (its bytes may hold a newline) is an incomplete frame."""
        encoded = BLOB_RECORD.encode(sealed=True) + b"\n\n"
        for cut in range(len(encoded) - 2):
            with pytest.raises(IncompleteFrame):
                parse_frame(encoded[:cut])

    def test_every_flipped_bit_of_a_blob_is_refused(self) -> None:
        """Each bit flipped alone fails a checksum, or (the line's newline) looks unfinished."""
        encoded = BLOB_RECORD.encode(sealed=True)
        newline = encoded.index(b"\n")
        for offset in range(len(encoded)):
            for bit in range(8):
                damaged = bytearray(encoded)
                damaged[offset] ^= 1 << bit
                if offset == newline:
                    with pytest.raises(ValueError, match=r"checksum|inside"):
                        parse_frame(bytes(damaged))
                    continue
                with pytest.raises(ValueError, match="checksum") as raised:
                    parse_frame(bytes(damaged))
                assert not isinstance(raised.value, IncompleteFrame), (offset, bit)

    @pytest.mark.parametrize(
        ("line", "reason"),
        [
            (b'{"kind":"blob","call":"a","size":x,"sum":"00000000","entry":{}}\n', "decimal"),
            (b'{"kind":"blob","call":"a","size":01,"sum":"00000000","entry":{}}\n', "decimal"),
            (b'{"kind":"blob","call":"a","size":-1,"sum":"00000000","entry":{}}\n', "decimal"),
            (b'{"kind":"blob","call":"a","size":0,"sum":"0000000g","entry":{}}\n', "8 hex"),
            (b'{"kind":"blob","call":"a","size":0,"sum":"00000000","entry":[]}\n', "JSON object"),
            (b'{"kind":"blob","call":"a","size":0,"sum":"00000000"}\n', "followed by"),
            (b'{"kind":"blob","call":1,"size":0,"sum":"00000000","entry":{}}\n', "JSON string"),
            (b'{"kind":"blob","call":"a","size":0,"sum":"00000001","entry":{}}\n', "checksum"),
        ],
    )
    def test_refuses_a_damaged_blob_line_saying_why(self, line: bytes, reason: str) -> None:
        """A blob line that does not say its size, sum and fields exactly is refused."""
        with pytest.raises(ValueError, match=reason):
            parse_frame(seal(line))

    def test_an_unsealed_blob_is_refused(self) -> None:
        """A blob in a log whose lines carry no checksum is not a record."""
        line = b'{"kind":"blob","call":"a","size":0,"sum":"00000000","entry":{}}\n'
        with pytest.raises(ValueError, match="no checksum"):
            parse_frame(line, sealed=False)

    def test_parse_log_reads_blobs_only_after_a_format_4_header(self) -> None:
        """A whole log parses record by record; in a format 3 log a blob is refused."""
        header = open_record("r", "e1").encode(sealed=True)
        body = BLOB_RECORD.encode(sealed=True) + freeze_record().encode(sealed=True)
        assert [r.kind for r in parse_log(header + body)] == [OPEN, BLOB, FREEZE]
        older = seal(b'{"epoch":"e","format":3,"kind":"open","rollout_id":"r"}\n')
        with pytest.raises(ValueError, match="parse_frame"):
            parse_log(older + body)


class TestReplayedRollout:
    def test_a_fresh_state_is_unopened_and_clean(self) -> None:
        """Before any record the rollout is unopened, unfrozen and clean at version 0."""
        state = ReplayedRollout("r")
        assert (state.opened, state.frozen, state.incomplete, state.version) == (
            False,
            False,
            False,
            0,
        )

    def test_new_entries_intents_and_marks_count_as_versions(self) -> None:
        """Each new entry, new intent and mark bumps the version; a freeze does not."""
        state = opened()
        for record in (
            entry_record("a", PAYLOAD),
            intent_record("b"),
            intent_record("b"),
            freeze_record(),
            mark_record("", "x"),
            mark_record("", "x"),
        ):
            state.apply(record)
        assert state.version == 4
        assert state.frozen
        assert state.lines == 7

    def test_an_identical_entry_is_not_a_change(self) -> None:
        """Replaying the same entry twice changes nothing the second time."""
        state = opened()
        state.apply(entry_record("a", PAYLOAD))
        state.apply(entry_record("a", PAYLOAD))
        assert (state.version, state.marked) == (1, False)

    def test_a_conflicting_entry_fails_closed(self) -> None:
        """A second, different entry for one call marks the rollout and keeps the first."""
        state = opened()
        state.apply(entry_record("a", PAYLOAD))
        state.apply(entry_record("a", PAYLOAD + b" "))
        assert state.incomplete
        assert state.digests["a"] == digest(PAYLOAD)

    def test_an_intent_without_its_entry_is_incomplete(self) -> None:
        """An intent makes the state incomplete until the entry of the same call arrives."""
        state = opened()
        state.apply(intent_record("a"))
        assert state.incomplete
        state.apply(entry_record("a", PAYLOAD))
        assert not state.incomplete

    def test_the_snapshot_id_names_epoch_and_version(self) -> None:
        """The snapshot id changes with the epoch and with the version."""
        state = opened()
        first = state.snapshot_id
        state.apply(mark_record("", "x"))
        assert state.snapshot_id != first
        other = ReplayedRollout("r")
        other.apply(open_record("r", "e2"))
        assert other.snapshot_id != first

    def test_a_tombstone_retires(self) -> None:
        """A tombstone as the first line retires the rollout at its time."""
        state = ReplayedRollout("r")
        state.apply(tombstone_record("r", "retire", 7.0))
        assert (state.retired, state.retired_at) == (True, 7.0)

    @pytest.mark.parametrize(
        ("records", "reason"),
        [
            ([freeze_record()], "before the 'open' header"),
            ([open_record("r", "e"), open_record("r", "e")], "must be the first line"),
            ([open_record("r", "e"), tombstone_record("r", "x", 1.0)], "must be the first"),
            ([tombstone_record("r", "x", 1.0), freeze_record()], "follows the tombstone"),
            ([open_record("other", "e")], "belongs to rollout 'other', expected 'r'"),
            ([tombstone_record("R", "x", 1.0)], "belongs to rollout 'R'"),
        ],
        ids=["no-header", "two-headers", "late-tombstone", "after-tombstone", "alien", "case"],
    )
    def test_refuses_an_impossible_sequence(self, records: list[Record], reason: str) -> None:
        """Records that no store writes in that order are refused, saying which rule broke."""
        state = ReplayedRollout("r")
        *valid, impossible = records
        for record in valid:
            state.apply(record)
        with pytest.raises(ValueError, match=reason):
            state.apply(impossible)
