"""tokcap's request fingerprints are NeMo Gym 0.7.0's, value for value.

``tokcap_spec.fingerprint`` is written from the layout Gym documents; here it is held to the
released functions on requests of every dialect (chat, Responses, Anthropic), with text, JSON
content, tool arguments as objects, as JSON strings and as strings that are not JSON. Both agree
on every value, and both refuse the same requests.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tokcap_spec import fingerprint as ours


@pytest.fixture(scope="module")
def gym_fingerprint(gym_root: Path) -> ModuleType:
    return importlib.import_module("nemo_gym.token_id_capture.fingerprint")


@pytest.fixture(scope="module")
def gym_records(gym_root: Path) -> ModuleType:
    return importlib.import_module("nemo_gym.token_id_capture.records")


@pytest.fixture(scope="module")
def gym_lineage(gym_root: Path) -> ModuleType:
    return importlib.import_module("nemo_gym.token_id_capture.lineage")


texts = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["", "\x00\b\f\n\r\t\x1f\x7f", "\u2028", "é🙂", '"\\']
)
numbers = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.integers(2**64, 2**66) | st.integers(-(2**66), -(2**63) - 1),
    st.floats(),
    st.sampled_from([1e-5, 1.5e-5, -1e-5, 1e-6, 1e16, 1e-7, 123456.0, -0.0, 5e-324]),
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
arguments = st.one_of(
    st.none(),
    json_values,
    json_values.map(lambda value: __import__("json").dumps(value)),
    st.sampled_from(["not json ", "  {broken", "NaN", "1e999", "[1, 2]"]),
)
blocks = st.one_of(
    texts,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["", "text", "input_text", "output_text"]), "text": texts}
    ),
    st.fixed_dictionaries({"type": st.sampled_from(["image_url", "refusal"]), "data": json_values}),
    st.fixed_dictionaries(
        {"type": st.just("tool_use"), "id": texts, "name": texts, "input": arguments}
    ),
    st.fixed_dictionaries(
        {"type": st.just("tool_result"), "tool_use_id": texts, "content": json_values}
    ),
)
contents = st.none() | texts | st.lists(blocks, max_size=3)
tool_calls = st.lists(
    st.fixed_dictionaries(
        {"id": texts, "type": st.just("function")},
        optional={"function": st.fixed_dictionaries({"name": texts, "arguments": arguments})},
    ),
    max_size=2,
)
chat = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool", "developer"])},
    optional={"content": contents, "tool_calls": tool_calls, "tool_call_id": texts},
)
responses = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("message"), "role": st.sampled_from(["user", "assistant"])},
        optional={"content": contents},
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call"), "call_id": texts, "name": texts},
        optional={"arguments": arguments, "namespace": texts, "id": texts},
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output"), "call_id": texts, "output": json_values}
    ),
    st.fixed_dictionaries({"type": st.just("reasoning"), "summary": json_values}),
)
items = st.lists(chat | responses, max_size=5)


def _outcome(function: Callable[[Any], str], value: Any) -> str:
    try:
        return function(value)
    except (ValueError, TypeError):
        return "refused"


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(items)
@example([{"role": "assistant", "content": "It is sunny."}])
@example([{"role": "user", "content": "hi"}])
@example([{"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"b":1,"a":1e-5}'}])
def test_both_fingerprints_are_gyms(gym_fingerprint: ModuleType, request_items: Any) -> None:
    assert _outcome(ours.assistant_fingerprint, request_items) == _outcome(
        gym_fingerprint.assistant_fingerprint, request_items
    )
    assert _outcome(ours.context_digest, request_items) == _outcome(
        gym_fingerprint.conversation_digest, request_items
    )


@SETTINGS
@given(json_values)
def test_canonical_json_is_gyms(gym_fingerprint: ModuleType, value: Any) -> None:
    # The private encoder is the one layout fact Gym does not document by value.
    assert _outcome(ours.canonical_json, value) == _outcome(gym_fingerprint._canonical_json, value)


@SETTINGS
@given(arguments)
def test_tool_arguments_compare_as_gyms(gym_fingerprint: ModuleType, value: Any) -> None:
    assert _outcome(ours.canonical_tool_arguments, value) == _outcome(
        gym_fingerprint.canonicalize_tool_arguments, value
    )


@SETTINGS
@given(st.lists(st.integers(0, 2**64 - 1), max_size=20))
def test_token_digest_is_gyms(gym_records: ModuleType, token_ids: list[int]) -> None:
    assert ours.token_digest(token_ids) == gym_records.compute_digest(token_ids)


def test_a_negative_or_too_large_token_id_is_refused() -> None:
    for bad in ([1, -1], [2**64]):
        with pytest.raises(ValueError, match="token ids"):
            ours.token_digest(bad)


@SETTINGS
@given(items, st.lists(chat | responses, max_size=2))
def test_a_stamp_is_the_one_gym_writes(
    gym_records: ModuleType, gym_lineage: ModuleType, request_items: Any, output: Any
) -> None:
    entry = gym_records.TokenEntry(
        rollout_id="r",
        model_call_id="c",
        prompt_token_ids=[1],
        generation_token_ids=[2],
        generation_log_probs=[-0.5],
        output_items=output,
    )
    try:
        gym_lineage.stamp_continuation(entry, request_items)
    except (ValueError, TypeError):
        with pytest.raises((ValueError, TypeError)):
            ours.continuation_stamp(request_items, output)
        return
    stamp = ours.continuation_stamp(request_items, output)
    assert stamp == {name: getattr(entry, name) for name in stamp}
    assert stamp["fingerprint_version"] == gym_lineage.FINGERPRINT_VERSION
