"""Tests of reference.consumer: finalize, build the training row, retire after handoff."""

from __future__ import annotations

import asyncio
import math
import random
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.consumer import (
    BrokenChainError,
    Consumed,
    FinalizedRollout,
    TrainingRow,
    build_training_row,
    consume,
    finalize,
    finalize_snapshot,
    retire_after_handoff,
    should_rebuild,
)
from reference.memory_store import MemoryTokenStore
from tokcap_spec.config import MaskFractionGuard, TokenIdCaptureConfig, TokenIdCaptureSettings
from tokcap_spec.errors import MaskFractionExceededError, RolloutRetiredError
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def call(
    call_id: str,
    prompt: list[int],
    generation: list[int],
    log_probs: list[float] | None = None,
    rollout: str = "r1",
) -> TokenEntry:
    return TokenEntry(
        rollout_id=rollout,
        model_call_id=call_id,
        prompt_token_ids=prompt,
        generation_token_ids=generation,
        generation_log_probs=log_probs if log_probs is not None else [-0.25] * len(generation),
        created_at=0.0,
    )


def two_turns() -> list[TokenEntry]:
    """A clean two-call chain: [1, 2] -> [3, 4], tool token 5, then [6]."""
    return [
        call("first", [1, 2], [3, 4], [-0.5, -math.inf]),
        call("second", [1, 2, 3, 4, 5], [6], [-0.0]),
    ]


class Recorder:
    """A source wrapping a memory store that logs freeze and drop, and a handoff that logs."""

    def __init__(self) -> None:
        self.store = MemoryTokenStore(namespace=uuid.uuid4().hex)
        self.log: list[str] = []
        self.handed_off: list[FinalizedRollout] = []

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        self.log.append("freeze")
        return await self.store.freeze(rollout_id)

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        self.log.append("drop")
        return await self.store.drop(rollout_id, snapshot_id=snapshot_id, version=version)

    async def close(self) -> None:
        self.log.append("close")

    async def handoff(self, finalized: FinalizedRollout) -> None:
        self.log.append("handoff")
        self.handed_off.append(finalized)

    async def put_all(self, entries: list[TokenEntry]) -> None:
        for entry in entries:
            await self.store.put(entry)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


# A chain is generated turn by turn, so the expected row is known independently of the
# consumer's ordering: (call id, tool tokens added before it, generation, log probs).
@dataclass(frozen=True)
class Turn:
    tools: list[int]
    generation: list[int]
    log_probs: list[float]


tokens = st.integers(min_value=0, max_value=50)
log_probs = st.one_of(
    st.floats(max_value=0.0, allow_nan=False, allow_infinity=False),
    st.just(-math.inf),
    st.just(-0.0),
)


@st.composite
def turns(draw: st.DrawFn) -> Turn:
    generation = draw(st.lists(tokens, min_size=1, max_size=4))
    return Turn(
        tools=draw(st.lists(tokens, max_size=3)),
        generation=generation,
        log_probs=draw(st.lists(log_probs, min_size=len(generation), max_size=len(generation))),
    )


def chain_from(root: list[int], steps: list[Turn]) -> list[TokenEntry]:
    entries = []
    context = list(root)
    for index, turn in enumerate(steps):
        prompt = context + turn.tools if index else context
        entries.append(call(f"call-{index}", prompt, turn.generation, turn.log_probs))
        context = prompt + turn.generation
    return entries


chains = st.builds(
    chain_from, st.lists(tokens, min_size=1, max_size=4), st.lists(turns(), min_size=1, max_size=5)
)


def bits(values: tuple[float, ...]) -> list[str]:
    return [repr(value) for value in values]


