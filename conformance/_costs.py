"""What the judged target costs the serving loop, measured while the checks run.

Every call a check makes into the target on its event loop is timed, and a heartbeat runs on
that loop beside it: a timer due every millisecond that notes how late it fires, the way the
benchmarks measure lag. How long the longest such wait lasted is how long the call held the
loop from every other rollout the worker serves. A freeze of at least
:data:`LARGE_FREEZE_BYTES` of token payload also counts toward the freeze cost per MiB.

Measuring adds no call to the target. The samples of the calls made since the last
:func:`take` are handed to whoever gathers them (the pytest wing per test, across xdist
workers; :func:`conformance.run_conformance` once per run) and added up in a
:class:`CostLedger`. Spawned workers' calls are not measured: their loops are their own.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import statistics
import threading
import time
from collections.abc import Awaitable, Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = [
    "LARGE_FREEZE_BYTES",
    "MEASURED",
    "PERIOD",
    "REFERENCE",
    "Beat",
    "CostLedger",
    "Measured",
    "Spans",
    "heap_set_aside",
    "payload_bytes",
    "quantile",
    "recording",
    "run_measured",
    "run_spans",
    "take",
]

T = TypeVar("T")

MEASURED = ("put", "mark_incomplete", "freeze", "drop", "begin_call", "retire", "delete")
"""The operations whose latency is reported, in the order a report lists them."""
PERIOD = 0.001
"""The heartbeat's period (seconds): holds shorter than this are not seen."""
LARGE_FREEZE_BYTES = 16 * 1024
"""A freeze counts toward the cost per MiB when its token payload is at least this large, so
that a freeze's fixed cost does not pass for a cost per byte."""
_LARGE_TOKENS = LARGE_FREEZE_BYTES // 16
"""Below this many token values a payload cannot reach :data:`LARGE_FREEZE_BYTES` (no token
id or log prob takes 16 characters of JSON), so it is not measured at all."""

REFERENCE: Mapping[str, Any] = {
    "target": "reference:FileTokenStore",
    "source": "docs/performance.md (2026-12-04, 2 cores, load 2.0 to 2.5)",
    "loop_hold_p99_ms": 1.99,
    "put_small_p50_ms": 0.464,
    "put_large_p50_ms": 1.104,
    "freeze_ms_per_mib": 7.0,
}
"""The reference file store's documented figures, shown beside the target's."""

_TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")


class Beat:
    """A heartbeat on ``loop`` from now until :meth:`stop`: the longest the loop was held.

    The first beat is due at once, so a call that does blocking work before its first await
    shows it; each later beat is due :data:`PERIOD` after the one before.
    """

    __slots__ = ("_expected", "_handle", "_last", "_loop", "worst")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._last = time.perf_counter()
        self._expected = 0.0
        self.worst = 0.0
        self._handle: asyncio.Handle = loop.call_soon(self._tick)

    def _tick(self) -> None:
        now = time.perf_counter()
        late = now - self._last - self._expected
        if late > self.worst:
            self.worst = late
        self._last, self._expected = now, PERIOD
        self._handle = self._loop.call_later(PERIOD, self._tick)

    def stop(self) -> float:
        """Stop beating; return the longest hold (seconds), the one still going included."""
        self._handle.cancel()
        late = time.perf_counter() - self._last - self._expected
        return max(self.worst, late, 0.0)


@dataclass
class _Samples:
    latency: dict[str, list[float]] = field(default_factory=dict)
    holds: list[tuple[float, str, str]] = field(default_factory=list)
    freezes: list[tuple[float, int]] = field(default_factory=list)


_lock = threading.Lock()
_untaken = _Samples()
_local = threading.local()


@dataclass(frozen=True)
class Measured:
    """One call as :func:`recording` saw it."""

    operation: str
    seconds: float
    hold: float
    where: str


@contextmanager
def recording() -> Iterator[list[Measured]]:
    """Also collect, into the list this yields, every call this thread measures meanwhile."""
    calls: list[Measured] = []
    previous = getattr(_local, "calls", None)
    _local.calls = calls
    try:
        yield calls
    finally:
        _local.calls = previous


