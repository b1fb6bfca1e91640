"""Tests of tokcap_spec.staging: the staged records, their validation and their digests."""

from __future__ import annotations

import hashlib
import math
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from spec.staged_calls import (
    FLOAT32_MAX,
    FLOAT32_TINIEST,
    PARENT_CHAIN_HASH,
    VERSIONS,
    call_fields,
    digest_arguments,
)
from tokcap_spec.staging import (
    EMPTY_EXTRAS_DIGEST,
    EXTRAS_DIGEST_VERSION,
    STAGING_DIGEST_VERSION,
    STAGING_SCHEMA_VERSION,
    StagedCallBaseSnapshot,
    StagedCallRecord,
    StagedCallSnapshot,
    StageResult,
    StagingSink,
    StagingSource,
    chain_hash,
    cumulative_hash,
    encode_token_ids,
    extras_digest,
    staged_call_digest,
    staging_key,
)

RECORDS = (StagedCallBaseSnapshot, StagedCallRecord, StagedCallSnapshot)
WITH_EXTRAS = (StagedCallRecord, StagedCallSnapshot)
SETTINGS = settings(max_examples=100, deadline=None, derandomize=True, database=None)


def u64(value: int) -> bytes:
    return value.to_bytes(8, "big")


def digest_with_log_prob(value: float, mask: float = 1.0) -> str:
    """The digest of the standard call whose last token has this mask and log prob."""
    return str(call_fields(mask=(0.0, 1.0, mask), log_probs=(0.0, -0.5, value))["digest"])


def test_a_sealed_call_validates_as_every_record() -> None:
    """A root and a child, with and without extras, validate as each record that may hold them."""
    for parent in (None, "call-0"):
        plain = call_fields(parent_call_id=parent)
        for record in RECORDS:
            assert record.model_validate(plain).digest == plain["digest"]
        rich = call_fields(parent_call_id=parent, extras={"routed_experts": [[[1, 2]]]})
        for record in WITH_EXTRAS:
            assert record.model_validate(rich).extras == {"routed_experts": [[[1, 2]]]}


def test_defaults_are_the_versions_and_the_empty_extras() -> None:
    """Omitted versions are Gym's, and a record without extras digests ``None``."""
    record = StagedCallRecord.model_validate(call_fields())
    assert (record.schema_version, record.digest_version, record.extras_digest_version) == (
        STAGING_SCHEMA_VERSION,
        STAGING_DIGEST_VERSION,
        EXTRAS_DIGEST_VERSION,
    )
    assert (STAGING_SCHEMA_VERSION, STAGING_DIGEST_VERSION, EXTRAS_DIGEST_VERSION) == (2, 2, 1)
    assert record.extras is None
    assert record.extras_digest == EMPTY_EXTRAS_DIGEST == extras_digest(None)


@SETTINGS
@given(
    record=st.sampled_from([*RECORDS, StageResult]),
    name=st.text(min_size=1, max_size=12),
    value=st.none() | st.integers() | st.text(max_size=4),
)
def test_an_unknown_field_is_refused(record: type[BaseModel], name: str, value: Any) -> None:
    """Every staging record forbids fields it does not define, whatever their value."""
    if name in record.model_fields:
        return
    fields = call_fields() if record is not StageResult else {"ok": True, "staging_key": "r/c"}
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        record.model_validate({**fields, name: value})


def test_a_base_snapshot_has_no_extras_field() -> None:
    """The row a source fetches carries no extras: an ``extras`` field is unknown there."""
    with pytest.raises(ValidationError, match="extras"):
        StagedCallBaseSnapshot.model_validate(call_fields(extras={"a": 1}))


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=repr)
@pytest.mark.parametrize("column", ["token_mask_delta", "generation_log_probs_delta"])
def test_non_finite_floats_are_refused(column: str, value: float) -> None:
    """No mask value or log prob is NaN or infinite, not even ``-inf``."""
    fields = call_fields()
    fields[column] = [*fields[column][:-1], value]
    with pytest.raises(ValidationError, match="finite number"):
        StagedCallRecord.model_validate(fields)