class TestBuildTrainingRow:
    def test_two_turns_build_the_documented_row(self) -> None:
        """A two-call chain yields the whole sequence, a generation mask and aligned log probs."""
        row = build_training_row(two_turns())
        assert row.token_ids == (1, 2, 3, 4, 5, 6)
        assert row.loss_mask == (0, 0, 1, 1, 0, 1)
        assert bits(row.log_probs) == bits((0.0, 0.0, -0.5, -math.inf, 0.0, -0.0))
        assert row.model_call_ids == ("first", "second")

    @settings(max_examples=60, deadline=None)
    @given(chains, st.randoms(use_true_random=False))
    def test_any_valid_chain_builds_in_any_order(
        self, entries: list[TokenEntry], rnd: random.Random
    ) -> None:
        """A valid chain builds the same row whatever order its entries come in (FREEZE-3)."""
        shuffled = list(entries)
        rnd.shuffle(shuffled)
        row = build_training_row(shuffled)
        last = entries[-1]
        assert row.token_ids == (*last.prompt_token_ids, *last.generation_token_ids)
        assert row.model_call_ids == tuple(entry.model_call_id for entry in entries)
        expected_mask = [0] * len(row.token_ids)
        expected_log_probs = [0.0] * len(row.token_ids)
        for entry in entries:
            start = len(entry.prompt_token_ids)
            for offset, value in enumerate(entry.generation_log_probs):
                expected_mask[start + offset] = 1
                expected_log_probs[start + offset] = value
        assert row.loss_mask == tuple(expected_mask)
        assert bits(row.log_probs) == bits(tuple(expected_log_probs))

    @settings(max_examples=60, deadline=None)
    @given(chains, st.data())
    def test_a_fork_is_refused(self, entries: list[TokenEntry], data: st.DataObject) -> None:
        """A second call on the same prompt with another generation is a fork."""
        twin = data.draw(st.sampled_from(entries))
        generation = data.draw(st.lists(tokens, min_size=1, max_size=4))
        sibling = call("sibling", twin.prompt_token_ids, generation)
        with pytest.raises(BrokenChainError, match="one prefix chain"):
            build_training_row([*entries, sibling])

    @settings(max_examples=60, deadline=None)
    @given(chains.filter(lambda entries: len(entries) >= 2), st.data())
    def test_a_gap_is_refused(self, entries: list[TokenEntry], data: st.DataObject) -> None:
        """A call whose prompt changed a token of the earlier context breaks the chain."""
        index = data.draw(st.integers(min_value=1, max_value=len(entries) - 1))
        inherited = len(entries[index - 1].prompt_token_ids) + len(
            entries[index - 1].generation_token_ids
        )
        hole = data.draw(st.integers(min_value=0, max_value=inherited - 1))
        damaged = entries[index]
        prompt = list(damaged.prompt_token_ids)
        prompt[hole] += 100
        entries[index] = call(damaged.model_call_id, prompt, damaged.generation_token_ids)
        with pytest.raises(BrokenChainError, match="one prefix chain"):
            build_training_row(entries)

    @settings(max_examples=60, deadline=None)
    @given(chains, turns())
    def test_two_roots_are_refused(self, entries: list[TokenEntry], other: Turn) -> None:
        """A call that shares no leading token with the chain is a second root."""
        first = entries[0].prompt_token_ids[0]
        stranger = call("stranger", [first + 1, *other.tools], other.generation)
        with pytest.raises(BrokenChainError, match="one prefix chain"):
            build_training_row([stranger, *entries])

    def test_reasons_name_the_kind_of_break(self) -> None:
        """The error says fork, gap or two roots and names both calls."""
        fork = [call("a", [1], [2]), call("b", [1], [3])]
        gap = [call("a", [1, 2], [3]), call("b", [1, 9, 3], [4])]
        roots = [call("a", [1], [2]), call("b", [7, 8], [4])]
        for entries, kind in ((fork, "fork"), (gap, "gap"), (roots, "two roots")):
            with pytest.raises(BrokenChainError, match=kind) as caught:
                build_training_row(entries)
            assert "'a'" in str(caught.value)
            assert "'b'" in str(caught.value)

    def test_no_entries_are_refused(self) -> None:
        """Building from no entries raises, saying none were given."""
        with pytest.raises(BrokenChainError, match="got none"):
            build_training_row([])


