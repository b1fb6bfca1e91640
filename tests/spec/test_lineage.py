"""The lineage decision: root, resolved to the one proven parent, or unresolved; never a guess."""

from __future__ import annotations

from typing import Any

import pytest

from tokcap_spec.fingerprint import FINGERPRINT_VERSION, continuation_stamp, token_digest
from tokcap_spec.lineage import (
    LineageMatch,
    LineageResolution,
    ParentResolutionStatus,
    cumulative_tokens,
    resolve_from,
)
from tokcap_spec.records import TokenEntry

ROOT, RESOLVED, UNRESOLVED = (
    ParentResolutionStatus.ROOT,
    ParentResolutionStatus.RESOLVED,
    ParentResolutionStatus.UNRESOLVED,
)
QUESTION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}]
ANSWER = [{"role": "assistant", "content": "It is sunny."}]
FOLLOW_UP = [*QUESTION, *ANSWER, {"role": "user", "content": "And tomorrow?"}]


def stamped(call: str, *, prompt: list[int], generation: list[int], **stamp: Any) -> TokenEntry:
    """An entry of rollout ``r`` for a call that answered QUESTION with ANSWER."""
    fields = {**continuation_stamp(QUESTION, ANSWER), "output_items": ANSWER, **stamp}
    return TokenEntry(
        rollout_id="r",
        model_call_id=call,
        prompt_token_ids=prompt,
        generation_token_ids=generation,
        generation_log_probs=[-0.5] * len(generation),
        **fields,
    )


PARENT = stamped("call-1", prompt=[101, 102, 103], generation=[201, 202])


def test_a_request_with_no_model_authored_item_is_a_root() -> None:
    assert resolve_from([PARENT], QUESTION) == LineageResolution(ROOT)
    assert resolve_from([], []).status is ROOT


def test_a_faithful_continuation_resolves_to_its_parent_with_its_tokens() -> None:
    resolution = resolve_from([PARENT], FOLLOW_UP)
    tokens = (101, 102, 103, 201, 202)
    assert resolution == LineageResolution(
        RESOLVED, match=LineageMatch("call-1", tokens, token_digest(tokens), prev_len=5)
    )


@pytest.mark.parametrize(
    ("entries", "request_items", "reason"),
    [
        pytest.param([], FOLLOW_UP, "no_match", id="nothing-committed"),
        pytest.param(
            [PARENT],
            [{"role": "system", "content": "Be long."}, *FOLLOW_UP[1:]],
            "no_match",
            id="context-rewritten",
        ),
        pytest.param(
            [PARENT],
            [*QUESTION, {"role": "assistant", "content": "It rains."}],
            "no_match",
            id="other-answer",
        ),
        pytest.param(
            [PARENT, stamped("call-2", prompt=[101, 102, 103], generation=[201, 203])],
            FOLLOW_UP,
            "ambiguous",
            id="two-parents-other-tokens",
        ),
        pytest.param(
            [stamped("call-1", prompt=[1], generation=[2], fingerprint_version=1)],
            FOLLOW_UP,
            "no_match",
            id="other-fingerprint-version",
        ),
        pytest.param(
            [stamped("call-1", prompt=[1], generation=[2], prompt_is_delta=True)],
            FOLLOW_UP,
            "no_match",
            id="delta-prompt",
        ),
        pytest.param(
            [stamped("call-1", prompt=[1], generation=[2], continuation_context_digest="")],
            FOLLOW_UP,
            "no_match",
            id="no-context-digest",
        ),
        pytest.param(
            [PARENT, stamped("call-1", prompt=[9], generation=[9])],
            FOLLOW_UP,
            "no_match",
            id="one-call-two-payloads",
        ),
    ],
)
def test_an_unproven_parent_is_unresolved(
    entries: list[TokenEntry], request_items: list[dict[str, Any]], reason: str
) -> None:
    assert resolve_from(entries, request_items) == LineageResolution(UNRESOLVED, reason=reason)


def test_parents_with_the_very_same_tokens_resolve_to_the_lowest_call_id() -> None:
    twin = stamped("call-0", prompt=[101, 102, 103], generation=[201, 202])
    resolution = resolve_from([PARENT, twin], FOLLOW_UP)
    assert resolution.match is not None
    assert resolution.match.model_call_id == "call-0"


def test_request_items_the_fingerprint_cannot_read_are_unresolved() -> None:
    resolution = resolve_from([PARENT], [{"role": "assistant", "content": 3}])
    assert resolution.status is UNRESOLVED
    assert resolution.reason.startswith("unreadable_request")


def test_a_resolution_keeps_its_invariants() -> None:
    with pytest.raises(ValueError, match="needs the match"):
        LineageResolution(RESOLVED)
    with pytest.raises(ValueError, match="carries no match"):
        LineageResolution(ROOT, match=LineageMatch("c", (), ""))
    assert LineageResolution("unresolved").status is UNRESOLVED  # type: ignore[arg-type]
    assert ROOT == "root"
    assert str(RESOLVED) == "resolved"


def test_the_stamp_is_of_version_two() -> None:
    assert PARENT.model_extra is not None
    assert PARENT.model_extra["fingerprint_version"] == FINGERPRINT_VERSION == 2


def delta_child(parent: TokenEntry, call: str, suffix: list[int], generation: list[int]) -> Any:
    """A call stored as NeMo Gym stores it with delta_records: its prompt beyond the parent's."""
    full = [*parent.prompt_token_ids, *parent.generation_token_ids, *suffix, *generation]
    return stamped(
        call,
        prompt=suffix,
        generation=generation,
        prompt_is_delta=True,
        parent_call_id=parent.model_call_id,
        digest=token_digest(full),
    )


def test_a_delta_chain_resolves_to_the_whole_sequence() -> None:
    second_answer = [{"role": "assistant", "content": "Rain."}]
    child = delta_child(PARENT, "call-2", [7, 8], [9]).model_copy(
        update=continuation_stamp(FOLLOW_UP, second_answer)
    )
    assert cumulative_tokens([PARENT, child])["call-2"] == (101, 102, 103, 201, 202, 7, 8, 9)
    later = [*FOLLOW_UP, *second_answer, {"role": "user", "content": "Thanks."}]
    resolution = resolve_from([PARENT, child], later)
    assert resolution.match is not None
    assert resolution.match.model_call_id == "call-2"
    assert resolution.match.cumulative_token_ids == (101, 102, 103, 201, 202, 7, 8, 9)
    assert resolve_from([child], later).reason == "no_match"  # its parent is missing


def test_a_sequence_that_disagrees_with_its_digest_is_left_out() -> None:
    child = delta_child(PARENT, "call-2", [7, 8], [9])
    tampered = child.model_copy(update={"digest": token_digest([1, 2, 3])})
    assert "call-2" not in cumulative_tokens([PARENT, tampered])
    looped = stamped(
        "call-9", prompt=[1], generation=[2], prompt_is_delta=True, parent_call_id="call-9"
    )
    assert cumulative_tokens([looped]) == {}
