"""Spawned children, as uvicorn workers are, watched together under the run's deadline.

One harness serves the SPAWN checks (:func:`run_workers`), the lanes that record concurrent
histories (:mod:`conformance._history.record`) and the staging contract's spawned stagers and
fetchers (:mod:`conformance._staging.elsewhere`). A child receives only its :class:`Job`: the
target strings and kwargs of the endpoints it builds, the entry class, and the calls it makes.
Nothing the parent installed reaches it. It declares the kwargs' secrets, builds its
endpoints, runs its calls, closes its endpoints and reports a :class:`WorkerOutcome` whose
error text is stripped of those secrets.

Every child tells its parent which call into the implementation it is in (:class:`Progress`).
The parent watches all of them together (:class:`Supervisor`): a child whose call overruns
the deadline is killed and reported with that call, and one that dies is reported with the
call it was in and its exit code or signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from conformance import _constructions as constructions
from conformance import _deadline as deadline
from conformance import _stacks as stacks
from conformance._secrecy import keep, scrub
from conformance._settings import DEFAULT_ENTRY_CLASS
from tokcap_pytest import DEFAULT_TIMEOUTS

__all__ = [
    "Build",
    "Built",
    "Job",
    "Meeting",
    "Operation",
    "Progress",
    "Supervisor",
    "WorkerOutcome",
    "WorkerPlan",
    "constructor",
    "run_workers",
    "stop_all",
]

STRAGGLE = 120.0
"""Seconds a child may wait for its siblings (a meeting, a count of steps) before it gives up
by itself; the parent stops children waiting on each other long before."""

START_UP = 60.0
"""Seconds a spawned interpreter may take to start and say its first word, when the deadline
in force is shorter: a loaded machine starts one in seconds, never in a minute."""

REAP = 5.0
"""Seconds the parent waits for a child it stopped, or that reported, to be reaped."""

_PR_SET_PDEATHSIG = 1
_ORPHANED = 70
"""Exit code of a child whose parent is gone."""

Build = tuple[str, str, dict[str, Any]]
"""One endpoint a child builds: its role (``sink``, ``source``, ``staging sink`` or ``staging
source``), target string and kwargs."""


@dataclass
class WorkerOutcome:
    """What one child reported, or what the parent saw of it.

    ``stage`` is ``ok``, ``build`` (it could not build its endpoints, or waited for a child
    that could not), ``operation`` (a call raised, or the child died or was stopped) or
    ``hung`` (a call overran the deadline).
    ``acked`` counts the calls acknowledged before that; ``events`` holds what a history lane
    recorded.
    """

    stage: str
    acked: int = 0
    error: str = ""
    events: list[Any] = field(default_factory=list)


class Progress:
    """The child's side of the watch: say which call it is in, and when it is in none.

    A call lasts, as the parent sees it, until the next call or :meth:`idle`: a child calls
    ``idle`` only before it waits for something other than the implementation. ``acked``,
    which the job counts up, goes with every call.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.acked = 0

    def call(self, what: str, where: str = "") -> None:
        self.conn.send(("call", what, where, self.acked))

    def idle(self) -> None:
        self.conn.send(("idle",))

    def ready(self) -> None:
        self.conn.send(("ready",))

    def result(self, outcome: WorkerOutcome) -> None:
        self.conn.send(("result", outcome))