class TestFinalizeSnapshot:
    def test_clean_snapshot_keeps_its_ids(self) -> None:
        """A clean chain yields a row and keeps the snapshot's id and version."""
        snapshot = TokenCaptureSnapshot("r1", tuple(two_turns()), False, "snap", 7)
        finalized = finalize_snapshot(snapshot)
        assert (finalized.rollout_id, finalized.snapshot_id, finalized.version) == ("r1", "snap", 7)
        assert not finalized.masked
        assert finalized.mask_reason is None

    def test_incomplete_snapshot_is_masked(self) -> None:
        """An incomplete snapshot is masked with a reason and carries no row."""
        snapshot = TokenCaptureSnapshot("r1", tuple(two_turns()), True, "snap", 3)
        finalized = finalize_snapshot(snapshot)
        assert finalized.masked
        assert finalized.row is None
        assert "incomplete" in (finalized.mask_reason or "")
        assert (finalized.snapshot_id, finalized.version) == ("snap", 3)

    def test_empty_snapshot_is_masked(self) -> None:
        """An empty clean snapshot is masked as empty."""
        finalized = finalize_snapshot(TokenCaptureSnapshot("r1", (), False, "snap", 0))
        assert finalized.masked
        assert "empty" in (finalized.mask_reason or "")

    def test_broken_chain_is_masked(self) -> None:
        """A snapshot whose calls fork is masked with the chain reason."""
        entries = (call("a", [1], [2]), call("b", [1], [3]))
        finalized = finalize_snapshot(TokenCaptureSnapshot("r1", entries, False, "snap", 2))
        assert finalized.masked
        assert "fork" in (finalized.mask_reason or "")


class TestFinalizedRollout:
    def test_row_and_reason_are_exclusive(self) -> None:
        """A finalized rollout refuses both a row and a reason, and refuses neither."""
        row = TrainingRow((1,), (1,), (-0.1,), ("a",))
        with pytest.raises(ValueError, match="either a row or a mask reason"):
            FinalizedRollout("r1", "s", 1, row, "masked anyway")
        with pytest.raises(ValueError, match="either a row or a mask reason"):
            FinalizedRollout("r1", "s", 1, None, None)


class TestFinalize:
    def test_finalize_freezes_and_never_drops(self, recorder: Recorder) -> None:
        """Finalize freezes once, builds from that snapshot and leaves it droppable (CONS-1)."""
        run(recorder.put_all(two_turns()))
        finalized = run(finalize(recorder, "r1"))
        assert recorder.log == ["freeze"]
        assert finalized.row == build_training_row(two_turns())
        again = run(recorder.store.freeze("r1"))
        assert (again.snapshot_id, again.version) == (finalized.snapshot_id, finalized.version)

    def test_finalize_masks_an_unmatched_intent(self, recorder: Recorder) -> None:
        """A call begun but never put makes finalize mask the sample."""
        run(recorder.put_all(two_turns()))
        run(recorder.store.begin_call("r1", "third"))
        assert run(finalize(recorder, "r1")).masked

    def test_finalize_feeds_the_guard(self, recorder: Recorder) -> None:
        """Each finalized rollout is counted by the guard, masked or not."""
        run(recorder.put_all(two_turns()))
        guard = MaskFractionGuard(max_mask_fraction=0.5, mask_fraction_min_samples=1)
        run(finalize(recorder, "r1", guard=guard))
        run(finalize(recorder, "never-written", guard=guard))
        assert (guard.finalized, guard.masked) == (2, 1)

    def test_guard_abort_keeps_the_evidence(self, recorder: Recorder) -> None:
        """When the guard aborts, the masked rollout stays frozen and undropped."""
        run(recorder.store.mark_incomplete("r1"))
        guard = MaskFractionGuard(max_mask_fraction=0.0, mask_fraction_min_samples=1)
        with pytest.raises(MaskFractionExceededError):
            run(finalize(recorder, "r1", guard=guard))
        assert recorder.log == ["freeze"]
        assert run(recorder.store.freeze("r1")).incomplete


