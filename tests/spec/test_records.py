"""Tests of tokcap_spec.records: the TokenEntry record (REC-1 to REC-4)."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tokcap_spec.errors import InvalidEntryError
from tokcap_spec.records import (
    MAX_TOKEN_ID,
    TOKEN_ENTRY_RECORD_SCHEMA_VERSION,
    TOKEN_FIELDS,
    TokenEntry,
    refusing_invalid,
)


def entry(**fields: Any) -> TokenEntry:
    fields.setdefault("rollout_id", "r1")
    fields.setdefault("model_call_id", "c1")
    return TokenEntry(**fields)


def float_bits(values: list[float]) -> list[bytes]:
    return [struct.pack(">d", value) for value in values]


token_ids = st.integers(min_value=0, max_value=MAX_TOKEN_ID)
log_probs = st.floats(allow_nan=False)
json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(), st.floats(allow_nan=False)
)
json_values = st.recursive(
    json_leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(), children, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def entries(draw: st.DrawFn) -> TokenEntry:
    generation = draw(st.lists(token_ids, max_size=5))
    items = draw(st.lists(st.dictionaries(st.text(), json_values, max_size=2), max_size=3))
    extra = draw(
        st.dictionaries(st.text(min_size=1).map(lambda k: "x_" + k), json_values, max_size=3)
    )
    return TokenEntry(
        rollout_id=draw(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)),
        model_call_id=draw(st.text(min_size=1)),
        model=draw(st.text()),
        prompt_token_ids=draw(st.lists(token_ids, max_size=5)),
        generation_token_ids=generation,
        generation_log_probs=draw(
            st.lists(log_probs, min_size=len(generation), max_size=len(generation))
        ),
        routed_experts=draw(st.one_of(st.none(), st.lists(json_values, max_size=3))),
        output_items=items,
        token_item_index=draw(
            st.one_of(st.none(), st.integers(0, len(items) - 1)) if items else st.none()
        ),
        created_at=draw(st.floats(allow_nan=False, allow_infinity=False)),
        **extra,
    )


class TestFields:
    def test_record_carries_every_field(self) -> None:
        """A record exposes every REC-1 field with its documented default (REC-1)."""
        record = entry()
        assert record.schema_version == TOKEN_ENTRY_RECORD_SCHEMA_VERSION == 1
        assert (record.model, record.prompt_token_ids, record.generation_token_ids) == ("", [], [])
        assert (record.generation_log_probs, record.routed_experts) == ([], None)
        assert (record.output_items, record.token_item_index) == ([], None)
        assert isinstance(record.created_at, float)

    def test_token_fields_name_real_fields(self) -> None:
        """Every name in TOKEN_FIELDS is a field of the record (REC-1)."""
        assert set(TOKEN_FIELDS) <= set(TokenEntry.model_fields)

    def test_extra_fields_are_kept(self) -> None:
        """Unknown fields survive construction and the canonical round trip (REC-1)."""
        record = entry(trace={"id": "ü"}, turn=3)
        again = TokenEntry.from_json_bytes(record.to_json_bytes())
        assert again.model_extra == {"trace": {"id": "ü"}, "turn": 3}

    def test_fields_cannot_be_reassigned(self) -> None:
        """A record is frozen: assigning a field raises."""
        record = entry()
        with pytest.raises(ValidationError, match="frozen"):
            record.model = "other"  # type: ignore[misc]

    @pytest.mark.parametrize("field", ["rollout_id", "model_call_id"])
    def test_keys_must_not_be_empty(self, field: str) -> None:
        """An empty rollout_id or model_call_id is refused."""
        with pytest.raises(ValidationError, match=field):
            entry(**{field: ""})


class TestSchemaVersion:
    def test_newer_schema_is_refused_naming_both_versions(self) -> None:
        """A newer schema_version is refused with a message naming it and ours (REC-2)."""
        newer = TOKEN_ENTRY_RECORD_SCHEMA_VERSION + 1
        with pytest.raises(ValidationError) as caught:
            entry(schema_version=newer)
        message = str(caught.value)
        assert f"schema_version {newer} is newer" in message
        assert f"schema_version {TOKEN_ENTRY_RECORD_SCHEMA_VERSION};" in message

    def test_newer_schema_is_refused_when_read(self) -> None:
        """Reading serialized bytes of a newer schema is refused too (REC-2)."""
        data = json.dumps({"schema_version": 7, "rollout_id": "r", "model_call_id": "c"})
        with pytest.raises(ValidationError, match="newer"):
            TokenEntry.from_json_bytes(data)

    def test_older_record_is_read_with_defaults(self) -> None:
        """A record lacking later fields reads with their defaults (REC-2)."""
        data = b'{"rollout_id":"r","model_call_id":"c","prompt_token_ids":[5]}'
        record = TokenEntry.from_json_bytes(data)
        assert record.schema_version == 1
        assert (record.routed_experts, record.output_items, record.token_item_index) == (
            None,
            [],
            None,
        )

    def test_schema_below_one_is_refused(self) -> None:
        """A schema_version below 1 names no real schema and is refused."""
        with pytest.raises(ValidationError, match="at least 1, got 0"):
            entry(schema_version=0)


class TestConsistency:
    def test_unequal_generation_lengths_are_refused(self) -> None:
        """Generation ids and log probs of different lengths are refused, naming both (REC-3)."""
        with pytest.raises(ValidationError, match="equal length, got 2 and 1"):
            entry(generation_token_ids=[1, 2], generation_log_probs=[-0.1])

    @pytest.mark.parametrize("index", [-1, 2, 5])
    def test_token_item_index_outside_output_items_is_refused(self, index: int) -> None:
        """A token_item_index that does not index output_items is refused (REC-3)."""
        with pytest.raises(ValidationError, match=f"token_item_index {index} does not index"):
            entry(output_items=[{}, {}], token_item_index=index)

    def test_token_item_index_without_items_is_refused(self) -> None:
        """Index 0 is refused when there are no output items (REC-3)."""
        with pytest.raises(ValidationError, match="length 0"):
            entry(token_item_index=0)

    def test_token_item_index_inside_output_items_is_kept(self) -> None:
        """A token_item_index pointing at an output item is accepted (REC-3)."""
        assert entry(output_items=[{}, {"type": "message"}], token_item_index=1).token_item_index


class TestValues:
    def test_nan_log_prob_is_refused(self) -> None:
        """A NaN log prob is refused at construction (REC-4)."""
        with pytest.raises(ValidationError, match="NaN"):
            entry(generation_token_ids=[1], generation_log_probs=[math.nan])

    def test_nan_log_prob_is_refused_when_read(self) -> None:
        """A NaN log prob in serialized bytes is refused when read (REC-4)."""
        data = b'{"rollout_id":"r","model_call_id":"c","generation_token_ids":[1],'
        with pytest.raises(ValidationError, match="NaN"):
            TokenEntry.from_json_bytes(data + b'"generation_log_probs":[NaN]}')

    @pytest.mark.parametrize("value", ["-0.5", True])
    def test_non_float_log_prob_is_refused(self, value: object) -> None:
        """A string or bool is not silently turned into a log prob (REC-4)."""
        with pytest.raises(ValidationError, match="generation_log_probs"):
            entry(generation_token_ids=[1], generation_log_probs=[value])

    def test_integer_log_prob_reads_as_float(self) -> None:
        """An integral JSON number is a float log prob (REC-4)."""
        record = entry(generation_token_ids=[1], generation_log_probs=[0])
        assert type(record.generation_log_probs[0]) is float

    @pytest.mark.parametrize("token", [0, MAX_TOKEN_ID])
    def test_token_id_bounds_are_accepted(self, token: int) -> None:
        """Token ids 0 and 2**31 - 1 are accepted (REC-4)."""
        assert MAX_TOKEN_ID == 2**31 - 1
        record = entry(
            prompt_token_ids=[token], generation_token_ids=[token], generation_log_probs=[0.0]
        )
        assert (record.prompt_token_ids, record.generation_token_ids) == ([token], [token])

    @pytest.mark.parametrize("token", [-1, 2**31, True, 1.0, "1"])
    @pytest.mark.parametrize("field", ["prompt_token_ids", "generation_token_ids"])
    def test_token_ids_outside_31_bits_are_refused(self, token: object, field: str) -> None:
        """A token id that is not an int in [0, 2**31) is refused (REC-4)."""
        extra = {"generation_log_probs": [0.0]} if field == "generation_token_ids" else {}
        with pytest.raises(ValidationError, match=field):
            entry(**{field: [token]}, **extra)


class TestCanonicalBytes:
    def test_minus_inf_and_minus_zero_survive_bit_for_bit(self) -> None:
        """-inf and -0.0 come back from the canonical bytes with the same bits (REC-4)."""
        values = [-math.inf, -0.0, 0.0, -1e-320]
        record = entry(generation_token_ids=[1, 2, 3, 4], generation_log_probs=values)
        again = TokenEntry.from_json_bytes(record.to_json_bytes())
        assert float_bits(again.generation_log_probs) == float_bits(values)

    def test_bytes_are_sorted_compact_ascii(self) -> None:
        """The canonical form sorts keys, has no spaces and escapes non-ASCII text."""
        data = entry(model="modèle", created_at=0.0).to_json_bytes()
        assert b" " not in data
        assert b"mod\\u00e8le" in data
        assert data.isascii()
        keys = list(json.loads(data))
        assert keys == sorted(keys)

    def test_lone_surrogates_in_items_round_trip(self) -> None:
        """Text pydantic cannot check (inside output_items) still round-trips exactly."""
        record = entry(output_items=[{"text": "half \udfff pair"}], token_item_index=0)
        assert TokenEntry.from_json_bytes(record.to_json_bytes()) == record

    @settings(max_examples=80, deadline=None)
    @given(entries())
    def test_round_trip_is_exact(self, record: TokenEntry) -> None:
        """Parsing the canonical bytes gives a record with the same canonical bytes (REC-1, -4)."""
        data = record.to_json_bytes()
        again = TokenEntry.from_json_bytes(data)
        assert again.to_json_bytes() == data
        assert float_bits(again.generation_log_probs) == float_bits(record.generation_log_probs)

    def test_same_payload_compares_bytes(self) -> None:
        """same_payload is true for equal bytes and false when only -0.0 and 0.0 differ."""
        base = {"generation_token_ids": [1], "created_at": 1.0}
        negative = entry(**base, generation_log_probs=[-0.0])
        assert negative.same_payload(entry(**base, generation_log_probs=[-0.0]))
        assert not negative.same_payload(entry(**base, generation_log_probs=[0.0]))


class OddInt(int):
    """An int subclass: JSON writes it as its value, and reads it back as a plain int."""


class OddFloat(float):
    """A float subclass, as numpy's float64 is."""


