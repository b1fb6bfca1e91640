"""tokcap's staging encoder is NeMo Gym 0.7.0's, digest for digest and refusal for refusal.

``tokcap_spec.staging`` is written from the layout Gym documents; here it is held to the
released wheel. It reproduces every golden vector the wheel publishes. On generated staged
calls (roots and children, ids with ``/`` and any Unicode, token ids up to 2**64 - 1, ``-0.0``,
subnormals, the float32 range's edges, floats that round alike in float32, extras of every
supported type) tokcap's records accept exactly the calls Gym's accept and read them to the same
values, and tokcap's digest functions return Gym's digests, or refuse with Gym's exception,
call for call. Each generated call is valid, or broken in one way a sink could meet.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import math
import struct
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType, SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from spec.staged_calls import FLOAT32_MAX, FLOAT32_TINIEST, VERSIONS, digest_arguments, seal

from interop.gym_release import DATA, PACKAGE
from tokcap_spec import staging as ours

RECORDS = ("StagedCallBaseSnapshot", "StagedCallRecord", "StagedCallSnapshot", "StageResult")
FLOAT32_MIDPOINT = 2.0**128 * (1 - 2.0**-25)
"""Halfway between the largest float32 and 2**128: it and all beyond round to infinity."""

SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def gym(gym_root: Path) -> SimpleNamespace:
    """The released staging modules: ``records``, ``digest`` and ``protocols``."""
    return SimpleNamespace(
        **{
            name: importlib.import_module(f"nemo_gym.token_id_capture.staging.{name}")
            for name in ("records", "digest", "protocols")
        }
    )


@pytest.fixture(scope="module")
def golden(gym_root: Path) -> dict[str, Any]:
    """The golden vectors as the wheel ships them."""
    (vectors,) = (name for name in DATA if name.endswith("golden_vectors.json"))
    loaded: dict[str, Any] = json.loads((gym_root / PACKAGE / vectors).read_text("utf-8"))
    return loaded


def test_every_golden_vector_is_reproduced(gym: SimpleNamespace, golden: dict[str, Any]) -> None:
    """The extras and staged-call digests are the published ones, and the published call with
    its extras is a valid record; the vectors hold nothing else this test would miss."""
    assert sorted(golden) == ["extras", "extras_digest", "staged_call", "staged_call_digest"]
    assert ours.extras_digest(golden["extras"]) == golden["extras_digest"]
    assert ours.staged_call_digest(**golden["staged_call"]) == golden["staged_call_digest"]
    assert (
        gym.digest.compute_staging_digest(**golden["staged_call"]) == golden["staged_call_digest"]
    )
    record = {**golden["staged_call"], "digest": golden["staged_call_digest"]}
    validated = ours.StagedCallRecord.model_validate({**record, "extras": golden["extras"]})
    assert validated.extras == golden["extras"]


@pytest.mark.parametrize("name", RECORDS)
def test_the_records_have_gyms_fields(gym: SimpleNamespace, name: str) -> None:
    """Each record has Gym's fields in Gym's order, each of Gym's type, default and constraints,
    and Gym's model configuration but for being frozen."""
    mine, theirs = getattr(ours, name), getattr(gym.records, name)
    assert list(mine.model_fields) == list(theirs.model_fields)
    for field, info in theirs.model_fields.items():
        assert repr(mine.model_fields[field]) == repr(info), field
    assert {**mine.model_config, "frozen": False} == {**theirs.model_config, "frozen": False}


def test_the_versions_and_the_empty_extras_digest_are_gyms(gym: SimpleNamespace) -> None:
    assert ours.STAGING_SCHEMA_VERSION == gym.digest.STAGING_SCHEMA_VERSION
    assert ours.STAGING_DIGEST_VERSION == gym.digest.STAGING_DIGEST_VERSION
    assert ours.EXTRAS_DIGEST_VERSION == gym.digest.EXTRAS_DIGEST_VERSION
    assert ours.EMPTY_EXTRAS_DIGEST == gym.digest.EMPTY_EXTRAS_DIGEST