class Meeting:
    """What the children of one supervisor share: where they meet, and a count of steps.

    ``build`` holds every child until all have started, so that their constructions race;
    ``start`` holds every child until the parent says go, once all have built, so that their
    calls race. Nothing here is a lock: each child writes only its own slots, the parent only
    its flags, and a wake-up is a post to a semaphore of each child. A child killed at any
    moment therefore leaves nothing held that a sibling or the parent would wait on.
    """

    def __init__(self, context: Any, children: int, *, build: bool, start: bool) -> None:
        self.children = children
        self.build = build
        self.start = start
        self.index = -1
        """Which child this process is; set in the child, -1 in the parent."""
        self._built = context.Array("b", children, lock=False)
        self._gone = context.Array("b", children, lock=False)
        # A slot per child and one more, the last, for the parent (whose ``index`` is -1).
        self._steps = context.Array("q", children + 1, lock=False)
        # 0 while waiting, 1 once the parent said go, 2 once the start was called off; and
        # whether a child that stopped early released every wait for a count.
        self._flags = context.Array("b", 2, lock=False)
        self._wake = [context.Semaphore(0) for _ in range(children)]

    @property
    def broken(self) -> bool:
        """Whether the start was called off: some child failed or was given up on first."""
        return bool(self._flags[0] == 2)

    @property
    def steps(self) -> int:
        """The steps the children together have made."""
        return sum(self._steps)

    def abort(self) -> None:
        """Call the start off: whoever waits there, or comes to it, goes on at once.

        The build meeting is never called off: a child released from it that has not yet woken
        would read the call-off as its own failure.
        """
        if self._flags[0] == 0:
            self._flags[0] = 2
        self._nudge()

    def go(self) -> None:
        """Let every child waiting at the start run (the parent's word)."""
        if self._flags[0] == 0:
            self._flags[0] = 1
        self._nudge()

    def gone(self, index: int) -> None:
        """Excuse child ``index`` from the build meeting: it ended (the parent's word)."""
        self._gone[index] = 1
        self._nudge()

    def arrive_built(self, timeout: float) -> bool:
        """Wait until every other child has started or ended; False when ``timeout`` passed."""
        self._built[self.index] = 1
        self._nudge()
        everyone = range(self.children)
        return self._await(lambda: all(self._built[i] or self._gone[i] for i in everyone), timeout)

    def await_start(self, timeout: float) -> bool:
        """Wait for the parent's go; False when the start was called off or ``timeout`` passed."""
        return self._await(lambda: self._flags[0] != 0, timeout) and self._flags[0] == 1

    def advance(self) -> None:
        """Count one step and wake every child waiting for a count."""
        self._steps[self.index] += 1
        self._nudge()

    def reach(self, count: int) -> None:
        """Wait until the children together have made ``count`` steps."""
        self._await(lambda: self._flags[1] == 1 or self.steps >= count, STRAGGLE)

    def release(self) -> None:
        """Let every child waiting for a count go on: one that stopped early makes no more."""
        self._flags[1] = 1
        self._nudge()

    def _nudge(self) -> None:
        for wake in self._wake:
            wake.release()

    def _await(self, ready: Callable[[], bool], timeout: float) -> bool:
        until = time.monotonic() + timeout
        wake = self._wake[self.index]
        while not ready():
            left = until - time.monotonic()
            if left <= 0:
                return False
            wake.acquire(True, left)
        return True


@dataclass(frozen=True)
class Built:
    """What a child built: the entry class and the endpoints its job asked for.

    The harness closes ``sink`` and ``source`` after the job ran; a staging job, whose
    endpoints' protocol has no ``close``, closes its own.
    """

    entry: type[Any]
    sink: Any = None
    source: Any = None
    staging_sink: Any = None
    staging_source: Any = None


class Job(Protocol):
    """What one child builds and does; a module-level class, so that it pickles.

    ``entry_class`` names the class each put's entry is built with, from the payload's fields;
    ``endpoints`` says what the child builds, in order; ``calls`` names every operation of the
    implementation that ``run`` may call, for the breaker. ``run`` makes the calls, telling
    ``progress`` about each; the harness closes the endpoints after it.
    """

    @property
    def entry_class(self) -> str: ...

    def endpoints(self) -> tuple[Build, ...]: ...

    def calls(self) -> set[str]: ...

    async def run(self, built: Built, progress: Progress, meeting: Meeting) -> WorkerOutcome: ...