@contextmanager
def heap_set_aside() -> Iterator[None]:
    """Collect garbage, then keep every object alive now out of the collector's passes until
    the block ends.

    A pass of the cyclic collector scans every tracked object of the process, and most of
    them are the kit's own (its checks, Hypothesis, pytest): a pass that a target's
    allocations happen to trigger would charge the target with scanning them. Set aside,
    they cost nothing; what the target allocates meanwhile is still collected.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run_measured(
    loop: asyncio.AbstractEventLoop, awaitable: Awaitable[T], operation: str, where: str
) -> T:
    """Run ``awaitable`` to completion on ``loop``, timing it as a call of ``operation`` (an
    operation of :data:`MEASURED`, or any label for a hold alone) made by check ``where``."""
    __tracebackhide__ = True
    holds: list[float] = []

    async def beside() -> T:
        beat = Beat(loop)
        try:
            return await awaitable
        finally:
            holds.append(beat.stop())

    started = time.perf_counter()
    result = loop.run_until_complete(beside())
    seconds = time.perf_counter() - started
    large = payload_bytes(result) if operation == "freeze" else 0
    _note(Measured(operation, seconds, holds[0] if holds else 0.0, where), held=bool(holds))
    if large:
        with _lock:
            _untaken.freezes.append((seconds, large))
    return result


@dataclass
class Spans:
    """Calls made at once on one loop (see :func:`run_spans`): each one's operation, span and
    steps."""

    where: str
    made: list[tuple[str, float, float, list[tuple[float, float]]]] = field(default_factory=list)

    async def call(self, operation: str, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable``, a call of ``operation``; note its span and steps if it returns."""
        stepped = _Stepped(awaitable)
        started = time.perf_counter()
        result = await stepped
        self.made.append((operation, started, time.perf_counter(), stepped.steps))
        return result

    def holds(self) -> list[float]:
        """Each call's hold so far: its own longest step."""
        return [max((end - begin for begin, end in made[3]), default=0.0) for made in self.made]

    def measured(self) -> list[Measured]:
        """Each call's latency, less the time other calls' steps held the loop meanwhile, and
        its hold, its own longest step.

        A call that holds the loop delays every call then in flight; that delay is the holding
        call's cost, judged as a hold, not the latency of the calls it delayed.
        """
        steps = [(number, step) for number, made in enumerate(self.made) for step in made[3]]
        calls = []
        holds = self.holds()
        for number, (operation, started, ended, _) in enumerate(self.made):
            delayed = sum(
                max(0.0, min(end, ended) - max(begin, started))
                for other, (begin, end) in steps
                if other != number
            )
            calls.append(Measured(operation, ended - started - delayed, holds[number], self.where))
        return calls


class _Stepped(Generic[T]):
    """Drives an awaitable step by step, as ``await`` would, noting when each step ran.

    A step is a stretch of the call's own code between two of its suspensions: for as long
    as it runs, it holds the loop.
    """

    __slots__ = ("_awaitable", "steps")

    def __init__(self, awaitable: Awaitable[T]) -> None:
        self._awaitable = awaitable
        self.steps: list[tuple[float, float]] = []

    def __await__(self) -> Generator[Any, Any, T]:
        steps = self._awaitable.__await__()
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = steps.send(sent) if thrown is None else steps.throw(thrown)
            except StopIteration as done:
                self.steps.append((started, time.perf_counter()))
                value: T = done.value
                return value
            except BaseException:
                self.steps.append((started, time.perf_counter()))
                raise
            self.steps.append((started, time.perf_counter()))
            try:
                sent, thrown = (yield yielded), None
            except BaseException as error:  # a cancellation, passed on to the call
                sent, thrown = None, error


def run_spans(
    loop: asyncio.AbstractEventLoop, awaitable: Awaitable[T], spans: Spans, label: str
) -> T:
    """Run ``awaitable``, which makes its calls through ``spans``, and note each call as
    :meth:`Spans.measured` has it.

    How long the loop was held meanwhile, by anything, is noted as one more hold, under
    ``label``, so that work a store does on the loop outside its calls is seen too.
    """
    __tracebackhide__ = True
    try:
        return run_measured(loop, awaitable, label, spans.where)
    finally:
        for call in spans.measured():
            _note(call, held=True)


def _note(call: Measured, *, held: bool) -> None:
    recorded = getattr(_local, "calls", None)
    if recorded is not None:
        recorded.append(call)
    with _lock:
        if call.operation in MEASURED:
            _untaken.latency.setdefault(call.operation, []).append(call.seconds)
        if held:
            _untaken.holds.append((call.hold, call.operation, call.where))


def payload_bytes(snapshot: Any) -> int:
    """The JSON size of a snapshot's token lists when it is at least
    :data:`LARGE_FREEZE_BYTES`, else 0 (small, or not a snapshot the kit can read)."""
    try:
        entries = list(getattr(snapshot, "entries", None) or ())
        lists = [_token_list(entry, name) for entry in entries for name in _TOKEN_FIELDS]
        if sum(len(values) for values in lists) < _LARGE_TOKENS:
            return 0
        size = sum(len(json.dumps(values)) for values in lists)
    except Exception:  # a malformed snapshot is the checks' to judge, not the meter's
        return 0
    return size if size >= LARGE_FREEZE_BYTES else 0


def _token_list(entry: Any, name: str) -> list[Any]:
    found = entry.get(name) if isinstance(entry, Mapping) else getattr(entry, name, None)
    return list(found) if isinstance(found, list | tuple) else []


def take() -> dict[str, Any]:
    """The samples measured since the last call, as plain JSON values; empty when none."""
    global _untaken
    with _lock:
        taken, _untaken = _untaken, _Samples()
    if not (taken.latency or taken.holds or taken.freezes):
        return {}
    return {
        "latency": taken.latency,
        "holds": [list(hold) for hold in taken.holds],
        "freezes": [list(freeze) for freeze in taken.freezes],
    }