@pytest.mark.parametrize(
    ("protocol", "method"), [("StagingSink", "stage"), ("StagingSource", "fetch")]
)
def test_the_protocols_are_gyms(gym: SimpleNamespace, protocol: str, method: str) -> None:
    """Same method, same parameters, kinds, defaults and annotations; a class that has the
    method satisfies both, a class without it neither."""
    mine, theirs = getattr(ours, protocol), getattr(gym.protocols, protocol)
    assert inspect.signature(getattr(mine, method)) == inspect.signature(getattr(theirs, method))
    implementation = type("Implementation", (), {method: lambda self, *args, **kwargs: None})
    assert isinstance(implementation(), mine)
    assert isinstance(implementation(), theirs)
    assert not isinstance(object(), mine)
    assert not isinstance(object(), theirs)


# --- generated staged calls -----------------------------------------------------------------

identifiers = st.text(st.characters(codec="utf-8"), min_size=1, max_size=8) | st.sampled_from(
    ["r/1", "a/b/c", "/", "//", "ロールアウト/🙂", "call\u2028", "x" * 300]
)
token_ids = st.integers(0, 2**64 - 1) | st.sampled_from(
    [0, 1, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1]
)
counts = st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, 2**32, 2**63, 2**64 - 1])
EDGE_FLOATS = [
    0.0, -0.0, 5e-324, -5e-324, FLOAT32_TINIEST, -FLOAT32_TINIEST, FLOAT32_TINIEST / 2,
    1e-40, -1e-40, FLOAT32_MAX, -FLOAT32_MAX, 3.4028235e38, math.nextafter(FLOAT32_MIDPOINT, 0),
    1.0 + 2**-30, -0.5 - 2**-40, 1e-300, -1.25,
]  # fmt: skip
log_probs = st.one_of(
    st.floats(width=32, allow_nan=False, allow_infinity=False),
    st.floats(-FLOAT32_MAX, FLOAT32_MAX),
    st.sampled_from(EDGE_FLOATS),
)
hex_digests = st.binary(min_size=32, max_size=32).map(bytes.hex)
extras_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1) | st.sampled_from([-(2**63), 2**63 - 1, 0]),
    st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([-0.0, 5e-324, 1e308]),
    st.text(st.characters(codec="utf-8"), max_size=5),
)
extras_keys = st.text(st.characters(codec="utf-8"), max_size=5) | st.sampled_from(["a/b", "é", ""])
extras_values = st.recursive(
    extras_leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(extras_keys, inner, max_size=3),
    max_leaves=10,
)
extras_mappings = st.dictionaries(extras_keys, extras_values, max_size=4)
UNSUPPORTED_EXTRAS = [
    (1, 2), {1, 2}, b"raw", math.nan, -math.inf, 2**63, -(2**63) - 1, {3: "int key"},
    MappingProxyType({"a": 1}), bytearray(b"x"), [[1, (2,)]], {"deep": {"k": [math.inf]}},
]  # fmt: skip


@st.composite
def valid_calls(draw: st.DrawFn) -> dict[str, Any]:
    """The fields of a staged call both implementations should accept, digest included."""
    parent = draw(st.none() | identifiers)
    size = draw(st.integers(1, 6))
    mask = draw(st.lists(st.sampled_from([0.0, 1.0, -0.0]), min_size=size, max_size=size))
    longest = 2**64 - 1 - size
    prev_len = (
        0 if parent is None else draw(st.integers(1, longest) | st.sampled_from([1, longest]))
    )
    fields: dict[str, Any] = {
        "rollout_id": draw(identifiers),
        "model_call_id": draw(identifiers),
        "parent_call_id": parent,
        "mode": "text" if parent is None else "token_in",
        "prev_len": prev_len,
        "delta_len": size,
        "cum_len": prev_len + size,
        "weight_version": draw(counts),
        "token_ids_delta": draw(st.lists(token_ids, min_size=size, max_size=size)),
        "token_mask_delta": mask,
        "generation_log_probs_delta": [
            draw(log_probs) if m else draw(st.sampled_from([0.0, -0.0])) for m in mask
        ],
    }
    delta = fields["token_ids_delta"]
    parent_hash = None if parent is None else draw(hex_digests)
    fields["chain_hash"] = draw(st.just(ours.chain_hash(parent_hash, delta)) | hex_digests)
    fields["cumulative_hash"] = draw(st.just(ours.cumulative_hash(delta)) | hex_digests)
    record = draw(st.sampled_from(RECORDS[:3]))
    extras = draw(st.none() | extras_mappings)
    if record != "StagedCallBaseSnapshot" and extras is not None:
        fields["extras"] = extras
    if extras is not None or draw(st.booleans()):
        fields["extras_digest"] = ours.extras_digest(extras)
    if draw(st.booleans()):
        fields.update(VERSIONS)
    return {"record": record, **seal(fields)}