@dataclass
class _Child:
    """One spawned child as the parent sees it."""

    name: str
    index: int
    process: Any
    conn: Connection
    doing: str = "starting"
    where: str = ""
    since: float | None = None
    started: float = field(default_factory=time.monotonic)
    heard: bool = False
    """Whether the child said anything yet: until then it is starting its interpreter."""
    ready: bool = False
    waiting: bool = False
    """Whether the child said it waits for its siblings' steps (``idle``)."""
    acked: int = 0
    """Operations the child reported acknowledged when it began its latest call."""
    result: WorkerOutcome | None = None
    problem: str = ""
    """Why the child ended without reporting: it overran a deadline, died or was stopped."""
    overran: bool = False

    @property
    def over(self) -> bool:
        return self.result is not None or bool(self.problem)


_live: weakref.WeakSet[Supervisor] = weakref.WeakSet()


def stop_all() -> None:
    """Kill every child of every supervisor of this process still running, and its group."""
    for supervisor in list(_live):
        supervisor.kill_all()


deadline.on_interrupt(stop_all)


class Supervisor:
    """Spawns a child per job and watches all of them at once under the deadline in force.

    With ``build_together`` the children build their endpoints only once all of them have
    started; with ``start_together`` they wait, built, until all of them have. With
    ``stop_siblings`` the first child that overruns or dies stops every other one, each
    reported as stopped for that reason, and the start is called off.

    No wait is without a deadline: a call has the deadline in force; a child still starting
    its interpreter has :data:`START_UP` seconds (or the deadline, if longer); and when no
    child is in a call and none said anything for the deadline, they are waiting on each
    other for good, and every one is stopped. Each child leads a process group of its own,
    killed whole, and dies with this process (:func:`_bind_to_parent`).
    """

    def __init__(
        self,
        jobs: Sequence[tuple[str, Job]],
        *,
        build_together: bool = False,
        start_together: bool = False,
        stop_siblings: str = "",
    ) -> None:
        watch = deadline.current_watch()
        if watch is not None and watch.abandoned is not None:
            raise watch.abandoned  # the check was given up on: it starts nothing more
        self.seconds = watch.seconds if watch else DEFAULT_TIMEOUTS["ci"]
        self.clause = watch.clause if watch else ""
        self._jobs = list(jobs)
        self._context = multiprocessing.get_context("spawn")
        self.meeting = Meeting(
            self._context, len(self._jobs), build=build_together, start=start_together
        )
        self._stop_siblings = stop_siblings
        self._children: list[_Child] = []
        self._heard = time.monotonic()
        self._dumps = ""
        """A folder where each child writes its threads' stacks when asked (see _stacks)."""

    def start(self) -> None:
        """Spawn every child, unless an operation one of them calls overran too often.

        The breaker counts overruns here and in children apart; a child checks both. With
        ``start_together``, return once every child has built its endpoints and all of them
        run; when one could not build, none runs, and each says why in :meth:`finish`.
        """
        names: set[str] = set()
        for _, job in self._jobs:
            names |= job.calls() | {constructor(target) for _, target, _ in job.endpoints()}
        deadline.breaker.check(sorted(names | {_in_child(name) for name in names}))
        _live.add(self)
        self._dumps = tempfile.mkdtemp(prefix="tokcap-stacks-")
        for index, (name, job) in enumerate(self._jobs):
            receive, send = self._context.Pipe(duplex=False)
            process = self._context.Process(
                target=_child_main,
                args=(name, index, job, self.meeting, send, os.getpid(), self._dump(index)),
                daemon=True,
            )
            with _main_module_left_behind(), _salted_apart():
                process.start()
            send.close()
            self._children.append(_Child(name, index, process, receive))
        if self.meeting.start:
            self._start_together()

    def _start_together(self) -> None:
        children = self._children
        self.watch(until=lambda: all(child.ready or child.over for child in children))
        if all(child.ready for child in children):
            self.meeting.go()
        else:
            self.meeting.abort()  # A child that failed to build says why in finish().

    def watch(self, until: Callable[[], bool] = lambda: False) -> None:
        """Read the children's progress until ``until()`` holds or every child is over."""
        self._heard = time.monotonic()
        while not until():
            live = [child for child in self._children if not child.over]
            if not live:
                return
            waits = [child.conn for child in live] + [child.process.sentinel for child in live]
            ready = wait(waits, self._time_left(live))
            for child in live:
                if child.over:
                    continue  # a sibling's end stopped it meanwhile
                if child.conn in ready or child.process.sentinel in ready:
                    self._read(child)
            self._enforce(live)

    def finish(self) -> list[WorkerOutcome]:
        """Watch until every child is over, reap them all and return each one's outcome."""
        try:
            self.watch()
        finally:
            for child in self._children:
                child.process.join(REAP)
                _kill(child.process)
                child.conn.close()
            _live.discard(self)
            if self._dumps:
                shutil.rmtree(self._dumps, ignore_errors=True)
        return [_outcome(child) for child in self._children]

    def _dump(self, index: int) -> str:
        return os.path.join(self._dumps, f"{index}.txt")

    def kill_all(self) -> None:
        """Kill every child and its process group at once, and reap them (interrupts)."""
        for child in self._children:
            _kill(child.process)
            if not child.over:
                child.problem = f"{child.name} stopped: the run was interrupted"
        self.meeting.abort()

    def _time_left(self, live: Iterable[_Child]) -> float:
        now = time.monotonic()
        ends = [self._heard + self.seconds]
        for child in live:
            if child.since is not None:
                ends.append(child.since + self.seconds)
            elif not child.heard:
                ends.append(child.started + max(self.seconds, START_UP))
        return max(0.0, min(ends) - now)

    def _read(self, child: _Child) -> None:
        try:
            while child.conn.poll():
                message = child.conn.recv()
                child.heard, self._heard = True, time.monotonic()
                child.waiting = message[0] == "idle"
                if message[0] == "call":
                    child.doing, child.where, child.acked = message[1], message[2], message[3]
                    child.since = time.monotonic()
                    if child.doing.startswith(constructions.PREFIX):
                        constructions.count()
                elif message[0] == "idle":
                    child.since = None
                elif message[0] == "ready":
                    child.ready, child.since = True, None
                else:
                    child.result = message[1]
                    self.meeting.gone(child.index)
                    return
        except (EOFError, OSError):
            pass
        if not child.process.is_alive():
            child.process.join(REAP)
            child.problem = (
                f"{child.name} died{_during(child)}: {_exit_text(child.process.exitcode)}"
            )
            self.meeting.gone(child.index)
            self._problem()

    def _enforce(self, live: Iterable[_Child]) -> None:
        now = time.monotonic()
        live = [child for child in live if not child.over]
        for child in live:
            if child.since is not None and now - child.since >= self.seconds:
                threads = stacks.where_threads_were(child.process.pid, self._dump(child.index))
                _kill(child.process)
                where = f" ({child.where})" if child.where else ""
                overrun = deadline.Overrun(deadline.label(child.doing), self.seconds, where)
                child.problem, child.overran = f"{child.name}: {overrun}", True
                if threads:
                    child.problem += f"; its threads were in {scrub(threads)}"
                deadline.breaker.trip(_in_child(child.doing), self.clause, str(overrun))
            elif not child.heard and now - child.started >= max(self.seconds, START_UP):
                _kill(child.process)
                allowed = max(self.seconds, START_UP)
                child.problem = f"{child.name} did not start within {allowed:g} s"
            else:
                continue
            self.meeting.gone(child.index)
            self._problem()
        stuck = [child for child in live if not child.over]
        waiting = all(child.since is None and child.heard for child in stuck)
        if stuck and waiting and now - self._heard >= self.seconds:
            for child in stuck:
                _kill(child.process)
                child.problem = (
                    f"{child.name} stopped: no sibling made progress in {self.seconds:g} s"
                    f"{_during(child)}"
                )
                self.meeting.gone(child.index)
            self.meeting.abort()

    def _problem(self) -> None:
        if not self._stop_siblings:
            return
        for child in self._children:
            if not child.over:
                _kill(child.process)
                child.problem = f"{child.name} stopped: {self._stop_siblings}"
        self.meeting.abort()