def quantile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile of ``values`` by nearest rank: p99 of 100 values is the second
    largest, of 99 or fewer the largest."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[max(0, math.ceil(len(ordered) * q) - 1)]


@dataclass
class CostLedger:
    """Every cost sample of a run, added up from what :func:`take` handed over."""

    samples: _Samples = field(default_factory=_Samples)

    def add(self, taken: Mapping[str, Any]) -> None:
        """Add what :func:`take` returned (in this process or another)."""
        for operation, seconds in dict(taken.get("latency") or {}).items():
            self.samples.latency.setdefault(str(operation), []).extend(map(float, seconds))
        for seconds, operation, where in taken.get("holds") or ():
            self.samples.holds.append((float(seconds), str(operation), str(where)))
        for seconds, size in taken.get("freezes") or ():
            self.samples.freezes.append((float(seconds), int(size)))

    def as_json(self) -> dict[str, Any]:
        """The report's ``costs``: latency per operation, loop holds, freeze cost per MiB."""
        calls = {
            operation: _spread(self.samples.latency[operation])
            for operation in MEASURED
            if self.samples.latency.get(operation)
        }
        holds = self.samples.holds
        loop_hold: dict[str, Any] = {"calls": len(holds)}
        if holds:
            loop_hold.update(_spread([seconds for seconds, _, _ in holds]))
            worst = max(holds)
            loop_hold["worst_operation"], loop_hold["worst_check"] = worst[1], worst[2]
        freezes = self.samples.freezes
        mib = sum(size for _, size in freezes) / 2**20
        freeze: dict[str, Any] = {"large_freezes": len(freezes), "mib": round(mib, 3)}
        if freezes:
            freeze["ms_per_mib"] = round(sum(s for s, _ in freezes) * 1e3 / mib, 2)
        return {
            "measured": "calls made on the checks' event loops in the kit's own processes; "
            "spawned workers apart",
            "calls": calls,
            "loop_hold": loop_hold,
            "freeze": freeze,
            "reference": dict(REFERENCE),
        }

    def as_markdown(self) -> list[str]:
        """A short table of the costs, with the reference file store's documented figures."""
        data = self.as_json()
        if not data["calls"] and not data["loop_hold"]["calls"]:
            return []
        lines = [
            "| cost | calls | p50 ms | p99 ms | max ms |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for operation, spread in data["calls"].items():
            lines.append(f"| `{operation}` latency | {_row(spread)} |")
        hold = data["loop_hold"]
        if hold["calls"]:
            lines.append(f"| event-loop hold | {_row(hold)} |")
        freeze = data["freeze"]
        if "ms_per_mib" in freeze:
            lines.append(
                f"| freeze, ms per MiB | {freeze['large_freezes']} | {freeze['ms_per_mib']} | | |"
            )
        reference = data["reference"]
        lines += [
            "",
            f"For comparison, `{reference['target']}` ({reference['source']}): loop hold p99 "
            f"{reference['loop_hold_p99_ms']} ms, put p50 {reference['put_small_p50_ms']} ms "
            f"small and {reference['put_large_p50_ms']} ms large, freeze "
            f"{reference['freeze_ms_per_mib']} ms per MiB.",
        ]
        return lines

    def as_lines(self) -> list[str]:
        """The costs as a few aligned lines for the terminal summary."""
        data = self.as_json()
        lines = []
        rows = [(f"{operation} latency", spread) for operation, spread in data["calls"].items()]
        if data["loop_hold"]["calls"]:
            rows.append(("event-loop hold", data["loop_hold"]))
        for what, spread in rows:
            lines.append(
                f"  {what:<24} {spread.get('count', spread.get('calls')):>6} calls  p50 "
                f"{spread['p50_ms']:>8.3f} ms  p99 {spread['p99_ms']:>8.3f} ms  max "
                f"{spread['max_ms']:>8.3f} ms"
            )
        freeze = data["freeze"]
        if "ms_per_mib" in freeze:
            lines.append(
                f"  {'freeze per MiB':<24} {freeze['large_freezes']:>6} large  "
                f"{freeze['ms_per_mib']} ms per MiB"
            )
        if lines:
            reference = data["reference"]
            lines.append(
                f"  for comparison, {reference['target']}: loop hold p99 "
                f"{reference['loop_hold_p99_ms']} ms, freeze {reference['freeze_ms_per_mib']} "
                f"ms per MiB ({reference['source']})"
            )
        return lines


def _spread(seconds: list[float]) -> dict[str, Any]:
    return {
        "count": len(seconds),
        "p50_ms": round(statistics.median(seconds) * 1e3, 3),
        "p99_ms": round(quantile(seconds, 0.99) * 1e3, 3),
        "max_ms": round(max(seconds) * 1e3, 3),
    }


def _row(spread: Mapping[str, Any]) -> str:
    count = spread.get("count", spread.get("calls"))
    return f"{count} | {spread['p50_ms']} | {spread['p99_ms']} | {spread['max_ms']}"