Change = Callable[[st.DrawFn, dict[str, Any]], None]


def _position(draw: st.DrawFn, fields: dict[str, Any]) -> int:
    return draw(st.integers(0, len(fields["token_ids_delta"]) - 1))


def _carry_position(draw: st.DrawFn, fields: dict[str, Any]) -> int:
    """A position whose mask is zero, made so when there is none."""
    index = _position(draw, fields)
    fields["token_mask_delta"][index] = 0.0
    fields["generation_log_probs_delta"][index] = 0.0
    return index


def _set_token(
    draw: st.DrawFn, fields: dict[str, Any], column: str, values: list[Any], at: int | None = None
) -> None:
    """Put one of ``values`` at position ``at`` of ``column``, or at a drawn one."""
    index = _position(draw, fields) if at is None else at
    fields[column][index] = draw(st.sampled_from(values))


def _first_sampled(fields: dict[str, Any]) -> int:
    mask = fields["token_mask_delta"]
    return mask.index(1.0) if 1.0 in mask else 0


def _as_root(fields: dict[str, Any], prev_len: int, mode: str = "text") -> None:
    size = fields["delta_len"]
    fields.update(parent_call_id=None, mode=mode, prev_len=prev_len, cum_len=prev_len + size)


BREAKS: dict[str, Change] = {
    "empty-id": lambda d, f: f.update({d(st.sampled_from(["rollout_id", "model_call_id"])): ""}),
    "surrogate-in-id": lambda d, f: f.update(model_call_id=f["model_call_id"] + "\udc80"),
    "empty-parent": lambda d, f: f.update(
        parent_call_id="", mode="token_in", prev_len=1, cum_len=1 + f["delta_len"]
    ),
    "root-with-prev-len": lambda d, f: _as_root(f, d(st.integers(1, 2**32))),
    "root-in-token-in-mode": lambda d, f: _as_root(f, 0, "token_in"),
    "child-in-text-mode": lambda d, f: f.update(
        parent_call_id="p", mode="text", prev_len=2, cum_len=2 + f["delta_len"]
    ),
    "child-without-prev-len": lambda d, f: f.update(
        parent_call_id="p", mode="token_in", prev_len=0, cum_len=f["delta_len"]
    ),
    "unknown-mode": lambda d, f: f.update(mode=d(st.sampled_from(["chat", "TEXT", "", None]))),
    "empty-delta": lambda d, f: f.update(
        delta_len=0,
        cum_len=f["prev_len"],
        token_ids_delta=[],
        token_mask_delta=[],
        generation_log_probs_delta=[],
    ),
    "delta-len-off": lambda d, f: f.update(delta_len=f["delta_len"] + 1, cum_len=f["cum_len"] + 1),
    "cum-len-off": lambda d, f: f.update(cum_len=f["cum_len"] + d(st.sampled_from([1, 2**40]))),
    "ragged-columns": lambda d, f: f[
        d(st.sampled_from(["token_mask_delta", "generation_log_probs_delta", "token_ids_delta"]))
    ].pop(),
    "mask-neither-zero-nor-one": lambda d, f: _set_token(
        d, f, "token_mask_delta", [0.5, 2.0, -1.0, 1e-300, 0.9999999999]
    ),
    "sampled-prompt-token": lambda d, f: _set_token(
        d, f, "generation_log_probs_delta", [-0.1, 5e-324, -1e-45, 3.0], _carry_position(d, f)
    ),
    "token-id-out-of-range": lambda d, f: _set_token(
        d, f, "token_ids_delta", [-1, 2**64, 2**70, -(2**63)]
    ),
    "token-id-not-int": lambda d, f: _set_token(d, f, "token_ids_delta", [True, 7.0, "7", None]),
    "count-out-of-range": lambda d, f: f.update(
        {d(st.sampled_from(["weight_version", "prev_len"])): d(st.sampled_from([-1, 2**64]))}
    ),
    "count-not-int": lambda d, f: f.update(
        {d(st.sampled_from(["weight_version", "delta_len"])): d(st.sampled_from(["3", 3.0]))}
    ),
    "log-prob-beyond-float32": lambda d, f: _set_token(
        d,
        f,
        "generation_log_probs_delta",
        [FLOAT32_MIDPOINT, -FLOAT32_MIDPOINT, 1e39, -1e300],
        _first_sampled(f),
    ),
    "non-finite-float": lambda d, f: _set_token(
        d,
        f,
        d(st.sampled_from(["token_mask_delta", "generation_log_probs_delta"])),
        [math.nan, math.inf, -math.inf],
    ),
    "malformed-hash": lambda d, f: f.update(
        {
            d(st.sampled_from(["chain_hash", "cumulative_hash", "extras_digest"])): d(
                st.sampled_from(["A" * 64, "ab" * 31, "g" * 64, "0" * 65, "", 7])
            )
        }
    ),
    "unsupported-extras": lambda d, f: f.update(
        extras={"v": d(st.sampled_from(UNSUPPORTED_EXTRAS))}
    ),
}
"""Changes made before the digest is computed: each breaks one rule of the record."""

