"""Log format 3: token arrays packed as binary, bit-exact, with format 2 logs kept as they are."""

from __future__ import annotations

import asyncio
import base64
import enum
import struct
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference._file_log import log_name
from reference._file_packed import check_entry, unpack_base64_entry, unpack_entry
from reference._file_records import blob_record, packed_record, seal
from reference.file_store import FileTokenStore
from tokcap_spec.errors import ConflictingEntryError, CorruptStoreError
from tokcap_spec.records import MAX_TOKEN_ID, TokenEntry

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def entry(call: str = "c", **fields: Any) -> TokenEntry:
    values: dict[str, Any] = {
        "rollout_id": "r",
        "model_call_id": call,
        "model": "m",
        "prompt_token_ids": [0, 7, MAX_TOKEN_ID],
        "generation_token_ids": [1, 2, 3, 4],
        "generation_log_probs": [float("-inf"), -0.0, -5e-324, -1.7976931348623157e308],
        "created_at": 2.5,
        **fields,
    }
    return TokenEntry(**values)


class Level(enum.IntEnum):
    """An int subclass a framework might hand over as a token id."""

    LOW = 5


class Wide(int):
    """Another int subclass."""


class Precise(float):
    """A float subclass a framework might hand over as a log prob."""


ODD_IDS = st.one_of(
    st.integers(-3, 3),
    st.integers(-(2**63), 2**63),
    st.sampled_from(
        [
            MAX_TOKEN_ID,
            MAX_TOKEN_ID + 1,
            -(2**31),
            2**40,
            True,
            False,
            1.0,
            "1",
            None,
            Level.LOW,
            Wide(7),
            Wide(-7),
            [1],
            b"1",
        ]
    ),
)
ODD_PROBS = st.one_of(
    st.floats(width=64),
    st.sampled_from(
        [1, 0, True, "x", None, float("nan"), -0.0, Precise(-1.5), Precise("nan"), [1.0], 2**70]
    ),
)
ODD_ARRAYS = st.one_of(st.lists(ODD_IDS, max_size=4), st.lists(ODD_IDS, max_size=4).map(tuple))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileTokenStore]:
    opened = FileTokenStore(tmp_path)
    yield opened
    run(opened.close())


def log_of(store: FileTokenStore) -> bytes:
    return (Path(store.root) / log_name("r")).read_bytes()


def freeze_payloads(store: FileTokenStore) -> list[bytes]:
    return [e.to_json_bytes() for e in run(FileTokenStore(store.root).freeze("r")).entries]


class TestPacking:
    def test_an_entry_comes_back_with_every_bit_of_every_value(self) -> None:
        """Unpacking a packed entry gives an equal entry with the same canonical bytes."""
        original = entry(output_items=[{"a": "ü"}], token_item_index=0, extra_field=[1.5])
        packed = check_entry(original).packed
        assert packed is not None
        back = unpack_entry(*packed)
        assert back == original
        assert back.to_json_bytes() == original.to_json_bytes()

    @settings(max_examples=50, deadline=None, derandomize=True)
    @given(
        ids=st.lists(st.integers(0, MAX_TOKEN_ID), max_size=20),
        probs=st.lists(st.floats(allow_nan=False, width=64), max_size=20),
    )
    def test_any_valid_arrays_round_trip_exactly(self, ids: list[int], probs: list[float]) -> None:
        """Whatever arrays the record rules allow read back to the same canonical bytes."""
        original = entry(
            prompt_token_ids=ids,
            generation_token_ids=ids[: len(probs)] + [0] * (len(probs) - len(ids)),
            generation_log_probs=probs,
        )
        packed = check_entry(original).packed
        assert packed is not None
        assert unpack_entry(*packed).to_json_bytes() == original.to_json_bytes()

    @settings(max_examples=600, deadline=None, derandomize=True)
    @given(
        prompt=ODD_ARRAYS,
        generated=ODD_ARRAYS,
        probs=st.one_of(
            st.lists(ODD_PROBS, max_size=4), st.lists(ODD_PROBS, max_size=4).map(tuple)
        ),
    )
    def test_accepts_exactly_what_checked_json_bytes_accepts(
        self, prompt: list[Any], generated: list[Any], probs: list[Any]
    ) -> None:
        """An unvalidated entry is refused exactly when checked_json_bytes refuses it; an
        accepted one reads back as its canonical JSON reads back."""
        odd = entry().model_copy(
            update={
                "prompt_token_ids": prompt,
                "generation_token_ids": generated,
                "generation_log_probs": probs,
            }
        )
        try:
            expected = TokenEntry.from_json_bytes(odd.checked_json_bytes()).to_json_bytes()
        except (ValueError, TypeError) as exc:
            with pytest.raises(type(exc)):
                check_entry(odd)
            return
        checked = check_entry(odd)
        back = unpack_entry(*checked.packed) if checked.packed else None
        got = back.to_json_bytes() if back else checked.json_bytes()
        assert TokenEntry.from_json_bytes(got).to_json_bytes() == expected

    def test_integer_log_probs_keep_their_json_form(self) -> None:
        """Log probs that are not all floats are not packed, since 1 would read back as 1.0."""
        odd = entry().model_copy(update={"generation_log_probs": [1, -0.5, -1.0, -2.0]})
        checked = check_entry(odd)
        assert checked.packed is None
        assert checked.json_bytes() == odd.to_json_bytes()

    @pytest.mark.parametrize(
        ("damage", "message"),
        [
            (lambda raw: raw[:-1], "bytes"),
            (lambda raw: struct.pack("<III", 3, 4, 3) + raw[12:-8], "equal length"),
            (lambda raw: raw[:12] + struct.pack("<i", -1) + raw[16:], "outside"),
            (lambda raw: raw[:-8] + struct.pack("<d", float("nan")), "NaN"),
        ],
        ids=["short", "lengths", "negative-id", "nan"],
    )
    def test_packed_tokens_that_break_the_record_rules_are_refused(
        self, damage: Any, message: str
    ) -> None:
        """Packed arrays the record rules forbid raise ValueError instead of an entry."""
        packed = check_entry(entry()).packed
        assert packed is not None
        rest, raw = packed
        with pytest.raises(ValueError, match=message):
            unpack_entry(rest, damage(raw))
        with pytest.raises(ValueError, match=message):
            unpack_base64_entry(rest, base64.b64encode(damage(raw)))

    def test_format_3_tokens_that_are_not_base64_are_refused(self) -> None:
        """The tokens of a format 3 record must be base64."""
        packed = check_entry(entry()).packed
        assert packed is not None
        with pytest.raises(ValueError, match="not base64"):
            unpack_base64_entry(packed[0], b"!!!!")

    def test_fields_that_repeat_an_array_are_refused(self) -> None:
        """The JSON part of a packed entry may not carry an array of its own."""
        packed = check_entry(entry()).packed
        assert packed is not None
        rest = packed[0].replace(b'{"created_at"', b'{"prompt_token_ids":[],"created_at"')
        with pytest.raises(ValueError, match="without its arrays"):
            unpack_entry(rest, packed[1])


