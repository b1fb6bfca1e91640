"""Records as NeMo Gym 0.7.0 writes them go through every reference store unchanged.

Gym's ``TokenEntry`` has 24 fields: tokcap's eleven, ``response_id`` and its lineage fields,
which tokcap keeps as extra fields, and a ``routed_experts`` of any value. Such an entry, its
fields in any order, freezes back with every value and every float bit. What Gym allows but
tokcap's record rules refuse (NaN log probs, negative or 32-bit token ids) is refused with an
error saying nothing was stored and the rollout must be masked.
"""

from __future__ import annotations

import asyncio
import math
import struct
import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokcap_spec.errors import InvalidEntryError
from tokcap_spec.records import MAX_TOKEN_ID, as_token_entry

Open = Callable[[], Any]

json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.text(max_size=8),
    st.floats(allow_nan=False),
)
json_values = st.recursive(
    json_leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)
token_ids = st.lists(st.integers(0, MAX_TOKEN_ID), max_size=6)
log_probs = st.floats(allow_nan=False, max_value=0.0) | st.sampled_from([-math.inf, -0.0])


def put_and_freeze(open_store: Open, record: Any) -> Any:
    """Put ``record`` through one instance, freeze its rollout through a fresh one."""

    async def main() -> Any:
        sink, source = open_store(), open_store()
        try:
            await sink.put(record)
            return await source.freeze(record.rollout_id)
        finally:
            await sink.close()
            await source.close()

    return asyncio.run(main())


@st.composite
def gym_fields(draw: st.DrawFn) -> dict[str, Any]:
    """The fields of a Gym 0.7.0 entry that Gym's and tokcap's rules both accept."""
    generation = draw(token_ids)
    items = draw(
        st.lists(st.dictionaries(st.text(max_size=4), json_values, max_size=2), max_size=2)
    )
    resolution = draw(st.sampled_from([None, "root", "resolved", "unresolved"]))
    resolved = resolution == "resolved"
    fields: dict[str, Any] = {
        "rollout_id": f"r-{uuid.uuid4().hex}",
        "model_call_id": draw(st.text(min_size=1, max_size=12)),
        "model": draw(st.text(max_size=8)),
        "prompt_token_ids": draw(token_ids),
        "generation_token_ids": generation,
        "generation_log_probs": draw(
            st.lists(log_probs, min_size=len(generation), max_size=len(generation))
        ),
        "routed_experts": draw(json_values),
        "output_items": items,
        "token_item_index": draw(st.sampled_from([None, *range(len(items))])),
        "response_id": draw(st.none() | st.text(max_size=8)),
        "created_at": draw(st.floats(allow_nan=False, allow_infinity=False)),
        "parent_call_id": draw(st.text(min_size=1, max_size=8)) if resolved else None,
        "cum_len": draw(st.none() | st.integers(0, 10**6)),
        "digest": draw(st.none() | st.text("0123456789abcdef", min_size=64, max_size=64)),
        "parent_resolution": resolution,
        "continuation_fingerprint": draw(st.text(max_size=8)),
        "continuation_context_len": draw(st.integers(0, 100)),
        "continuation_context_digest": draw(st.text(max_size=8)),
        "parent_resolution_reason": draw(st.text(max_size=8)),
        "fingerprint_version": draw(st.none() | st.integers(1, 3)),
        "prompt_is_delta": resolved and draw(st.booleans()),
        "prefix_requested": draw(st.booleans()),
        "prefix_supplied": draw(st.booleans()),
    }
    order = draw(st.permutations(sorted(fields)))
    return {name: fields[name] for name in order}


def float_bits(record: Any) -> list[bytes]:
    return [struct.pack(">d", value) for value in record.generation_log_probs]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(fields=gym_fields())
def test_every_gym_field_round_trips(
    gym: SimpleNamespace, open_store: Open, fields: dict[str, Any]
) -> None:
    """A Gym entry, fields in any order, freezes back equal, bit for bit, as a Gym entry."""
    original = gym.records.TokenEntry.model_validate(fields)
    assert len(original.model_dump()) == 24
    snapshot = put_and_freeze(open_store, original)
    (frozen,) = snapshot.entries
    assert frozen.to_json_bytes() == as_token_entry(original).to_json_bytes()
    again = gym.records.TokenEntry.model_validate(frozen.model_dump())
    assert again == original
    assert float_bits(again) == float_bits(original)
    assert again.parent_resolution == original.parent_resolution


@pytest.mark.parametrize(
    "experts",
    ["moe-trace-7", {"layer-0": [[1, 2]], "layer-1": None}, [[0, 1], "ragged", 3]],
    ids=["string", "mapping", "ragged"],
)
def test_routed_experts_of_any_value_are_kept(
    gym: SimpleNamespace, open_store: Open, experts: Any
) -> None:
    """A Gym entry whose routed_experts is a string or a mapping is stored and frozen back."""
    record = gym.records.TokenEntry(
        rollout_id=f"r-{uuid.uuid4().hex}",
        model_call_id="c",
        prompt_token_ids=[1, 2],
        generation_token_ids=[3],
        generation_log_probs=[-0.5],
        routed_experts=experts,
    )
    (frozen,) = put_and_freeze(open_store, record).entries
    assert frozen.routed_experts == experts


@pytest.mark.parametrize(
    ("change", "broken"),
    [
        ({"generation_log_probs": [math.nan]}, "generation_log_probs"),
        ({"prompt_token_ids": [-1]}, "prompt_token_ids.0"),
        ({"generation_token_ids": [2**31]}, "generation_token_ids.0"),
    ],
    ids=["nan", "negative-id", "id-beyond-31-bits"],
)
def test_what_gym_allows_but_the_record_refuses_is_refused_for_masking(
    gym: SimpleNamespace, open_store: Open, change: dict[str, Any], broken: str
) -> None:
    """A Gym entry breaking REC-4 is refused, nothing stored, with a message asking for a mask."""
    fields = {
        "rollout_id": f"r-{uuid.uuid4().hex}",
        "model_call_id": "call-7",
        "prompt_token_ids": [1],
        "generation_token_ids": [3],
        "generation_log_probs": [-0.5],
        **change,
    }
    record = gym.records.TokenEntry(**fields)
    with pytest.raises(InvalidEntryError) as caught:
        put_and_freeze(open_store, record)
    message = str(caught.value)
    assert f"rollout {record.rollout_id!r}" in message
    assert "model_call_id 'call-7' was refused and nothing was stored" in message
    assert broken in message
    assert "mark the rollout incomplete so that it is masked rather than trained on" in message

    async def frozen_entries() -> tuple[Any, ...]:
        source = open_store()
        try:
            return tuple((await source.freeze(record.rollout_id)).entries)
        finally:
            await source.close()

    assert asyncio.run(frozen_entries()) == ()
