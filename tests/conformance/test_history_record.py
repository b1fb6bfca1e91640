"""Recording histories: spawned lanes log real-time events on one clock, and failures surface."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from conformance._entries import EntryFactory
from conformance._history.record import Action, Lane, LaneTargets, Recorder, Workload
from conformance._reading import entry_view
from tokcap_spec.errors import RolloutRetiredError

MUTANTS = Path(__file__).parents[1] / "mutants"
RELAXED = "base:RelaxedFileStore"


@pytest.fixture(autouse=True)
def _mutants(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(MUTANTS))


def target(root: Path, kwargs: dict[str, object] | None = None) -> LaneTargets:
    given = kwargs if kwargs is not None else {"root": str(root)}
    return LaneTargets(RELAXED, given, RELAXED, given)


def put_action(rollout: str, call: str) -> Action:
    entry = EntryFactory(random.Random(call)).entry(rollout, call, prompt_len=2, generation_len=1)
    return Action("put", rollout, call, entry_view(entry).payload)


class TestWorkload:
    def test_waiting_lane_starts_after_the_writes(self, tmp_path: Path) -> None:
        """A lane waiting for two writes freezes after both acks and sees both entries."""
        writer = Lane("writer", (put_action("r", "a"), put_action("r", "b")))
        reader = Lane("reader", (Action("wait", count=2), Action("freeze", "r")))
        workload = Workload(target(tmp_path), [writer, reader])
        workload.start()
        events, problems = workload.finish()
        assert problems == []
        puts = [e for e in events if e.kind == "put"]
        (frozen,) = [e for e in events if e.kind == "freeze"]
        assert all(put.precedes(frozen) for put in puts)
        assert {call for call, _ in frozen.entries} == {"a", "b"}
        assert {(put.call_id, put.digest) for put in puts} == set(frozen.entries)

    def test_signal_releases_a_waiting_lane(self, tmp_path: Path) -> None:
        """A signal counts as a step, so a lane waiting for it runs after it."""
        first = Lane("first", (Action("freeze", "r"), Action("signal")))
        second = Lane("second", (Action("wait", count=1), Action("freeze", "r")))
        workload = Workload(target(tmp_path), [first, second])
        workload.start()
        events, _ = workload.finish()
        by_lane = {event.lane: event for event in events}
        assert by_lane["first"].precedes(by_lane["second"])

    def test_unbuildable_lane_is_reported_without_hanging(self, tmp_path: Path) -> None:
        """Lanes whose sink refuses its kwargs are reported, and nobody waits for their writes."""
        lanes = [Lane("a", (put_action("r", "a"),)), Lane("b", (put_action("r", "b"),))]
        broken = Workload(target(tmp_path, {"nope": 1}), lanes)
        broken.start()
        broken.wait_for(2)
        events, problems = broken.finish()
        assert events == []
        assert len(problems) == 2
        assert all("could not build" in problem for problem in problems)


class TestRecorder:
    def test_retire_freezes_then_drops(self, tmp_path: Path) -> None:
        """Retire logs a freeze and the drop of exactly the pair it returned."""
        from base import RelaxedFileStore

        store = RelaxedFileStore(str(tmp_path))
        recorder = Recorder("here")
        asyncio.run(recorder.retire(store, "r", attempts=3))
        frozen, dropped = recorder.events
        assert (frozen.kind, dropped.kind) == ("freeze", "drop")
        assert dropped.pair == frozen.result
        assert dropped.returned is True

    def test_a_raising_operation_is_a_fail(self, tmp_path: Path) -> None:
        """An operation that raises is logged as fail with its error type, never raised."""
        from base import RelaxedFileStore

        store = RelaxedFileStore(str(tmp_path))
        recorder = Recorder("here")
        asyncio.run(recorder.retire(store, "r", attempts=1))
        entry = EntryFactory(random.Random(0)).entry("r", "late", prompt_len=2, generation_len=1)
        late = asyncio.run(recorder.put(store, entry))
        assert late.outcome == "fail"
        assert late.error.startswith(RolloutRetiredError.__name__)
        assert late.complete is not None
        assert late.invoke <= late.complete
