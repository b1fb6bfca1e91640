"""The rollout-log record format and its replay (reference._file_records)."""

from __future__ import annotations

import json

import pytest

from reference._file_records import (
    ENTRY,
    FREEZE,
    INTENT,
    MARK,
    OPEN,
    TOMBSTONE,
    Record,
    RolloutState,
    digest,
    entry_record,
    freeze_record,
    intent_record,
    mark_record,
    open_record,
    parse_record,
    tombstone_record,
)
from tokcap_spec.records import TokenEntry

PAYLOAD = TokenEntry(
    rollout_id="r", model_call_id="a\nb", generation_token_ids=[1], generation_log_probs=[-0.0]
).to_json_bytes()


def opened(rollout_id: str = "r") -> RolloutState:
    state = RolloutState(rollout_id)
    state.apply(open_record(rollout_id, "e1"))
    return state


class TestEncoding:
    @pytest.mark.parametrize(
        "record",
        [
            open_record("r", "e1"),
            entry_record("a\nb", PAYLOAD),
            intent_record("x\n\"y'"),
            mark_record("", "mark_incomplete"),
            freeze_record(),
            tombstone_record("r", "drop", 12.5),
        ],
        ids=[OPEN, ENTRY, INTENT, MARK, FREEZE, TOMBSTONE],
    )
    def test_every_record_is_one_json_line_that_parses_back(self, record: Record) -> None:
        """Each record encodes to one newline-terminated JSON object and parses to itself."""
        assert record.line.count(b"\n") == 1
        assert record.line.endswith(b"\n")
        assert json.loads(record.line)["kind"] == record.kind
        assert parse_record(record.line) == record

    def test_an_entry_line_is_valid_json(self) -> None:
        """An entry line parses as JSON holding the call id and the entry itself."""
        fields = json.loads(entry_record("a\nb", PAYLOAD).line)
        assert fields == {"kind": ENTRY, "call": "a\nb", "entry": json.loads(PAYLOAD)}

    def test_an_entry_embeds_the_canonical_bytes_verbatim(self) -> None:
        """The stored payload is exactly the entry's canonical JSON."""
        record = parse_record(entry_record("a\nb", PAYLOAD).line)
        assert record.payload == PAYLOAD
        assert record.call == "a\nb"
        assert record.payload_digest == digest(PAYLOAD)

    def test_a_lone_surrogate_call_id_encodes(self) -> None:
        """Call ids that are not valid UTF-8 still encode, as ASCII escapes."""
        assert parse_record(intent_record("\ud800").line).call == "\ud800"

    def test_digests_differ_exactly_when_bytes_differ(self) -> None:
        """Equal payloads share a digest and different ones do not."""
        assert digest(b"{}") == digest(b"{}")
        assert digest(b"{}") != digest(b"{ }")


class TestParsing:
    @pytest.mark.parametrize(
        ("line", "reason"),
        [
            (b'{"kind":"freeze"}', "newline"),
            (b"not json\n", "not JSON"),
            (b"[1]\n", "JSON object"),
            (b'{"kind":"teleport"}\n', "unknown record kind 'teleport'"),
            (b'{"epoch":"e","format":2,"kind":"open","rollout_id":"r"}\n', "log format 2"),
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
            parse_record(line)


class TestRolloutState:
    def test_a_fresh_state_is_unopened_and_clean(self) -> None:
        """Before any record the rollout is unopened, unfrozen and clean at version 0."""
        state = RolloutState("r")
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
        other = RolloutState("r")
        other.apply(open_record("r", "e2"))
        assert other.snapshot_id != first

    def test_a_tombstone_retires(self) -> None:
        """A tombstone as the first line retires the rollout at its time."""
        state = RolloutState("r")
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
        state = RolloutState("r")
        *valid, impossible = records
        for record in valid:
            state.apply(record)
        with pytest.raises(ValueError, match=reason):
            state.apply(impossible)