odd_scalars = st.one_of(
    json_leaves,
    st.integers().map(OddInt),
    st.floats().map(OddFloat),
    st.floats(),
    st.integers(min_value=-(2**70), max_value=2**70),
)
odd_values = st.recursive(
    odd_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=3), children, max_size=3),
    ),
    max_leaves=8,
)
odd_lists = st.one_of(
    st.lists(odd_scalars, max_size=4), st.lists(odd_scalars, max_size=4).map(tuple)
)


@st.composite
def unvalidated_entries(draw: st.DrawFn) -> TokenEntry:
    """Entries built with model_construct: any field may hold anything, valid or not."""
    fields: dict[str, Any] = {"rollout_id": "r", "model_call_id": "c"}
    for name, values in {
        "schema_version": odd_scalars,
        "model": odd_scalars,
        "prompt_token_ids": odd_lists,
        "generation_token_ids": odd_lists,
        "generation_log_probs": odd_lists,
        "routed_experts": st.one_of(st.none(), odd_lists),
        "output_items": st.lists(st.dictionaries(st.text(max_size=3), odd_values, max_size=2)),
        "token_item_index": odd_scalars,
        "created_at": odd_scalars,
        "x_extra": odd_values,
    }.items():
        if draw(st.booleans()):
            fields[name] = draw(values)
    return TokenEntry.model_construct(**fields)


