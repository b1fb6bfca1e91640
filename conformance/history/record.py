"""Recording concurrent histories: lanes of operations in spawned interpreters and here.

Each lane is a list of planned actions run in order by one process. A spawned lane builds its
own sink and source from the target strings and kwargs alone, as a serving process does. Every
operation is logged as an :class:`Event` with its invocation and completion read from
``time.monotonic_ns()``, which is one clock for every process of a Linux machine, so events
from different lanes order in real time. A ``wait`` action holds a lane until the lanes
together have completed a number of writes, which places freezes in the middle of the writes
without sleeping.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any, Literal, TypeVar

from conformance.history.events import Event, Kind, Pair, digest
from conformance.reading import entry_view, read_snapshot
from conformance.secrecy import keep, scrub
from conformance.settings import DEFAULT_ENTRY_CLASS
from conformance.workers import STRAGGLE, Progress, Supervisor, breaker_check, constructor

__all__ = ["Action", "Lane", "Recorder", "Target", "Workload"]

T = TypeVar("T")


@dataclass(frozen=True)
class Action:
    """One planned step of a lane.

    ``put`` (``payload`` is the kit's canonical JSON of the entry's fields), ``mark``,
    ``freeze``, ``drop`` (with the pair of this lane's latest freeze of the rollout),
    ``retire`` (freeze then drop, up to ``count`` times until a drop returns True), ``wait``
    (until the lanes together have made ``count`` steps: completed writes and signals) or
    ``signal`` (count one step, so that a lane
    waiting for it starts at this instant).
    """

    kind: Literal["put", "mark", "freeze", "drop", "retire", "wait", "signal"]
    rollout_id: str = ""
    call_id: str = ""
    payload: bytes = b""
    count: int = 0


@dataclass(frozen=True)
class Lane:
    """The actions one spawned process runs, in order."""

    name: str
    actions: tuple[Action, ...]


@dataclass(frozen=True)
class Target:
    """What every lane builds: the sink and source targets with their kwargs."""

    sink: str
    sink_kwargs: dict[str, Any] = field(repr=False)
    source: str
    source_kwargs: dict[str, Any] = field(repr=False)
    entry_class: str = DEFAULT_ENTRY_CLASS
    """The class a lane builds each put's entry with, from the payload's fields."""


_OPERATION = {"put": "put", "mark": "mark_incomplete", "begin": "begin_call"}
_OPERATION.update(freeze="freeze", drop="drop")


@dataclass
class Recorder:
    """Runs operations on endpoints and logs each one as an :class:`Event` of one lane.

    Errors are logged as ``fail`` outcomes, never raised: the checker decides whether the
    contract allowed them. Their text is stripped of the run's secrets. In a spawned lane,
    ``progress`` tells the parent which call the lane is in.
    """

    lane: str
    events: list[Event] = field(default_factory=list)
    frozen: dict[str, Pair] = field(default_factory=dict)
    """The pair of this lane's latest successful freeze, per rollout."""
    progress: Progress | None = None

    async def _record(
        self, kind: Kind, rollout_id: str, call: Callable[[], Awaitable[T]], **fields: Any
    ) -> tuple[T | None, Event]:
        if self.progress is not None:
            self.progress.call(_OPERATION[kind], f"step {len(self.events) + 1} of {self.lane}")
        invoke = time.monotonic_ns()
        try:
            value: T | None = await call()
        except Exception as exc:
            value = None
            error = scrub(f"{type(exc).__name__}: {exc}")
            fields.update(outcome="fail", error=error[:200])
        complete = time.monotonic_ns()
        fields.setdefault("outcome", "ok")
        event = Event(self.lane, len(self.events), kind, rollout_id, invoke, complete, **fields)
        self.events.append(event)
        return value, event

    async def put(self, sink: Any, entry: Any) -> Event:
        view = entry_view(entry)
        _, event = await self._record(
            "put",
            view.rollout_id,
            lambda: sink.put(entry),
            call_id=view.model_call_id,
            digest=digest(view.payload),
        )
        return event

    async def mark(self, sink: Any, rollout_id: str, call_id: str) -> Event:
        call = lambda: sink.mark_incomplete(rollout_id, call_id)  # noqa: E731
        _, event = await self._record("mark", rollout_id, call, call_id=call_id)
        return event

    async def begin(self, sink: Any, rollout_id: str, call_id: str) -> Event:
        call = lambda: sink.begin_call(rollout_id, call_id)  # noqa: E731
        _, event = await self._record("begin", rollout_id, call, call_id=call_id)
        return event

    async def freeze(self, source: Any, rollout_id: str) -> Pair | None:
        """Freeze and log the snapshot; return its pair, or None when freeze raised."""
        value, event = await self._record("freeze", rollout_id, lambda: source.freeze(rollout_id))
        if event.outcome == "fail":
            return None
        snapshot = read_snapshot(value)
        pair = (snapshot.snapshot_id, snapshot.version)
        self.events[-1] = replace(
            event,
            entries=tuple(
                (entry.model_call_id, digest(entry.payload)) for entry in snapshot.entries
            ),
            incomplete=snapshot.incomplete,
            result=pair,
        )
        self.frozen[rollout_id] = pair
        return pair

    async def drop(self, source: Any, rollout_id: str, pair: Pair) -> bool | None:
        """Drop with ``pair`` and log it; return the bool, or None when drop raised."""
        call = lambda: source.drop(rollout_id, snapshot_id=pair[0], version=pair[1])  # noqa: E731
        value, event = await self._record("drop", rollout_id, call, pair=pair)
        if event.outcome == "fail":
            return None
        returned = value if isinstance(value, bool) else bool(value)
        self.events[-1] = replace(event, returned=returned)
        return returned

    async def retire(self, source: Any, rollout_id: str, attempts: int) -> None:
        """Freeze and drop until a drop returns True, at most ``attempts`` times."""
        for _ in range(max(1, attempts)):
            pair = await self.freeze(source, rollout_id)
            if pair is None or await self.drop(source, rollout_id, pair):
                return


def _lane_main(
    target: Target, lane: Lane, barrier: Any, steps: Any, ready: Any, conn: Connection
) -> None:
    from conformance.context import build_endpoint
    from conformance.entries import load_entry_class

    keep(target.sink_kwargs)
    keep(target.source_kwargs)
    progress = Progress(conn)
    kinds = {action.kind for action in lane.actions}
    try:
        build = load_entry_class(target.entry_class)
        sink = source = None
        if kinds & {"put", "mark"}:
            progress.call(constructor(target.sink))
            sink = build_endpoint(target.sink, target.sink_kwargs, "sink")
        if kinds & {"freeze", "drop", "retire"}:
            progress.call(constructor(target.source))
            source = build_endpoint(target.source, target.source_kwargs, "source")
    except Exception as exc:
        barrier.abort()
        error = scrub(f"{type(exc).__name__}: {exc}")
        progress.result(([], f"{lane.name} could not build its endpoints: {error}"))
        return
    progress.ready()
    try:
        barrier.wait(timeout=STRAGGLE)
    except Exception:
        progress.result(([], ""))  # Another lane failed to build and says so.
        return

    def advance() -> None:
        with ready:
            steps.value += 1
            ready.notify_all()

    async def run() -> list[Event]:
        recorder = Recorder(lane.name, progress=progress)
        try:
            for action in lane.actions:
                if action.kind == "wait":
                    progress.idle()
                    with ready:
                        goal = action.count
                        ready.wait_for(lambda: steps.value >= goal, STRAGGLE)  # noqa: B023
                elif action.kind == "signal":
                    advance()
                elif action.kind == "put":
                    await recorder.put(sink, build(**json.loads(action.payload)))
                    advance()
                elif action.kind == "mark":
                    await recorder.mark(sink, action.rollout_id, action.call_id)
                    advance()
                elif action.kind == "freeze":
                    await recorder.freeze(source, action.rollout_id)
                elif action.kind == "drop":
                    pair = recorder.frozen.get(action.rollout_id)
                    if pair is not None:
                        await recorder.drop(source, action.rollout_id, pair)
                else:
                    await recorder.retire(source, action.rollout_id, action.count)
        finally:
            for endpoint in (sink, source):
                if endpoint is not None:
                    progress.call("close")
                    await endpoint.close()
        return recorder.events

    try:
        progress.result((asyncio.run(run()), ""))
    except Exception as exc:
        with ready:
            # A lane that stops early must not leave the others waiting for its writes.
            steps.value = 2**62
            ready.notify_all()
        progress.result(([], scrub(f"{lane.name} stopped: {type(exc).__name__}: {exc}")))


_NEEDS: dict[str, tuple[str, ...]] = {"put": ("put",), "mark": ("mark_incomplete",)}
_NEEDS.update(freeze=("freeze",), drop=("drop",), retire=("freeze", "drop"))


class Workload:
    """Lanes running at once, each in its own spawned interpreter, watched together.

    :meth:`start` returns once every lane has built its endpoints; the lanes then run while
    this process does its own operations; :meth:`finish` collects every lane's events and
    every lane that failed to build, stopped, died or overran the deadline in force. The first
    lane that overruns or dies stops every other lane: the history is incomplete anyway.
    """

    def __init__(self, target: Target, lanes: list[Lane]) -> None:
        self.target = target
        self.lanes = lanes
        self._supervisor = Supervisor(on_problem=self._stop)
        context = self._supervisor.context
        self._barrier = context.Barrier(len(lanes) + 1)
        # No lock of its own: lanes change it under ``ready``, and a lane killed mid-update must
        # not leave a lock the parent's reads would wait on forever.
        self._steps = context.Value("q", 0, lock=False)
        self._ready = context.Condition()

    def _stop(self, supervisor: Supervisor) -> None:
        supervisor.stop_all("another lane overran or died")
        self._barrier.abort()

    def start(self) -> None:
        """Spawn every lane and wait until all of them have built their endpoints."""
        needs = {
            name for lane in self.lanes for a in lane.actions for name in _NEEDS.get(a.kind, ())
        }
        breaker_check(needs | {constructor(self.target.sink), constructor(self.target.source)})
        for lane in self.lanes:
            self._supervisor.spawn(
                lane.name, _lane_main, self.target, lane, self._barrier, self._steps, self._ready
            )
        children = self._supervisor.children
        self._supervisor.watch(until=lambda: all(child.ready or child.over for child in children))
        if all(child.ready for child in children):
            try:
                self._barrier.wait(timeout=STRAGGLE)
            except Exception:
                return  # A lane that failed to build reports why in finish().
        else:
            self._barrier.abort()

    def wait_for(self, writes: int) -> None:
        """Block until the lanes together have made ``writes`` steps (writes and signals).

        Returns at once when a lane failed to build, since then no lane runs, and as soon as
        every lane is over.
        """
        if self._barrier.broken:
            return
        self._supervisor.watch(until=lambda: self._steps.value >= writes)

    def finish(self) -> tuple[list[Event], list[str]]:
        """Wait for every lane; return all events and a line per lane that went wrong."""
        events: list[Event] = []
        problems: list[str] = []
        for child in self._supervisor.finish():
            lane_events, problem = child.result if child.reported else ([], child.problem)
            events.extend(lane_events)
            if problem:
                problems.append(problem)
        return events, problems
