"""Work done in freshly spawned interpreters, as uvicorn workers do it, under one watch.

A worker receives only the target string, the kwargs and a list of operations. It builds its
own sink, optionally waits at a barrier so that several workers construct at the same moment,
runs the operations, closes the sink and reports each acknowledgement to the parent.
Nothing the parent installed reaches it.

Every spawned child (these workers and the history lanes alike) tells its parent which call
into the implementation it is in (:class:`Progress`). The parent watches all of them together
(:class:`Supervisor`): a child whose call overruns the deadline is killed and reported with
that call, and one that dies is reported with the call it was in and its exit code or signal.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import signal
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from conformance import deadline
from conformance.secrecy import keep, scrub
from conformance.settings import DEFAULT_ENTRY_CLASS
from tokcap_pytest import DEFAULT_TIMEOUTS

__all__ = [
    "Child",
    "Operation",
    "Progress",
    "Supervisor",
    "WorkerOutcome",
    "WorkerPlan",
    "breaker_check",
    "constructor",
    "run_workers",
    "spawned",
]

STRAGGLE = 120.0
"""Seconds a child may wait for its siblings (a barrier) before it gives up by itself; only
reached when the parent is gone, since the parent stops every child it gave up on."""


@dataclass(frozen=True)
class Operation:
    """``("put", fields_json)`` or ``("mark", rollout_id, model_call_id)``.

    ``fields_json`` is the kit's canonical form of the entry's fields.
    """

    kind: str
    payload: bytes = b""
    rollout_id: str = ""
    model_call_id: str = ""


@dataclass(frozen=True)
class WorkerPlan:
    """What one worker builds and does."""

    target: str
    kwargs: dict[str, Any] = field(repr=False)
    operations: tuple[Operation, ...] = ()
    entry_class: str = DEFAULT_ENTRY_CLASS
    """The class the worker builds each put's entry with, from the payload's fields."""


@dataclass
class WorkerOutcome:
    """What one worker reported: ``stage`` is ``ok``, ``build``, ``operation`` or ``hung``."""

    stage: str
    acked: int = 0
    error: str = ""
    details: list[str] = field(default_factory=list)


class Progress:
    """The child's side of the watch: say which call it is in, and when it is in none.

    A call lasts, as the parent sees it, until the next call or :meth:`idle`: a child calls
    ``idle`` only before it waits for something other than the implementation.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def call(self, what: str, where: str = "", acked: int = 0) -> None:
        self.conn.send(("call", what, where, acked))

    def idle(self) -> None:
        self.conn.send(("idle",))

    def ready(self) -> None:
        self.conn.send(("ready",))

    def result(self, value: Any) -> None:
        self.conn.send(("result", value))


@dataclass
class Child:
    """One spawned child as the parent sees it."""

    name: str
    process: Any
    conn: Connection
    doing: str = "starting"
    where: str = ""
    since: float | None = None
    ready: bool = False
    acked: int = 0
    """Operations the child reported acknowledged when it began its latest call."""
    result: Any = None
    reported: bool = False
    problem: str = ""
    """Why the child ended without reporting: it overran a deadline or died."""

    @property
    def over(self) -> bool:
        return self.reported or bool(self.problem)