class TestCheckedBytes:
    def test_a_valid_entry_gives_its_canonical_bytes(self) -> None:
        """For a validated entry the checked bytes are exactly the canonical bytes."""
        record = entry(generation_token_ids=[7], generation_log_probs=[-math.inf])
        assert record.checked_json_bytes() == record.to_json_bytes()

    @pytest.mark.parametrize(
        ("fields", "field"),
        [
            ({"generation_token_ids": [1], "generation_log_probs": [math.nan]}, "log_prob"),
            ({"generation_token_ids": [1, 2], "generation_log_probs": [-1.0]}, "equal length"),
            ({"prompt_token_ids": [2**31]}, "prompt_token_ids"),
            ({"schema_version": 2}, "schema_version 2"),
            ({"token_item_index": 0}, "token_item_index"),
            ({"output_items": [{1: "a"}]}, "output_items"),
        ],
        ids=["nan", "lengths", "token-id", "newer-schema", "index", "int-key"],
    )
    def test_an_entry_that_skipped_validation_is_refused(
        self, fields: dict[str, Any], field: str
    ) -> None:
        """A model_construct entry that breaks REC-2, -3 or -4 raises, naming what broke."""
        bad = TokenEntry.model_construct(rollout_id="r", model_call_id="c", **fields)
        with pytest.raises(ValidationError, match=field):
            bad.checked_json_bytes()

    def test_a_list_changed_after_validation_is_refused(self) -> None:
        """Fields are frozen but lists are not; a log prob appended later is caught."""
        record = entry(generation_token_ids=[1], generation_log_probs=[-1.0])
        record.generation_log_probs.append(-2.0)
        with pytest.raises(ValidationError, match="equal length"):
            record.checked_json_bytes()

    @settings(max_examples=300, deadline=None)
    @given(unvalidated_entries())
    def test_whatever_it_accepts_reads_back(self, record: TokenEntry) -> None:
        """Checked bytes always parse back, to what validating the entry's fields gives.

        Validation may coerce a value it accepts (``1.0`` for an int field reads back as ``1``),
        the same way from the fields as from the bytes.
        """
        try:
            data = record.checked_json_bytes()
        except (ValueError, TypeError):
            return
        assert data == record.to_json_bytes()
        validated = TokenEntry.model_validate(record.model_dump(mode="python", warnings=False))
        assert TokenEntry.from_json_bytes(data).to_json_bytes() == validated.to_json_bytes()