class TestRetireAfterHandoff:
    def test_drops_after_a_successful_handoff(self, recorder: Recorder) -> None:
        """The row is handed off first, then exactly the frozen snapshot is dropped (CONS-2)."""
        run(recorder.put_all(two_turns()))
        finalized = run(finalize(recorder, "r1"))
        assert run(retire_after_handoff(recorder, finalized, recorder.handoff))
        assert recorder.log == ["freeze", "handoff", "drop"]
        assert recorder.handed_off == [finalized]
        with pytest.raises(RolloutRetiredError):
            run(recorder.store.put(two_turns()[0]))

    def test_failed_handoff_drops_nothing(self, recorder: Recorder) -> None:
        """A handoff that raises propagates and the rollout keeps its evidence (CONS-3)."""
        run(recorder.put_all(two_turns()))
        finalized = run(finalize(recorder, "r1"))

        async def broken(finalized: FinalizedRollout) -> None:
            raise OSError("disk full")

        with pytest.raises(OSError, match="disk full"):
            run(retire_after_handoff(recorder, finalized, broken))
        assert "drop" not in recorder.log
        assert len(run(recorder.store.freeze("r1")).entries) == 2

    def test_masked_rollout_is_neither_handed_off_nor_dropped(self, recorder: Recorder) -> None:
        """A masked build returns False without handoff or drop (CONS-3)."""
        run(recorder.put_all(two_turns()))
        run(recorder.store.mark_incomplete("r1"))
        finalized = run(finalize(recorder, "r1"))
        assert not run(retire_after_handoff(recorder, finalized, recorder.handoff))
        assert recorder.log == ["freeze"]
        assert len(run(recorder.store.freeze("r1")).entries) == 2

    def test_changed_rollout_is_not_dropped(self, recorder: Recorder) -> None:
        """A mark after finalize makes the drop of the old snapshot return False."""
        run(recorder.put_all(two_turns()))
        finalized = run(finalize(recorder, "r1"))
        run(recorder.store.mark_incomplete("r1"))
        assert not run(retire_after_handoff(recorder, finalized, recorder.handoff))
        assert recorder.log == ["freeze", "handoff", "drop"]
        assert run(recorder.store.freeze("r1")).incomplete


class TestShouldRebuild:
    @pytest.mark.parametrize(
        ("enabled", "rebuild", "expected"),
        [(True, True, True), (True, False, False), (False, True, False), (False, False, False)],
    )
    def test_rebuilds_only_when_enabled_and_asked(
        self, enabled: bool, rebuild: bool, expected: bool
    ) -> None:
        """Rebuild happens exactly when capture is enabled and rebuild_response is true."""
        block = TokenIdCaptureSettings(enabled=enabled, dir="/captures", rebuild_response=rebuild)
        assert should_rebuild(block) is expected
        assert should_rebuild(TokenIdCaptureConfig(token_id_capture=block)) is expected


class TestConsume:
    def test_rebuild_off_touches_nothing(self, recorder: Recorder) -> None:
        """With rebuild_response false, consume returns None and never reads (CONS-4)."""
        run(recorder.put_all(two_turns()))
        config = TokenIdCaptureSettings(enabled=True, rebuild_response=False)
        assert run(consume(recorder, "r1", recorder.handoff, config=config)) is None
        assert recorder.log == []
        assert len(run(recorder.store.freeze("r1")).entries) == 2

    def test_rebuild_on_finalizes_hands_off_and_drops(self, recorder: Recorder) -> None:
        """With rebuild on, consume freezes, hands off, drops and feeds the guard."""
        run(recorder.put_all(two_turns()))
        config = TokenIdCaptureSettings(enabled=True, dir="/captures")
        guard = MaskFractionGuard.from_settings(config)
        outcome = run(consume(recorder, "r1", recorder.handoff, config=config, guard=guard))
        assert isinstance(outcome, Consumed)
        assert outcome.dropped
        assert outcome.finalized.row == build_training_row(two_turns())
        assert recorder.log == ["freeze", "handoff", "drop"]
        assert guard.finalized == 1


def _delta_entry(call: str, prompt: list[int], generation: list[int], **lineage: Any) -> TokenEntry:
    return TokenEntry(
        rollout_id="r",
        model_call_id=call,
        prompt_token_ids=prompt,
        generation_token_ids=generation,
        generation_log_probs=[-0.5] * len(generation),
        **lineage,
    )


def test_delta_prompts_are_written_out_before_the_row_is_built() -> None:
    """A call stored with delta_records holds what its prompt adds; the row is whole."""
    from tokcap_spec.fingerprint import token_digest

    first = _delta_entry("c1", [1, 2], [3])
    second = _delta_entry(
        "c2",
        [4],
        [5, 6],
        prompt_is_delta=True,
        parent_call_id="c1",
        digest=token_digest([1, 2, 3, 4, 5, 6]),
    )
    row = build_training_row([second, first])
    assert row.token_ids == (1, 2, 3, 4, 5, 6)
    assert row.loss_mask == (0, 0, 1, 0, 1, 1)
    orphan = second.model_copy(update={"parent_call_id": "c0"})
    with pytest.raises(BrokenChainError, match="delta prompt of 'c2' cannot be rebuilt"):
        build_training_row([first, orphan])