FORMAT_3_HEADER = seal(b'{"epoch":"three","format":3,"kind":"open","rollout_id":"r"}\n')
PACKED_FORMATS = pytest.mark.parametrize("header", [b"", FORMAT_3_HEADER], ids=["4", "3"])
"""A new log (format 4, blobs) and one begun in format 3 (base64 packed records)."""


def begin(store: FileTokenStore, header: bytes) -> None:
    """Start the log of rollout ``r`` with ``header``, or leave it to the store if empty."""
    if header:
        (Path(store.root) / log_name("r")).write_bytes(header)


class TestStoreInFormat4:
    def test_a_new_log_keeps_its_entries_arrays_as_bytes(self, store: FileTokenStore) -> None:
        """A new log says format 4 and keeps an entry's arrays as raw bytes after its line."""
        run(store.put(entry()))
        data = log_of(store)
        assert b'"format":4' in data.splitlines()[0]
        assert b'"kind":"blob"' in data
        assert b"-Infinity" not in data
        raw = check_entry(entry()).packed
        assert raw is not None
        assert data.endswith(raw[1])
        assert freeze_payloads(store) == [entry().to_json_bytes()]

    def test_a_format_3_log_is_appended_to_in_format_3(self, store: FileTokenStore) -> None:
        """A log begun in format 3 gets base64 packed records and freezes as before."""
        begin(store, FORMAT_3_HEADER)
        run(store.put(entry("a")))
        run(store.put(entry("b")))
        data = log_of(store)
        assert data.count(b'"kind":"packed"') == 2
        assert b'"kind":"blob"' not in data
        assert freeze_payloads(store) == [entry("a").to_json_bytes(), entry("b").to_json_bytes()]

    @PACKED_FORMATS
    def test_an_identical_reput_is_a_no_op(self, store: FileTokenStore, header: bytes) -> None:
        """Re-putting equal values, even as float subclass instances, changes nothing."""

        class Precise(float):
            pass

        begin(store, header)
        run(store.put(entry()))
        before = log_of(store)
        probs = [Precise(p) for p in entry().generation_log_probs]
        run(store.put(entry().model_copy(update={"generation_log_probs": probs})))
        run(store.put(entry()))
        assert log_of(store) == before

    @pytest.mark.parametrize(
        "change",
        [
            {"generation_log_probs": [float("-inf"), 0.0, -5e-324, -1.7976931348623157e308]},
            {"prompt_token_ids": [0, 7, MAX_TOKEN_ID - 1]},
            {"generation_log_probs": [1, -0.0, -5e-324, -1.7976931348623157e308]},
            {"model": "n"},
        ],
        ids=["negative-zero-becomes-zero", "token-id", "int-log-prob", "metadata"],
    )
    @PACKED_FORMATS
    def test_a_reput_differing_in_one_bit_conflicts(
        self, store: FileTokenStore, change: dict[str, Any], header: bytes
    ) -> None:
        """A re-put whose canonical bytes differ anywhere raises and marks the rollout."""
        begin(store, header)
        run(store.put(entry()))
        with pytest.raises(ConflictingEntryError):
            run(store.put(entry().model_copy(update=change)))
        assert run(store.freeze("r")).incomplete

    def test_an_entry_with_integer_log_probs_round_trips_in_json(
        self, store: FileTokenStore
    ) -> None:
        """An entry that cannot be packed is kept as JSON and reads back as JSON would give it."""
        odd = entry().model_copy(update={"generation_log_probs": [1, -0.5, -1.0, -2.0]})
        run(store.put(odd))
        run(store.put(odd))
        assert b'"kind":"entry"' in log_of(store)
        as_json_reads_it = TokenEntry.from_json_bytes(odd.to_json_bytes())
        assert freeze_payloads(store) == [as_json_reads_it.to_json_bytes()]