class TestRoutedExperts:
    @pytest.mark.parametrize(
        "experts", ["trace-ref", {"layer": [[1, 2]]}, 7, [[1], "x", None]], ids=str
    )
    def test_any_json_value_round_trips(self, experts: Any) -> None:
        """routed_experts takes any JSON value, as NeMo Gym's record does, and keeps it (REC-1)."""
        record = entry(routed_experts=experts)
        assert TokenEntry.from_json_bytes(record.checked_json_bytes()).routed_experts == experts

    def test_a_value_json_cannot_hold_is_refused(self) -> None:
        """A routed_experts JSON cannot hold (a set) is refused before any store acks it."""
        with pytest.raises(TypeError, match="set"):
            entry(routed_experts={1, 2}).checked_json_bytes()


class TestRefusingInvalid:
    def test_a_broken_record_is_refused_for_masking_without_its_values(self) -> None:
        """The refusal names rollout, call and field, asks for a mask and shows no value."""
        record = {"rollout_id": "r-9", "model_call_id": "c-3", "prompt_token_ids": [2**31 + 12345]}
        with pytest.raises(InvalidEntryError) as caught, refusing_invalid(record):
            TokenEntry.model_validate(record)
        message = str(caught.value)
        assert message.startswith("rollout 'r-9': the entry of model_call_id 'c-3' was refused")
        assert "prompt_token_ids.0" in message
        assert "masked rather than trained on" in message
        assert str(2**31 + 12345) not in message
        assert isinstance(caught.value, ValueError)
        assert isinstance(caught.value.__cause__, ValidationError)

    def test_other_errors_pass_through(self) -> None:
        """Only record-rule failures are turned into InvalidEntryError."""
        with pytest.raises(KeyError), refusing_invalid({}):
            raise KeyError("x")