def _during(child: _Child) -> str:
    """Where a child was when it ended: in a call, between calls, or starting."""
    where = f" ({child.where})" if child.where else ""
    if child.since is not None:
        return f" during {deadline.label(child.doing)}{where}"
    if not child.heard:
        return " while starting"
    if child.waiting:
        return " while it waited for its siblings' steps"
    if child.ready and child.doing.startswith("the constructor"):
        return " while it waited for the start"
    return f" after {deadline.label(child.doing)}{where}"


def _kill(process: Any) -> None:
    """Kill ``process`` and the process group it leads, then reap it."""
    pid = process.pid
    if pid is None:
        return
    with contextlib.suppress(OSError, AttributeError):  # no process groups on Windows
        os.killpg(pid, signal.SIGKILL)
    if process.is_alive():
        process.kill()
    process.join(REAP)


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _in_child(operation: str) -> str:
    """How the breaker names ``operation`` when it overran in a spawned child.

    Kept apart from the same operation in the pytest process, which may work.
    """
    return f"{operation} in a spawned worker"


def _outcome(child: _Child) -> WorkerOutcome:
    if child.result is not None:
        return child.result
    # A child that said it was built failed after building, even if a sibling's end stopped
    # it before its first call was heard.
    if not child.ready and (child.doing.startswith("the constructor") or child.doing == "starting"):
        stage = "build"
    else:
        stage = "hung" if child.overran else "operation"
    return WorkerOutcome(stage, child.acked, child.problem)