@SETTINGS
@given(
    name=st.sampled_from(sorted(VERSIONS)),
    version=st.integers() | st.sampled_from(["2", "1", None, True, 2.5, 2.0]),
)
def test_a_version_other_than_gyms_is_refused(name: str, version: Any) -> None:
    """A record of another schema or digest version is refused, as is a digest asked of one.

    The record compares a version by value, as Gym's does (``True`` is read as version 1); the
    digest function takes the exact ``int`` only.
    """
    fields = call_fields()
    if version != VERSIONS[name]:
        with pytest.raises(ValidationError, match=name):
            StagedCallRecord.model_validate({**fields, name: version})
    else:
        read = getattr(StagedCallRecord.model_validate({**fields, name: version}), name)
        assert (type(read), read) == (int, VERSIONS[name])
    if type(version) is not int or version != VERSIONS[name]:
        with pytest.raises(ValueError, match=name):
            staged_call_digest(**{**digest_arguments(fields), name: version})


def test_negative_zero_is_kept_and_digests_apart_from_zero() -> None:
    """``-0.0`` is a mask value of zero and a prompt log prob, kept with its sign, and the
    digest tells it from ``0.0``: neither record validates with the other's digest."""
    zero = call_fields()
    for column, negative in (
        ("token_mask_delta", call_fields(mask=(-0.0, 1.0, 1.0))),
        ("generation_log_probs_delta", call_fields(log_probs=(-0.0, -0.5, -1.25))),
    ):
        record = StagedCallRecord.model_validate(negative)
        assert math.copysign(1.0, record.model_dump()[column][0]) == -1.0
        assert record.digest != zero["digest"]
        for fields, digest in ((negative, zero["digest"]), (zero, negative["digest"])):
            with pytest.raises(ValidationError, match="digest is not"):
                StagedCallRecord.model_validate({**fields, "digest": digest})


@SETTINGS
@given(
    value=st.floats(width=32, allow_nan=False, allow_infinity=False),
    steps=st.integers(-1000, 1000),
)
def test_floats_equal_in_float32_digest_alike(value: float, steps: int) -> None:
    """A log prob a few float64 steps from a float32 digests as that float32, while the record
    keeps the float64 it was given; the next float32 digests apart."""
    # From a zero, step away from it on its own side, so that it rounds back to that zero.
    towards = math.copysign(math.inf, value if value == 0.0 else steps)
    nearby = value
    for _ in range(abs(steps)):
        nearby = math.nextafter(nearby, towards)
    assert struct.pack(">f", nearby) == struct.pack(">f", value)
    sealed = call_fields(log_probs=(0.0, -0.5, value))
    record = StagedCallRecord.model_validate(
        {**sealed, "generation_log_probs_delta": [0.0, -0.5, nearby]}
    )
    assert record.generation_log_probs_delta[2] == nearby
    following = struct.unpack(
        ">f", (struct.unpack(">I", struct.pack(">f", value))[0] + 1).to_bytes(4, "big")
    )[0]
    if math.isfinite(following):
        assert digest_with_log_prob(following) != sealed["digest"]


@SETTINGS
@given(mantissa=st.integers(1, 2**23 - 1), negative=st.booleans())
def test_float32_subnormals_survive(mantissa: int, negative: bool) -> None:
    """A subnormal float32 log prob is kept bit for bit and digests apart from zero."""
    value = struct.unpack(">f", (negative << 31 | mantissa).to_bytes(4, "big"))[0]
    fields = call_fields(log_probs=(0.0, -0.5, value))
    record = StagedCallRecord.model_validate(fields)
    assert struct.pack(">d", record.generation_log_probs_delta[2]) == struct.pack(">d", value)
    assert fields["digest"] not in {digest_with_log_prob(0.0), digest_with_log_prob(-0.0)}


def test_a_float64_subnormal_is_kept_but_digests_as_a_float32_zero() -> None:
    """Below float32's smallest subnormal a log prob rounds to zero, keeping its sign."""
    for value, zero in ((5e-324, 0.0), (-5e-324, -0.0), (FLOAT32_TINIEST / 2, 0.0)):
        record = StagedCallRecord.model_validate(call_fields(log_probs=(0.0, -0.5, value)))
        assert record.generation_log_probs_delta[2] == value
        assert record.digest == digest_with_log_prob(zero)
    assert digest_with_log_prob(FLOAT32_TINIEST) != digest_with_log_prob(0.0)


