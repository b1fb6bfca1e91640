"""Spawned workers and lanes under the deadline: one that hangs is killed and reported with its
call, one that dies with its call and signal, and nothing waits for them."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest
from modules_on_disk import importable

from conformance import _secrecy as secrecy
from conformance._deadline import Watch, watched
from conformance._entries import EntryFactory
from conformance._history.record import Action, Lane, LaneTargets, Recorder, Workload
from conformance._reading import entry_view
from conformance._workers import Operation, Supervisor, WorkerOutcome, WorkerPlan, run_workers

SINKS = """
import os, signal, threading
from reference import FileTokenStore

class Hangs(FileTokenStore):
    async def put(self, entry):
        threading.Event().wait()

class Dies(FileTokenStore):
    async def put(self, entry):
        os.kill(os.getpid(), signal.SIGKILL)

class Quotes(FileTokenStore):
    async def put(self, entry):
        raise ConnectionError("AUTH quoted-secret-value rejected")

class EchoesItsPassword(FileTokenStore):
    def __init__(self, root, password):
        raise ValueError(f"cannot log in with {password}")

class QuotesItsPasswordOnClose(FileTokenStore):
    def __init__(self, root, password):
        super().__init__(root)
        self.password = password

    async def close(self):
        raise ConnectionError(f"AUTH {self.password} rejected")
"""
SECRET = {"password": "quoted-secret-value"}
HANGS_AT = "put (sinks/misbehaving.py:7)"
"""Where ``Hangs`` blocks: the line of its ``wait``, in the module the fixture writes."""
DEADLINE = 1.0


@pytest.fixture
def sinks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module of misbehaving sinks, importable here and in spawned children."""
    importable(tmp_path / "sinks", monkeypatch, misbehaving=SINKS)
    return tmp_path


def entry(rollout: str, call: str) -> Any:
    return EntryFactory(random.Random(call)).entry(rollout, call, prompt_len=2, generation_len=1)


def put(rollout: str, call: str) -> bytes:
    return entry_view(entry(rollout, call)).payload


def workers(
    sink: str, root: Path, count: int = 1, secret: dict[str, str] | None = None
) -> list[WorkerOutcome]:
    plan = WorkerPlan(
        f"misbehaving:{sink}",
        {"root": str(root), **(secret or {})},
        (Operation("put", put("r", "a")), Operation("put", put("r", "b"))),
    )
    return watched(lambda: run_workers([plan] * count), Watch(DEADLINE, "SPAWN-1"))


class TestRunWorkers:
    def test_a_worker_whose_put_hangs_is_reported_with_the_call(self, sinks: Path) -> None:
        """Each hanging worker is killed and reported hung in put, its operation numbered, with
        the line of the implementation its thread was stuck on."""
        outcomes = workers("Hangs", sinks, count=2)
        assert [outcome.stage for outcome in outcomes] == ["hung", "hung"]
        for number, outcome in enumerate(outcomes):
            assert outcome.error == (
                f"spawned worker {number}: `put` did not return within 1 s (operation 1 of 2); "
                f"its threads were in {HANGS_AT}"
            )
            assert outcome.acked == 0

    def test_a_worker_that_dies_is_reported_with_its_call_and_signal(self, sinks: Path) -> None:
        """A worker killed during put reads as dying there, not as failing to build."""
        (outcome,) = workers("Dies", sinks)
        assert outcome.stage == "operation"
        assert outcome.error == (
            "spawned worker 0 died during `put` (operation 1 of 2): killed by signal SIGKILL"
        )

    def test_a_worker_that_cannot_build_is_named_and_quotes_no_secret(self, sinks: Path) -> None:
        """A constructor that raises, echoing a kwarg, is a build outcome naming the worker."""
        (outcome,) = workers("EchoesItsPassword", sinks, secret=SECRET)
        assert (outcome.stage, outcome.acked) == ("build", 0)
        assert outcome.error.startswith("spawned worker 0 could not build its sink: ")
        assert outcome.error.endswith("ValueError: cannot log in with ***")

    def test_a_worker_whose_close_raises_is_stopped_and_quotes_no_secret(self, sinks: Path) -> None:
        """close raising after every ack stops the worker with its masked error, no crash."""
        (outcome,) = workers("QuotesItsPasswordOnClose", sinks, secret=SECRET)
        assert outcome == WorkerOutcome(
            "operation", 2, "spawned worker 0 stopped: ConnectionError: AUTH *** rejected"
        )


class TestWorkload:
    def test_a_hanging_lane_stops_every_lane_and_is_named(self, sinks: Path) -> None:
        """A lane stuck in put is killed; the lane waiting for its writes is stopped too."""
        kwargs = {"root": str(sinks)}
        target = LaneTargets("misbehaving:Hangs", kwargs, "misbehaving:Hangs", kwargs)
        writer = Lane("writer", (Action("put", "r", "a", put("r", "a")),))
        reader = Lane("reader", (Action("wait", count=1), Action("freeze", "r")))

        def record() -> tuple[list[object], list[str]]:
            workload = Workload(target, [writer, reader])
            workload.start()
            workload.wait_for(1)
            events, problems = workload.finish()
            return list(events), problems

        events, problems = watched(record, Watch(DEADLINE, "FREEZE-5"))
        assert events == []
        assert problems == [
            f"writer: `put` did not return within 1 s (step 1 of writer); its threads were in "
            f"{HANGS_AT}",
            "reader stopped: another lane overran or died",
        ]


def test_recorded_errors_carry_no_secret(sinks: Path) -> None:
    """An error the implementation quotes a kwarg value in is logged masked."""
    import misbehaving

    secrecy.keep({"password": "quoted-secret-value"})
    recorder = Recorder("here")
    sink = misbehaving.Quotes(root=str(sinks))
    event = asyncio.run(recorder.put(sink, entry("r", "a")))
    assert event.outcome == "fail"
    assert event.error == "ConnectionError: AUTH *** rejected"


JOBS = """
import os, signal, time
from conformance._workers import WorkerOutcome

class Job:
    entry_class = "tokcap_spec.records:TokenEntry"

    def __init__(self, root, dies):
        self.root, self.dies = root, dies

    def endpoints(self):
        return (("sink", "reference:FileTokenStore", {"root": self.root}),)

    def calls(self):
        return {"put"}

    async def run(self, built, progress, meeting):
        if self.dies:
            progress.call("put", "operation 1 of 1")
            os.kill(os.getpid(), signal.SIGKILL)
        # Built and started, but slow to make its first call: its sibling dies first.
        time.sleep(30)
        return WorkerOutcome("ok")
"""


class TestStartTogether:
    def test_a_built_child_stopped_before_its_first_call_did_not_fail_to_build(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A child that said it was built, stopped by a sibling's death before its first call,
        is stopped in operation, never taken for one that could not build."""
        importable(tmp_path / "jobs", monkeypatch, slow_jobs=JOBS)
        from slow_jobs import Job  # type: ignore[import-not-found]

        def run() -> list[WorkerOutcome]:
            jobs = [("dying", Job(str(tmp_path), True)), ("slow", Job(str(tmp_path), False))]
            supervisor = Supervisor(jobs, start_together=True, stop_siblings="a sibling died")
            supervisor.start()
            return supervisor.finish()

        dying, slow = watched(run, Watch(DEADLINE * 10, "SPAWN-1"))
        assert (dying.stage, dying.error) == (
            "operation",
            "dying died during `put` (operation 1 of 1): killed by signal SIGKILL",
        )
        assert (slow.stage, slow.error) == ("operation", "slow stopped: a sibling died")