def constructor(target: str) -> str:
    """How a watch names building ``target``."""
    return f"{constructions.PREFIX}{target}"


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _child_main(
    name: str, index: int, job: Job, meeting: Meeting, conn: Connection, parent: int, dump: str
) -> None:
    """What every child runs: build the job's endpoints, run its calls, report the outcome.

    Asked with ``SIGUSR1``, it writes its threads' stacks to ``dump`` (the parent asks before
    it kills a child whose call overran).
    """
    _bind_to_parent(parent)
    stacks.arm(dump)
    from conformance._entries import load_entry_class
    from conformance._kit import build_endpoint

    meeting.index = index
    builds = job.endpoints()
    for _, _, kwargs in builds:
        keep(kwargs)
    progress = Progress(conn)
    try:
        entry = load_entry_class(job.entry_class)
        for _, target, _ in builds:
            _import_early(target)
        if meeting.build and not meeting.arrive_built(STRAGGLE):
            raise TimeoutError(f"its siblings did not start within {STRAGGLE:g} s")
        endpoints: dict[str, Any] = {}
        for role, target, kwargs in builds:
            progress.call(constructor(target))
            endpoints[role.replace(" ", "_")] = build_endpoint(target, kwargs, role)
    except Exception as exc:
        meeting.abort()
        roles = " and ".join(role for role, _, _ in builds)
        error = scrub(f"{name} could not build its {roles}: {_failure(exc)}")
        progress.result(WorkerOutcome("build", error=error))
        return
    progress.ready()
    if meeting.start and not meeting.await_start(STRAGGLE):
        progress.result(WorkerOutcome("build"))  # The child that failed to build says why.
        return
    try:
        outcome = asyncio.run(_run(job, Built(entry, **endpoints), progress, meeting))
    except Exception as exc:
        meeting.release()
        error = scrub(f"{name} stopped: {_failure(exc)}")
        outcome = WorkerOutcome("operation", progress.acked, error)
    progress.result(outcome)


def _import_early(target: str) -> None:
    """Import ``target``'s module now, so that workers meeting to build construct at one moment.

    Imports take each worker a different time; done after the meeting they would spread the
    constructions out, and a race between them would rarely happen. A module that fails to
    import fails again in the build, which reports it.
    """
    module_name = target.partition(":")[0]
    with contextlib.suppress(Exception):
        importlib.import_module(module_name)


