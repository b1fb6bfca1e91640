"""Recording concurrent histories: lanes of operations in spawned interpreters and here.

Each lane is a list of planned actions run in order by one process. A spawned lane is a job
of the kit's spawned-worker harness (:mod:`conformance._workers`): it builds the sink and the
source its actions need from the target strings and kwargs alone, as a serving process does.
Every operation is logged as an :class:`Event` with its invocation and completion read from
``time.monotonic_ns()``, which is one clock for every process of a Linux machine, so events
from different lanes order in real time. A ``wait`` action holds a lane until the lanes
together have made a number of steps (writes and signals), which places freezes in the middle
of the writes without sleeping.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from conformance._history.events import Event, Kind, Pair, digest
from conformance._reading import entry_view, read_snapshot
from conformance._secrecy import scrub
from conformance._settings import DEFAULT_ENTRY_CLASS, KitSettings
from conformance._workers import Build, Built, Meeting, Progress, Supervisor, WorkerOutcome

__all__ = ["Action", "Lane", "LaneTargets", "Recorder", "Workload"]

T = TypeVar("T")


@dataclass(frozen=True)
class Action:
    """One planned step of a lane.

    ``put`` (``payload`` is the kit's canonical JSON of the entry's fields), ``mark``,
    ``freeze``, ``drop`` (with the pair of this lane's latest freeze of the rollout),
    ``retire`` (freeze then drop, up to ``count`` times until a drop returns True), ``wait``
    (until the lanes together have made ``count`` steps: completed writes and signals) or
    ``signal`` (count one step, so that a lane waiting for it starts at this instant).
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
class LaneTargets:
    """What the lanes build their endpoints from: the sink and source targets, their kwargs
    and the entry class."""

    sink: str
    sink_kwargs: dict[str, Any] = field(repr=False)
    source: str
    source_kwargs: dict[str, Any] = field(repr=False)
    entry_class: str = DEFAULT_ENTRY_CLASS
    """The class a lane builds each put's entry with, from the payload's fields."""

    @classmethod
    def of(cls, settings: KitSettings) -> LaneTargets:
        """The targets, kwargs and entry class a kit run judges."""
        return cls(
            settings.sink,
            dict(settings.sink_kwargs),
            settings.source,
            dict(settings.source_kwargs),
            settings.entry_class,
        )


_OPERATION = {"put": "put", "mark": "mark_incomplete", "begin": "begin_call"}
_OPERATION.update(freeze="freeze", drop="drop", retire="retire", delete="delete")


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

    async def retire_id(self, source: Any, rollout_id: str) -> Event:
        """``retire([rollout_id])``, the batch extension, logged."""
        _, event = await self._record("retire", rollout_id, lambda: source.retire([rollout_id]))
        return event

    async def delete_id(self, source: Any, rollout_id: str) -> Event:
        """``delete([rollout_id])``, the batch extension, logged."""
        _, event = await self._record("delete", rollout_id, lambda: source.delete([rollout_id]))
        return event

    async def retire(self, source: Any, rollout_id: str, attempts: int) -> None:
        """Freeze and drop until a drop returns True, at most ``attempts`` times."""
        for _ in range(max(1, attempts)):
            pair = await self.freeze(source, rollout_id)
            if pair is None or await self.drop(source, rollout_id, pair):
                return


_NEEDS: dict[str, tuple[str, ...]] = {"put": ("put",), "mark": ("mark_incomplete",)}
_NEEDS.update(freeze=("freeze",), drop=("drop",), retire=("freeze", "drop"))


@dataclass(frozen=True)
class _LaneJob:
    """One lane as a spawned child's job: it builds the endpoints its actions need."""

    lane: Lane
    targets: LaneTargets

    @property
    def entry_class(self) -> str:
        return self.targets.entry_class

    def endpoints(self) -> tuple[Build, ...]:
        kinds = {action.kind for action in self.lane.actions}
        targets, builds = self.targets, list[Build]()
        if kinds & {"put", "mark"}:
            builds.append(("sink", targets.sink, targets.sink_kwargs))
        if kinds & {"freeze", "drop", "retire"}:
            builds.append(("source", targets.source, targets.source_kwargs))
        return tuple(builds)

    def calls(self) -> set[str]:
        return {name for action in self.lane.actions for name in _NEEDS.get(action.kind, ())}

    async def run(self, built: Built, progress: Progress, meeting: Meeting) -> WorkerOutcome:
        recorder = Recorder(self.lane.name, progress=progress)
        sink, source = built.sink, built.source
        for action in self.lane.actions:
            if action.kind == "wait":
                progress.idle()
                meeting.reach(action.count)
            elif action.kind == "signal":
                meeting.advance()
            elif action.kind == "put":
                await recorder.put(sink, built.entry(**json.loads(action.payload)))
                meeting.advance()
            elif action.kind == "mark":
                await recorder.mark(sink, action.rollout_id, action.call_id)
                meeting.advance()
            elif action.kind == "freeze":
                await recorder.freeze(source, action.rollout_id)
            elif action.kind == "drop":
                pair = recorder.frozen.get(action.rollout_id)
                if pair is not None:
                    await recorder.drop(source, action.rollout_id, pair)
            else:
                await recorder.retire(source, action.rollout_id, action.count)
        return WorkerOutcome("ok", events=recorder.events)


class Workload:
    """Lanes running at once, each in its own spawned interpreter, watched together.

    :meth:`start` returns once every lane has built its endpoints; the lanes then run while
    this process does its own operations; :meth:`finish` collects every lane's events and
    every lane that failed to build, stopped, died or overran the deadline in force. The first
    lane that overruns or dies stops every other lane: the history is incomplete anyway.
    """

    def __init__(self, targets: LaneTargets, lanes: list[Lane]) -> None:
        self._supervisor = Supervisor(
            [(lane.name, _LaneJob(lane, targets)) for lane in lanes],
            start_together=True,
            stop_siblings="another lane overran or died",
        )

    def start(self) -> None:
        """Spawn every lane and wait until all of them have built their endpoints."""
        self._supervisor.start()

    def wait_for(self, writes: int) -> None:
        """Block until the lanes together have made ``writes`` steps (writes and signals).

        Returns at once when a lane failed to build, since then no lane runs, and as soon as
        every lane is over.
        """
        meeting = self._supervisor.meeting
        if meeting.broken:
            return
        self._supervisor.watch(until=lambda: meeting.steps >= writes)

    def signal(self) -> None:
        """Count one step from this process, so that lanes waiting for it go on."""
        self._supervisor.meeting.advance()

    def finish(self) -> tuple[list[Event], list[str]]:
        """Wait for every lane; return all events and a line per lane that went wrong."""
        outcomes = self._supervisor.finish()
        events = [event for outcome in outcomes for event in outcome.events]
        return events, [outcome.error for outcome in outcomes if outcome.error]
