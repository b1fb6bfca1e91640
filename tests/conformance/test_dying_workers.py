"""A spawned worker or lane that dies, at any moment, ends in a verdict naming where it died,
within the deadline: its siblings never wait on it, and nothing waits without a deadline."""

from __future__ import annotations

import json
import random
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from modules_on_disk import importable

from conformance._deadline import Watch, watched
from conformance._entries import EntryFactory
from conformance._history.record import Action, Lane, LaneTargets, Workload
from conformance._reading import entry_view
from conformance._workers import Operation, WorkerOutcome, WorkerPlan, run_workers

SINKS = """
import multiprocessing, os
from reference import FileTokenStore

def first(root, name):
    try:
        os.close(os.open(os.path.join(root, name), os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False

class DiesInPut(FileTokenStore):
    # put exits the process, in spawned workers only.
    async def put(self, entry):
        if multiprocessing.parent_process() is not None:
            os._exit(3)
        await super().put(entry)

class OneDiesBuilding(FileTokenStore):
    def __init__(self, root):
        if first(root, "died"):
            os._exit(3)
        super().__init__(root)

class FirstPutDies(FileTokenStore):
    async def put(self, entry):
        if first(self.root, "died"):
            os._exit(3)
        await super().put(entry)
"""

ENTRY = """
import os
from tokcap_spec.records import TokenEntry

# One worker in a run of several dies while it imports this, before its siblings' meeting.
try:
    os.close(os.open(os.environ["DYING_ENTRY_FLAG"], os.O_CREAT | os.O_EXCL))
    os._exit(3)
except FileExistsError:
    pass

class Entry(TokenEntry):
    pass
"""
DEADLINE = 1.0
QUICKLY = 15.0
"""Seconds within which every case here ends on a loaded machine: far below STRAGGLE."""


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store root, and modules of dying sinks and a dying entry class, importable by children."""
    importable(tmp_path / "modules", monkeypatch, dying=SINKS, dying_entry=ENTRY)
    monkeypatch.setenv("DYING_ENTRY_FLAG", str(tmp_path / "entry-died"))
    store = tmp_path / "store"
    store.mkdir()
    return store


def put(rollout: str, call: str) -> bytes:
    entry = EntryFactory(random.Random(call)).entry(rollout, call, prompt_len=2, generation_len=1)
    return entry_view(entry).payload


def plan(sink: str, root: Path, rollout: str, entry_class: str = "") -> WorkerPlan:
    operations = (Operation("put", put(rollout, "a")), Operation("put", put(rollout, "b")))
    extra = {"entry_class": entry_class} if entry_class else {}
    return WorkerPlan(f"dying:{sink}", {"root": str(root)}, operations, **extra)


def timed(function: Any) -> tuple[Any, float]:
    started = time.monotonic()
    value = watched(function, Watch(DEADLINE, "SPAWN-2"))
    return value, time.monotonic() - started


def test_a_worker_that_exits_in_put_is_reported_with_the_call_and_code(root: Path) -> None:
    """os._exit(3) inside put reads as dying during put, with the operation and exit code."""
    (outcome,) = watched(
        lambda: run_workers([plan("DiesInPut", root, "r")], together=False), Watch(DEADLINE)
    )
    assert outcome == WorkerOutcome(
        "operation", 0, "spawned worker 0 died during `put` (operation 1 of 2): exit code 3"
    )


def test_a_worker_dying_in_its_constructor_leaves_its_siblings_building(root: Path) -> None:
    """One of four workers built together dies constructing; the three others ack their puts."""
    plans = [plan("OneDiesBuilding", root, f"r{n}") for n in range(4)]
    outcomes, elapsed = timed(lambda: run_workers(plans, together=True))
    died = [outcome for outcome in outcomes if outcome.stage != "ok"]
    assert len(died) == 1
    assert died[0].stage == "build"
    assert died[0].error.endswith(
        "died during the constructor of dying:OneDiesBuilding: exit code 3"
    )
    assert [outcome.acked for outcome in outcomes if outcome.stage == "ok"] == [2, 2, 2]
    assert elapsed < QUICKLY


def test_a_worker_dying_before_the_build_meeting_never_holds_its_siblings(root: Path) -> None:
    """A worker that dies while starting, before it meets the others, is excused from it."""
    entry_class = "dying_entry:Entry"
    plans = [plan("FirstPutDies", root, f"r{n}", entry_class) for n in range(3)]
    (root / "died").touch()  # no put dies here: only the import of the entry class does
    outcomes, elapsed = timed(lambda: run_workers(plans, together=True))
    stages = sorted(outcome.stage for outcome in outcomes)
    assert stages == ["build", "ok", "ok"]
    (dead,) = [outcome for outcome in outcomes if outcome.stage == "build"]
    assert dead.error.endswith("died while starting: exit code 3")
    assert elapsed < QUICKLY


def lanes_with(sink: str, root: Path, reader_waits_for: int) -> tuple[Any, float]:
    kwargs = {"root": str(root)}
    target = LaneTargets(f"dying:{sink}", kwargs, f"dying:{sink}", kwargs)
    writer = Lane("writer", (Action("put", "r", "a", put("r", "a")),))
    # The other lane waits for the writer's step before its own put, so that it is still
    # running when the writer's put dies, however the machine schedules the lanes.
    other = Lane("other", (Action("wait", count=1), Action("put", "s", "b", put("s", "b"))))
    reader = Lane("reader", (Action("wait", count=reader_waits_for), Action("freeze", "r")))

    def record() -> list[str]:
        workload = Workload(target, [writer, other, reader])
        workload.start()
        return workload.finish()[1]

    return timed(record)


def test_a_lane_dying_in_put_stops_the_others_at_once(root: Path) -> None:
    """The first lane whose put exits is named with its step; every other lane is stopped."""
    problems, elapsed = lanes_with("FirstPutDies", root, reader_waits_for=2)
    stopped = [
        problem
        for problem in problems
        if problem.endswith(" stopped: another lane overran or died")
    ]
    (died,) = set(problems) - set(stopped)
    assert died == "writer died during `put` (step 1 of writer): exit code 3"
    assert sorted(stopped) == [
        "other stopped: another lane overran or died",
        "reader stopped: another lane overran or died",
    ]
    assert elapsed < QUICKLY


def test_lanes_waiting_for_steps_that_never_come_are_stopped_within_the_deadline(
    root: Path,
) -> None:
    """A reader waiting for more writes than any lane makes is stopped, not waited for."""
    (root / "died").touch()  # no put dies here
    problems, elapsed = lanes_with("FirstPutDies", root, reader_waits_for=5)
    assert problems == [
        "reader stopped: no sibling made progress in 1 s while it waited for its siblings' steps"
    ]
    assert elapsed < QUICKLY


class TestTheKit:
    def test_a_target_exiting_in_its_workers_ends_the_run_naming_each_death(
        self, pytester: pytest.Pytester
    ) -> None:
        """Every SPAWN clause fails naming the death in put and its exit code; the run ends."""
        pytester.makepyfile(dying=textwrap.dedent(SINKS))
        started = time.monotonic()
        result = pytester.runpytest_subprocess(
            "-p",
            "no:cacheprovider",
            "--tokcap-sink=dying:DiesInPut",
            '--tokcap-sink-kwargs={"root": "{tmp_path}"}',
            "--tokcap-timeout=2",
            "--tokcap-report=r.json",
            "-k",
            "SPAWN",
            timeout=300,
        )
        assert time.monotonic() - started < 300
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        report = json.loads((pytester.path / "r.json").read_text())
        for clause in ("SPAWN-1", "SPAWN-2", "SPAWN-3"):
            message = report["clauses"][clause]["message"]
            assert "died during `put` (operation 1 of " in message, (clause, message)
            assert "exit code 3" in message