def test_the_float32_range_is_where_it_rounds() -> None:
    """The largest float32 and what rounds to it are taken; what rounds beyond is refused."""
    midpoint = 2.0**128 * (1 - 2.0**-25)
    for value in (FLOAT32_MAX, -FLOAT32_MAX, 3.4028235e38, math.nextafter(midpoint, 0.0)):
        record = StagedCallRecord.model_validate(call_fields(log_probs=(0.0, -0.5, value)))
        assert record.digest == digest_with_log_prob(math.copysign(FLOAT32_MAX, value))
    for value in (midpoint, -midpoint, 1e39, 1e308):
        with pytest.raises(ValueError, match="float32 range"):
            call_fields(log_probs=(0.0, -0.5, value))


def test_token_ids_are_unsigned_64_bit() -> None:
    """Ids from 0 to 2**64 - 1 are taken; a negative id, 2**64, a bool or a float is not."""
    record = StagedCallRecord.model_validate(call_fields(token_ids=(0, 2**31, 2**64 - 1)))
    assert record.token_ids_delta == [0, 2**31, 2**64 - 1]
    fields = call_fields()
    for bad in (-1, 2**64, True, 7.0):
        with pytest.raises(ValidationError):
            StagedCallRecord.model_validate({**fields, "token_ids_delta": [7, 8, bad]})
        with pytest.raises(ValueError, match="token id 2"):
            encode_token_ids([7, 8, bad])  # type: ignore[list-item]


BROKEN_SHAPES = {
    "root-with-prev-len": ({"parent_call_id": None, "mode": "text"}, "root"),
    "child-without-prev-len": ({"prev_len": 0, "cum_len": 3}, "continues it"),
    "root-in-token-in-mode": ({"parent_call_id": None, "prev_len": 0, "cum_len": 3}, "root"),
    "child-in-text-mode": ({"mode": "text"}, "continues it"),
    "unknown-mode": ({"mode": "chat"}, "mode"),
    "empty-rollout-id": ({"rollout_id": ""}, "at least 1 character"),
    "empty-parent": ({"parent_call_id": ""}, "at least 1 character"),
    "empty-delta": (
        {
            "delta_len": 0,
            "cum_len": 4,
            "token_ids_delta": [],
            "token_mask_delta": [],
            "generation_log_probs_delta": [],
        },
        "at least one token",
    ),
    "delta-len-off": ({"delta_len": 4, "cum_len": 8}, "delta_len"),
    "cum-len-off": ({"cum_len": 8}, "cum_len"),
    "columns-of-unequal-length": ({"token_mask_delta": [0.0, 1.0]}, "length"),
    "mask-neither-zero-nor-one": ({"token_mask_delta": [0.0, 0.5, 1.0]}, "mask"),
    "sampled-prompt-token": ({"generation_log_probs_delta": [-0.1, -0.5, -1.0]}, "mask is 0.0"),
    "negative-length": ({"weight_version": -1}, "greater than or equal to 0"),
    "length-beyond-u64": ({"weight_version": 2**64}, "unsigned 64-bit"),
    "string-for-int": ({"weight_version": "3"}, "valid integer"),
    "upper-case-digest": ({"chain_hash": PARENT_CHAIN_HASH.upper()}, "pattern"),
    "short-digest": ({"cumulative_hash": "ab" * 31}, "pattern"),
    "surrogate-in-an-id": ({"model_call_id": "\ud800"}, "unicode"),
    "digest-mismatch": ({"weight_version": 4}, "digest is not"),
}


@pytest.mark.parametrize(("change", "says"), BROKEN_SHAPES.values(), ids=BROKEN_SHAPES)
def test_a_broken_call_is_refused_saying_why(change: dict[str, Any], says: str) -> None:
    """Each rule of the record refuses a call that breaks it alone, naming the rule."""
    with pytest.raises(ValidationError, match=says):
        StagedCallRecord.model_validate({**call_fields(), **change})