def _bind_to_parent(parent: int) -> None:
    """Make this child lead a process group of its own and die with the process that spawned it.

    Linux kills it the moment its parent ends (``PR_SET_PDEATHSIG``), even when the parent
    was killed with SIGKILL or this child holds the GIL; elsewhere a thread watches the
    parent. A parent already gone by now ends the child at once.
    """
    with contextlib.suppress(OSError, AttributeError):  # no process groups on Windows
        os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(_ORPHANED)
    watched = multiprocessing.parent_process()
    sentinel = getattr(watched, "sentinel", None)
    if sentinel is not None:

        def watch_parent() -> None:
            wait([sentinel])
            os._exit(_ORPHANED)

        threading.Thread(target=watch_parent, name="tokcap-parent-watch", daemon=True).start()


async def _run(job: Job, built: Built, progress: Progress, meeting: Meeting) -> WorkerOutcome:
    try:
        return await job.run(built, progress, meeting)
    finally:
        for endpoint in (built.sink, built.source):
            if endpoint is not None:
                progress.call("close")
                await endpoint.close()


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
    """What one SPAWN worker builds and does: a sink, then its operations in order."""

    target: str
    kwargs: dict[str, Any] = field(repr=False)
    operations: tuple[Operation, ...] = ()
    entry_class: str = DEFAULT_ENTRY_CLASS
    """The class the worker builds each put's entry with, from the payload's fields."""

    def endpoints(self) -> tuple[Build, ...]:
        return (("sink", self.target, self.kwargs),)

    def calls(self) -> set[str]:
        return {"put" if op.kind == "put" else "mark_incomplete" for op in self.operations}

    async def run(self, built: Built, progress: Progress, meeting: Meeting) -> WorkerOutcome:
        """Run the operations; the first that raises ends the worker with its error and line."""
        total = len(self.operations)
        try:
            for number, operation in enumerate(self.operations, 1):
                where = f"operation {number} of {total}"
                if operation.kind == "put":
                    progress.call("put", where)
                    await built.sink.put(built.entry(**json.loads(operation.payload)))
                else:
                    progress.call("mark_incomplete", where)
                    await built.sink.mark_incomplete(operation.rollout_id, operation.model_call_id)
                progress.acked += 1
        except Exception as exc:
            frames = traceback.extract_tb(exc.__traceback__)
            where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
            return WorkerOutcome("operation", progress.acked, scrub(_failure(exc) + where))
        return WorkerOutcome("ok", progress.acked)


def run_workers(plans: list[WorkerPlan], *, together: bool = True) -> list[WorkerOutcome]:
    """Run each plan in its own spawned interpreter and return what each one reported.

    With ``together`` every worker constructs its sink only once all of them have started,
    so constructions race (SPAWN-2). Every call a worker makes has the deadline in force; a
    worker that overruns is killed and reported ``hung``.
    """
    jobs = [(f"spawned worker {number}", plan) for number, plan in enumerate(plans)]
    supervisor = Supervisor(jobs, build_together=together)
    supervisor.start()
    return supervisor.finish()


_MAIN_LOCK = threading.Lock()


@contextlib.contextmanager
def _salted_apart() -> Iterator[None]:
    """Start a spawned child with a string-hash salt of its own, as a server's workers have.

    A runner such as tox exports one ``PYTHONHASHSEED`` to every process it starts; workers
    that inherit it hash alike, which would hide state derived from ``hash()`` or from a set's
    order. Only the child's environment changes: the variable is restored once it started.
    """
    before = os.environ.get(_HASH_SEED)
    os.environ[_HASH_SEED] = "random"
    try:
        yield
    finally:
        if before is None:
            del os.environ[_HASH_SEED]
        else:
            os.environ[_HASH_SEED] = before


_HASH_SEED = "PYTHONHASHSEED"


@contextlib.contextmanager
def _main_module_left_behind() -> Iterator[None]:
    """Start a spawned child without the parent's ``__main__``.

    ``spawn`` runs the parent's main script again in every child, so a script that calls the
    kit without an ``if __name__ == "__main__"`` guard would run the kit again in each worker.
    The children need nothing from it: their job and the target are named by module.
    """
    with _MAIN_LOCK:
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            if main is not None:
                sys.modules["__main__"] = main