FORGERIES: dict[str, Change] = {
    "digest-mismatch": lambda d, f: f.update(digest=_flip(f["digest"], d)),
    "extras-mismatch": lambda d, f: f.update(extras={**f.get("extras", {}), "\x00added": 1}),
    "unknown-field": lambda d, f: f.update({d(identifiers.filter(lambda n: n not in f)): 0}),
    "other-version": lambda d, f: _other_version(d, f),
}
"""Changes made after the digest is computed, so that it no longer fits."""

VARIANTS: dict[str, Change] = {
    "as-is": lambda d, f: None,
    "ints-for-whole-floats": lambda d, f: _whole_floats_as_ints(f),
    "float32-twins": lambda d, f: _float32_twins(f),
    "versions-by-value": lambda d, f: f.update(
        schema_version=2.0,
        digest_version=2.0,
        extras_digest_version=d(st.sampled_from([True, 1.0])),
    ),
}
"""Changes made after the digest is computed that both records read back to the same call."""


def _flip(digest: str, draw: st.DrawFn) -> str:
    index = draw(st.integers(0, 63))
    return digest[:index] + "0123456789abcdef"[int(digest[index], 16) ^ 1] + digest[index + 1 :]


def _whole_floats_as_ints(fields: dict[str, Any]) -> None:
    # Only a positive zero or a one: -0.0 as int 0 would lose its sign, and so its digest.
    for column in ("token_mask_delta", "generation_log_probs_delta"):
        fields[column] = [
            int(value) if value in (0.0, 1.0) and math.copysign(1.0, value) > 0 else value
            for value in fields[column]
        ]


def _float32_twins(fields: dict[str, Any]) -> None:
    """Move each sampled log prob to the next float64 up where that rounds to the same float32."""
    twins = fields["generation_log_probs_delta"]
    for index, (mask, value) in enumerate(zip(fields["token_mask_delta"], twins, strict=True)):
        twin = math.nextafter(value, math.inf)
        if mask and twin < FLOAT32_MIDPOINT and struct.pack(">f", twin) == struct.pack(">f", value):
            twins[index] = twin


def _other_version(draw: st.DrawFn, fields: dict[str, Any]) -> None:
    name = draw(st.sampled_from(sorted(VERSIONS)))
    versions = st.integers(-3, 2**8) | st.sampled_from(["2", None, 2.5, False])
    fields[name] = draw(versions.filter(lambda version: version != VERSIONS[name]))