@pytest.mark.parametrize(
    ("extras", "says"),
    [
        ({"experts": (1, 2)}, "tuple"),
        ({"experts": [math.nan]}, "finite"),
        ({"experts": 2**63}, "signed 64-bit"),
        ({"experts": {1: "a"}}, "keys must be strings"),
    ],
    ids=["tuple", "nan", "int-beyond-i64", "int-key"],
)
def test_extras_without_a_digest_are_refused_as_invalid(extras: dict[str, Any], says: str) -> None:
    """Extras the digest cannot encode make the record invalid: a ValidationError, never a
    bare TypeError."""
    fields = call_fields(extras={"experts": None})
    with pytest.raises(ValidationError, match=says):
        StagedCallRecord.model_validate({**fields, "extras": extras})


def test_extras_that_do_not_match_their_digest_are_refused() -> None:
    """A record's extras must be the ones its ``extras_digest`` commits to; the fetched row,
    which has none, does not check."""
    fields = call_fields(extras={"experts": [1]})
    with pytest.raises(ValidationError, match="extras_digest is not"):
        StagedCallRecord.model_validate({**fields, "extras": {"experts": [2]}})
    row = {key: value for key, value in fields.items() if key != "extras"}
    assert StagedCallBaseSnapshot.model_validate(row).extras_digest == fields["extras_digest"]


def test_records_are_frozen() -> None:
    """A validated record cannot be changed behind its digest's back."""
    record = StagedCallRecord.model_validate(call_fields())
    with pytest.raises(ValidationError, match="frozen"):
        record.weight_version = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "valid"),
    [
        ({"ok": True, "staging_key": "r/c"}, True),
        ({"ok": False, "error": "disk full"}, True),
        ({"ok": True}, False),
        ({"ok": True, "staging_key": ""}, False),
        ({"ok": False}, False),
        ({"ok": False, "error": ""}, False),
        ({"ok": True, "staging_key": "r/c", "schema_version": 1}, False),
    ],
)
def test_a_stage_result_names_its_key_or_its_error(fields: dict[str, Any], valid: bool) -> None:
    """A success names where it staged, a failure says why; nothing else validates."""
    if valid:
        assert StageResult.model_validate(fields).ok is fields["ok"]
    else:
        with pytest.raises(ValidationError):
            StageResult.model_validate(fields)


def test_the_staging_key_joins_the_ids_with_a_slash() -> None:
    """The default key is ``rollout/call``; ids holding ``/`` can meet on one key."""
    record = StagedCallRecord.model_validate(call_fields(rollout_id="r/1", model_call_id="ç"))
    assert record.staging_key == "r/1/ç" == staging_key("r/1", "ç")
    assert staging_key("a/b", "c") == staging_key("a", "b/c")
    for ids in (("", "c"), ("r", "")):
        with pytest.raises(ValueError, match="empty"):
            staging_key(*ids)


class Sink:
    def stage(self, record: StagedCallRecord, *, attachments: Any = None) -> StageResult:
        return StageResult(ok=True, staging_key=record.staging_key)


class Source:
    def fetch(self, staging_keys: list[str]) -> list[StagedCallBaseSnapshot]:
        return []


def test_sinks_and_sources_are_structural() -> None:
    """Any object with ``stage`` is a sink, any with ``fetch`` a source; no base class."""
    assert isinstance(Sink(), StagingSink)
    assert not isinstance(Sink(), StagingSource)
    assert isinstance(Source(), StagingSource)
    assert not isinstance(Source(), StagingSink)
    record = StagedCallRecord.model_validate(call_fields())
    assert Sink().stage(record).staging_key == "rollout-1/call-1"


def test_token_hashes_follow_the_layout() -> None:
    """The cumulative and chain hashes are SHA-256 of a domain and length-delimited u64s."""
    ids = [0, 5, 2**64 - 1]
    column = u64(3) + b"".join(u64(i) for i in ids)
    assert encode_token_ids(ids) == column
    assert encode_token_ids([]) == u64(0)
    prefix = hashlib.sha256(b"nemo-gym-staging-prefix-v2" + column).hexdigest()
    assert cumulative_hash(ids) == prefix
    root = hashlib.sha256(b"nemo-gym-staging-chain-v1" + b"\x00" + column).hexdigest()
    assert chain_hash(None, ids) == root
    child = b"nemo-gym-staging-chain-v1" + b"\x01" + bytes.fromhex(root) + u64(0)
    assert chain_hash(root, []) == hashlib.sha256(child).hexdigest()
    for bad in (root.upper(), root[:-1], "g" * 64):
        with pytest.raises(ValueError, match="parent_chain_hash"):
            chain_hash(bad, ids)