FORMAT_2_HEADER = seal(b'{"epoch":"two","format":2,"kind":"open","rollout_id":"r"}\n')


class TestOlderFormats:
    def test_a_format_2_log_is_appended_to_in_format_2(self, store: FileTokenStore) -> None:
        """A log begun in format 2 gets JSON entry lines and freezes as before."""
        (Path(store.root) / log_name("r")).write_bytes(FORMAT_2_HEADER)
        run(store.put(entry("a")))
        run(store.put(entry("a")))
        run(store.put(entry("b")))
        data = log_of(store)
        assert b'"kind":"packed"' not in data
        assert data.count(b'"kind":"entry"') == 2
        assert freeze_payloads(store) == [entry("a").to_json_bytes(), entry("b").to_json_bytes()]

    def test_a_packed_line_in_a_format_2_log_is_refused(self, store: FileTokenStore) -> None:
        """Lines of one log share its format; a packed entry in a format 2 log is not a record."""
        packed = check_entry(entry()).packed
        assert packed is not None
        line = packed_record("c", packed[0], base64.b64encode(packed[1])).encode(sealed=True)
        (Path(store.root) / log_name("r")).write_bytes(FORMAT_2_HEADER + line)
        with pytest.raises(CorruptStoreError, match=r"line 2 .*packed record in a format 2 log"):
            run(store.freeze("r"))

    @pytest.mark.parametrize("header", [FORMAT_2_HEADER, FORMAT_3_HEADER], ids=["2", "3"])
    def test_a_blob_in_an_older_log_is_refused(self, store: FileTokenStore, header: bytes) -> None:
        """A blob belongs only in a format 4 log; in an older one it is not a record."""
        packed = check_entry(entry()).packed
        assert packed is not None
        record = blob_record("c", *packed).encode(sealed=True)
        (Path(store.root) / log_name("r")).write_bytes(header + record)
        with pytest.raises(CorruptStoreError, match=r"line 2 .*blob record"):
            run(store.freeze("r"))


FORMAT_1_HEADER = b'{"epoch":"one","format":1,"kind":"open","rollout_id":"r"}\n'
LINEAGE = {
    "response_id": "resp-1",
    "parent_call_id": "c0",
    "cum_len": 7,
    "digest": "ab" * 32,
    "parent_resolution": "resolved",
    "prompt_is_delta": True,
    "fingerprint_version": 1,
}


class TestRecordsAsGymWritesThem:
    @pytest.mark.parametrize(
        "experts",
        ["moe-trace-7", {"layer": [[1, 2], [3]]}, 3, [[0, 1], [2, 3], None, [4], "x"]],
        ids=["string", "mapping", "number", "ragged"],
    )
    @pytest.mark.parametrize(
        "header",
        [b"", FORMAT_3_HEADER, FORMAT_2_HEADER, FORMAT_1_HEADER],
        ids=["4", "3", "2", "1"],
    )
    def test_any_routed_experts_and_lineage_read_back_in_every_format(
        self, store: FileTokenStore, experts: Any, header: bytes
    ) -> None:
        """Routed experts of any JSON value and lineage fields freeze back in each log format."""
        if header:
            (Path(store.root) / log_name("r")).write_bytes(header)
        written = entry(routed_experts=experts, **LINEAGE)
        run(store.put(written))
        run(store.put(written))
        assert freeze_payloads(store) == [written.to_json_bytes()]
        data = log_of(store)
        assert data.count(b'"kind":"blob"') == (1 if not header else 0)
        assert data.count(b'"kind":"packed"') == (1 if header == FORMAT_3_HEADER else 0)