@st.composite
def staged_calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A generated call, named by what was done to it: a variant of a valid call, a break of
    one of its rules, or a forgery of a sealed one."""
    fields = draw(valid_calls())
    kind = draw(st.sampled_from(["variant", "break", "forgery"]))
    table = {"variant": VARIANTS, "break": BREAKS, "forgery": FORGERIES}[kind]
    name = draw(st.sampled_from(sorted(table)))
    table[name](draw, fields)
    if kind == "break":
        # Where no digest fits, the one from before the break stays.
        with contextlib.suppress(ValueError, TypeError):
            fields = seal(fields)
    return f"{kind}:{name}", fields


Outcome = tuple[str, Any]


def _digest_outcome(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Outcome:
    try:
        return ("value", function(*args, **kwargs))
    except (ValueError, TypeError) as exc:
        return ("refused", type(exc).__name__)


def _record_outcome(record: type[BaseModel], fields: dict[str, Any], *, mine: bool) -> Outcome:
    # Gym's record lets the extras digest's TypeError escape; tokcap's refuses as invalid.
    refusals: tuple[type[Exception], ...] = (ValidationError,) if mine else (ValueError, TypeError)
    try:
        return ("accepted", repr(record.model_validate(fields).model_dump()))
    except refusals:
        return ("refused", None)


CROSS_CHECKED = settings(SETTINGS, max_examples=2000)


@CROSS_CHECKED
@given(call=staged_calls())
def test_records_and_digests_agree_with_gyms(
    gym: SimpleNamespace, call: tuple[str, dict[str, Any]]
) -> None:
    """Both records accept a call or both refuse it, and read an accepted one to the same
    values; every digest of its parts is Gym's, or refused as Gym refuses it."""
    what, given_fields = call
    fields = dict(given_fields)
    record = fields.pop("record")
    mine = _record_outcome(getattr(ours, record), fields, mine=True)
    assert mine == _record_outcome(getattr(gym.records, record), fields, mine=False)
    assert mine[0] == ("accepted" if what.startswith("variant") else "refused"), what
    event(what)

    arguments = digest_arguments(fields)
    digest = _digest_outcome(ours.staged_call_digest, **arguments)
    assert digest == _digest_outcome(gym.digest.compute_staging_digest, **arguments)
    event(f"staged call digest: {digest[0]}")
    if "extras" in fields:
        assert _digest_outcome(ours.extras_digest, fields["extras"]) == _digest_outcome(
            gym.digest.compute_extras_digest, fields["extras"]
        )
    delta = fields["token_ids_delta"]
    for parent in (None, fields["chain_hash"]):
        assert _digest_outcome(ours.chain_hash, parent, delta) == _digest_outcome(
            gym.digest.compute_chain_hash, parent, delta
        )
    assert _digest_outcome(ours.cumulative_hash, delta) == _digest_outcome(
        gym.digest.hash_token_ids, delta
    )
    assert _digest_outcome(ours.encode_token_ids, delta) == _digest_outcome(
        gym.digest.encode_token_ids, delta
    )


stage_results = st.fixed_dictionaries(
    {},
    optional={
        "ok": st.sampled_from([True, False, 1, 0, "true", "no", None, 2, 1.0]),
        "staging_key": st.none() | identifiers | st.sampled_from(["", 5]),
        "error": st.none() | st.sampled_from(["", "disk full", 5, b"x"]),
        "schema_version": st.sampled_from([2, 1, 2.0, "2", True]),
        "retry": st.just(1),
    },
)


@settings(SETTINGS, max_examples=300)
@given(fields=stage_results)
def test_stage_results_agree_with_gyms(gym: SimpleNamespace, fields: dict[str, Any]) -> None:
    """Both accept the same stage results, read to the same values, and refuse the same."""
    assert _record_outcome(ours.StageResult, fields, mine=True) == _record_outcome(
        gym.records.StageResult, fields, mine=False
    )