def test_the_call_digest_follows_the_layout() -> None:
    """The call digest is SHA-256 of its domain and every field, in order, length-delimited."""
    fields = call_fields(token_ids=(9,), mask=(1.0,), log_probs=(-0.5,), rollout_id="r/ü")

    def text(value: str) -> bytes:
        return u64(len(value.encode())) + value.encode()

    def column(values: bytes, count: int) -> bytes:
        return u64(8 + len(values)) + u64(count) + values

    layout = b"".join([
        b"nemo-gym-staging-call-v2", bytes([2, 2, 1]),
        text("r/ü"), text("call-1"), b"\x01" + text("call-0"), text("token_in"),
        u64(4), u64(1), u64(5), u64(3),
        column(u64(9), 1), column(struct.pack(">f", 1.0), 1), column(struct.pack(">f", -0.5), 1),
        bytes.fromhex(fields["extras_digest"]),
        b"\x01" + bytes.fromhex(fields["chain_hash"]),
        b"\x01" + bytes.fromhex(fields["cumulative_hash"]),
    ])  # fmt: skip
    assert fields["digest"] == hashlib.sha256(layout).hexdigest()


def test_the_extras_digest_follows_the_layout() -> None:
    """Extras are tagged values, mapping entries in the order of their keys' UTF-8 bytes."""
    extras = {"é": None, "b": [True, -0.0], "a": {"x": -(2**63), "y": "z"}}
    encoded = b"".join([
        b"nemo-gym-staging-extras-v1", b"\x01",
        b"D", u64(3),
        u64(1), b"a", b"D", u64(2),
        u64(1), b"x", b"I", struct.pack(">q", -(2**63)),
        u64(1), b"y", b"S", u64(1), b"z",
        u64(1), b"b", b"L", u64(2), b"B\x01", b"F", struct.pack(">d", -0.0),
        u64(2), "é".encode(), b"N",
    ])  # fmt: skip
    assert extras_digest(extras) == hashlib.sha256(encoded).hexdigest()
    none = b"nemo-gym-staging-extras-v1\x01N"
    assert hashlib.sha256(none).hexdigest() == EMPTY_EXTRAS_DIGEST


extras_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=4),
)
extras_values = st.recursive(
    extras_leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)


@SETTINGS
@given(extras=st.dictionaries(st.text(max_size=4), extras_values, max_size=4), data=st.data())
def test_extras_digest_alike_in_any_key_order(extras: dict[str, Any], data: st.DataObject) -> None:
    """The order of a mapping's keys does not change its digest."""
    order = data.draw(st.permutations(list(extras)))
    assert extras_digest({key: extras[key] for key in order}) == extras_digest(extras)


def test_extras_tell_types_and_the_sign_of_zero_apart() -> None:
    """``1``, ``1.0`` and ``True`` digest apart, as do ``0.0`` and ``-0.0`` (float64 there)."""
    digests = {extras_digest({"v": value}) for value in (1, 1.0, True, 0.0, -0.0, "1", [1])}
    assert len(digests) == 7
    with pytest.raises(TypeError, match="mapping or None"):
        extras_digest([("v", 1)])  # type: ignore[arg-type]


def test_the_digest_function_refuses_what_the_record_would_coerce() -> None:
    """The record reads an ``int`` mask as a ``float``; the digest function, given the
    ``int``, refuses it rather than guess."""
    fields = call_fields(mask=(0.0, 1.0, 1.0))
    record = StagedCallRecord.model_validate({**fields, "token_mask_delta": [0, 1, 1]})
    assert record.token_mask_delta == [0.0, 1.0, 1.0]
    assert record.digest == fields["digest"]
    with pytest.raises(ValueError, match="mask 0 must be a finite float"):
        staged_call_digest(**{**digest_arguments(fields), "token_mask_delta": [0, 1, 1]})