class Supervisor:
    """Spawns children and watches all of them at once under the deadline in force.

    ``on_problem`` runs whenever a child overran or died, for instance to stop its siblings.
    """

    def __init__(self, on_problem: Callable[[Supervisor], None] | None = None) -> None:
        watch = deadline.current_watch()
        if watch is not None and watch.abandoned is not None:
            raise watch.abandoned  # the check was given up on: it starts nothing more
        self.seconds = watch.seconds if watch else DEFAULT_TIMEOUTS["ci"]
        self.clause = watch.clause if watch else ""
        self.children: list[Child] = []
        self._context = multiprocessing.get_context("spawn")
        self._on_problem = on_problem

    @property
    def context(self) -> Any:
        return self._context

    def spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        """Start ``target(*args, progress_conn)`` in a spawned interpreter."""
        receive, send = self._context.Pipe(duplex=False)
        process = self._context.Process(target=target, args=(*args, send), daemon=True)
        process.start()
        send.close()
        self.children.append(Child(name, process, receive))

    def watch(self, until: Callable[[], bool] = lambda: False) -> None:
        """Read the children's progress until ``until()`` holds or every child is over."""
        while not until():
            live = [child for child in self.children if not child.over]
            if not live:
                return
            waits = [child.conn for child in live] + [child.process.sentinel for child in live]
            ready = wait(waits, self._time_left(live))
            for child in live:
                if child.conn in ready or child.process.sentinel in ready:
                    self._read(child)
            self._enforce(live)

    def finish(self) -> list[Child]:
        """Watch until every child is over, then reap them all."""
        self.watch()
        for child in self.children:
            child.process.join(5)
            if child.process.is_alive():
                child.process.kill()
                child.process.join()
            child.conn.close()
        return self.children

    def stop_all(self, why: str) -> None:
        """Kill every child still running, each reported as stopped for ``why``."""
        for child in self.children:
            if not child.over:
                child.process.kill()
                child.problem = f"{child.name} stopped: {why}"

    def _time_left(self, live: Iterable[Child]) -> float | None:
        starts = [child.since for child in live if child.since is not None]
        if not starts:
            return None
        return max(0.0, min(starts) + self.seconds - time.monotonic())

    def _read(self, child: Child) -> None:
        try:
            while child.conn.poll():
                message = child.conn.recv()
                if message[0] == "call":
                    child.doing, child.where, child.acked = message[1], message[2], message[3]
                    child.since = time.monotonic()
                elif message[0] == "idle":
                    child.since = None
                elif message[0] == "ready":
                    child.ready, child.since = True, None
                else:
                    child.result, child.reported = message[1], True
                    return
        except (EOFError, OSError):
            pass
        if not child.reported and not child.process.is_alive():
            child.process.join()
            during = f" during {deadline.label(child.doing)}" if child.since else ""
            where = f" ({child.where})" if child.where and child.since else ""
            child.problem = (
                f"{child.name} died{during}{where}: {_exit_text(child.process.exitcode)}"
            )
            self._problem()

    def _enforce(self, live: Iterable[Child]) -> None:
        now = time.monotonic()
        for child in live:
            if child.over or child.since is None or now - child.since < self.seconds:
                continue
            child.process.kill()
            where = f" ({child.where})" if child.where else ""
            overrun = deadline.Overrun(deadline.label(child.doing), self.seconds, where)
            child.problem = f"{child.name}: {overrun}"
            deadline.breaker.trip(spawned(child.doing), self.clause, str(overrun))
            self._problem()

    def _problem(self) -> None:
        if self._on_problem is not None:
            self._on_problem(self)


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def spawned(operation: str) -> str:
    """How the breaker names ``operation`` when it overran in a spawned child.

    Kept apart from the same operation in the pytest process, which may work; a child checks
    both names before it starts.
    """
    return f"{operation} in a spawned worker"


def breaker_check(operations: set[str]) -> None:
    """Refuse to start children whose operations overran too often, here or in children."""
    deadline.breaker.check(sorted(operations | {spawned(each) for each in operations}))


def constructor(target: str) -> str:
    """How a watch names building ``target``."""
    return f"the constructor of {target}"


def _worker(plan: WorkerPlan, barrier: Any, conn: Connection) -> None:
    from conformance.context import build_endpoint
    from conformance.entries import load_entry_class

    keep(plan.kwargs)
    progress = Progress(conn)
    try:
        build = load_entry_class(plan.entry_class)
        barrier.wait(timeout=STRAGGLE)
        progress.call(constructor(plan.target))
        sink = build_endpoint(plan.target, plan.kwargs, "sink")
    except Exception as exc:
        progress.result(WorkerOutcome("build", error=scrub(f"{type(exc).__name__}: {exc}")))
        return

    async def run() -> WorkerOutcome:
        acked = 0
        total = len(plan.operations)
        try:
            for number, operation in enumerate(plan.operations, 1):
                where = f"operation {number} of {total}"
                if operation.kind == "put":
                    progress.call("put", where, acked)
                    await sink.put(build(**json.loads(operation.payload)))
                else:
                    progress.call("mark_incomplete", where, acked)
                    await sink.mark_incomplete(operation.rollout_id, operation.model_call_id)
                acked += 1
        except Exception as exc:
            frames = traceback.extract_tb(exc.__traceback__)
            where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
            return WorkerOutcome("operation", acked, scrub(f"{type(exc).__name__}: {exc}{where}"))
        finally:
            progress.call("close", "", acked)
            await sink.close()
        return WorkerOutcome("ok", acked)

    progress.result(asyncio.run(run()))


def _operations(plans: list[WorkerPlan]) -> set[str]:
    kinds = {"put" if op.kind == "put" else "mark_incomplete" for p in plans for op in p.operations}
    return kinds | {constructor(plan.target) for plan in plans}


def run_workers(plans: list[WorkerPlan], *, together: bool = True) -> list[WorkerOutcome]:
    """Run each plan in its own spawned interpreter and return what each one reported.

    With ``together`` every worker constructs its sink only once all of them have started,
    so constructions race (SPAWN-2). Every call a worker makes has the deadline in force; a
    worker that overruns is killed and reported ``hung``.
    """
    breaker_check(_operations(plans))
    supervisor = Supervisor()
    barrier = supervisor.context.Barrier(len(plans) if together else 1)
    for number, plan in enumerate(plans):
        supervisor.spawn(f"spawned worker {number}", _worker, plan, barrier)
    return [_outcome(child) for child in supervisor.finish()]


def _outcome(child: Child) -> WorkerOutcome:
    if child.reported:
        outcome: WorkerOutcome = child.result
        return outcome
    building = child.doing.startswith("the constructor") or child.doing == "starting"
    if "did not return" in child.problem:
        stage = "build" if building else "hung"
    else:
        stage = "build" if building else "operation"
    return WorkerOutcome(stage, child.acked, child.problem)
