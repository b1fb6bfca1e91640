"""COST: what the target costs the serving loop, held to the run's ``--tokcap-budget``.

Each check runs a serving-shaped workload of its own and is not claimed unless the
budget names a limit of its clause. Calls are measured by :mod:`conformance._costs`, as every
call the kit makes is; a call that errs fails the basic clause of its operation, never a COST
clause.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from typing import Any

from conformance import _steps as step
from conformance._budget import FREEZE_KEY, HOLD_KEYS, LATENCY_KEYS, shown
from conformance._costs import (
    Measured,
    Spans,
    heap_set_aside,
    payload_bytes,
    quantile,
    recording,
)
from conformance._kit import Kit
from conformance._registry import check
from conformance._violation import NotClaimed

_ROLLOUTS = 8
_TURNS = 14
"""Calls a served rollout makes, one after another; its rollouts run at once."""
_SMALL = (64, 16)
_LARGE = (8_192, 1_024)
"""Prompt and generated tokens of a long-context call while rollouts are served."""
_GROWING_TURNS = 20
_GROWING = (2_048, 512)
"""The last served rollout is one long conversation: each of its calls' prompts is this many
tokens longer than the one before, and each generates this many tokens. By its last call the
rollout holds about 1.6 MiB of token ids, so a store whose put re-reads or rewrites the whole
rollout holds the loop longer at every turn, as it would in serving."""
_FREEZE_ENTRIES = 32
_FREEZE_GROWTH = (2_048, 1_024)
"""COST-3's rollout is one long conversation: each call's prompt is this many tokens longer
than the one before (the last, 65,536, is NeMo Gym's longest), and each generates this many
tokens. It holds about 7 MiB of token payload, where a read whose cost grows with the square
of the log's size shows plainly."""
_FREEZES = 3


def _limits(kit: Kit, keys: Iterable[str]) -> dict[str, float]:
    keys = tuple(keys)
    limits = {key: kit.settings.budget[key] for key in keys if key in kit.settings.budget}
    if not limits:
        named = ", ".join(keys)
        raise NotClaimed(
            f"no budget for {kit.clause}: pass --tokcap-budget with one of {named} (or default)"
        )
    return limits


def _turns(kit: Kit, rollout: str, number: int) -> list[Any]:
    """A rollout's calls: small ones, and two long-context ones at turns that differ by rollout,
    so that the rollouts' long calls meet only now and then, as they do in serving. The last
    rollout is a growing conversation instead."""
    if number == _ROLLOUTS - 1:
        return [
            kit.entries.entry(
                rollout,
                f"call-{turn}",
                prompt_len=(turn + 1) * _GROWING[0],
                generation_len=_GROWING[1],
            )
            for turn in range(_GROWING_TURNS)
        ]
    long_turns = {3 + number % 5, 9 + number % 4}
    return [
        kit.entries.entry(
            rollout,
            f"call-{turn}",
            prompt_len=(_LARGE if turn in long_turns else _SMALL)[0],
            generation_len=(_LARGE if turn in long_turns else _SMALL)[1],
        )
        for turn in range(_TURNS)
    ]


_MARKED = 2
_PLANNED = {
    "put": (_ROLLOUTS - 1) * _TURNS + _GROWING_TURNS,
    "mark_incomplete": _MARKED,
    "freeze": 2 * _ROLLOUTS,
    "drop": _ROLLOUTS,
}
"""The calls of each operation :func:`_serve` makes when it serves every rollout to the end."""

Settled = Callable[[list[float]], bool]
"""Whether the holds of the calls made so far already decide a COST clause, whatever the rest
show."""


def _serve(kit: Kit, settled: Settled = lambda holds: False) -> list[Measured]:
    """Serve a few rollouts at once, each putting its calls one after another (small ones and
    long-context ones), two of them marked; then freeze, freeze again and drop each rollout.
    Return every call as measured, each concurrent call on its own.

    The rollouts stop calling once ``settled`` says the verdict is certain: a store whose cost
    grows with what it holds would otherwise take minutes to serve what is left.
    """
    sink, source = kit.sink(), kit.source()
    rollouts = [kit.rollout_id(f"serve{n}") for n in range(_ROLLOUTS)]
    # Built before the rollouts start: building an entry is the kit's work, not the target's.
    turns = [_turns(kit, rollout, number) for number, rollout in enumerate(rollouts)]
    spans = Spans(kit.check_id)

    async def serve(rollout: str, entries: list[Any], marked: bool) -> tuple[str, Any] | None:
        operation = "put"
        try:
            for entry in entries:
                if settled(spans.holds()):
                    return None
                await spans.call("put", sink.raw.put(entry))
            if marked and not settled(spans.holds()):
                operation = "mark_incomplete"
                await spans.call("mark_incomplete", sink.raw.mark_incomplete(rollout, "call-0"))
        except Exception as error:
            return operation, error
        return None

    with heap_set_aside(), recording() as calls:
        lives = [
            serve(rollout, entries, number < _MARKED)
            for number, (rollout, entries) in enumerate(zip(rollouts, turns, strict=True))
        ]
        for ended in kit.serve(spans, *lives, calls=("put", "mark_incomplete")):
            if ended is None:
                continue
            operation, error = ended if isinstance(ended, tuple) else ("put", ended)
            kit.fail(
                clause="PUT-1" if operation == "put" else "MASK-1",
                expected=f"every {operation} of rollouts served at once to be acked",
                observed=kit.redact(f"{type(error).__name__}: {error}"),
                hint=f"the contract allows no error for a valid {operation}",
            )
        for rollout in rollouts:
            step.freeze(kit, source, rollout, clause="FREEZE-1")
            view = step.freeze(kit, source, rollout, clause="FREEZE-1")
            step.drop(kit, source, rollout, view.snapshot_id, view.version, clause="DROP-1")
    return [call for call in calls if call.where == kit.check_id]


def _padded(values: list[float], planned: int) -> list[float]:
    """``values`` with a zero for each call not made yet: the least the rest could show."""
    return values + [0.0] * max(0, planned - len(values))


def _holds_settled(limits: dict[str, float]) -> Settled:
    planned = sum(_PLANNED.values())

    def settled(holds: list[float]) -> bool:
        measured = {
            "loop-hold": quantile(_padded(holds, planned), 0.99),
            "loop-hold-max": max(holds, default=0.0),
        }
        return any(measured[key] > limit for key, limit in limits.items())

    return settled


def _worst(calls: list[Measured], value: str) -> Measured:
    return max(calls, key=lambda call: getattr(call, value))


@check("COST-1", "loop-hold")
def loop_hold(kit: Kit) -> None:
    """No call of a serving-shaped workload holds the event loop beyond the budget."""
    limits = _limits(kit, HOLD_KEYS)
    calls = _serve(kit, _holds_settled(limits))
    holds = [call.hold for call in calls]
    measured = {"loop-hold": quantile(holds, 0.99), "loop-hold-max": max(holds)}
    worst = _worst(calls, "hold")
    for key, limit in limits.items():
        if measured[key] > limit:
            what = "p99" if key == "loop-hold" else "longest"
            kit.fail(
                expected=f"the {what} event-loop hold of {len(calls)} calls within "
                f"{shown({key: limit})}",
                observed=f"{what} {measured[key] * 1e3:.1f} ms; the longest, "
                f"{worst.hold * 1e3:.1f} ms, in a call of {worst.operation}",
                hint="move blocking disk or network work off the loop (asyncio.to_thread, an "
                "executor, or an async client); never call fsync or a blocking client inside "
                "a coroutine",
            )


@check("COST-2", "latency")
def latency(kit: Kit) -> None:
    """Each operation of a serving-shaped workload answers within its latency budget."""
    limits = _limits(kit, LATENCY_KEYS)
    calls = _serve(kit)
    for key, limit in limits.items():
        operation, _, statistic = key.rpartition("-")
        timed = [call for call in calls if call.operation == operation]
        if not timed:
            continue
        seconds = [call.seconds for call in timed]
        q = {"p50": 0.5, "p99": 0.99, "max": 1.0}[statistic]
        value = quantile(seconds, q)
        if value > limit:
            kit.fail(
                expected=f"{statistic} latency of {len(timed)} calls of {operation} within "
                f"{shown({key: limit})}",
                observed=f"{statistic} {value * 1e3:.1f} ms, the slowest "
                f"{max(seconds) * 1e3:.1f} ms, the fastest {min(seconds) * 1e3:.1f} ms",
                hint=f"find what each {operation} waits for: a per-call acknowledgement or sync "
                "that could be batched, a lock held across I/O",
            )


@check("COST-3", "freeze-per-mib")
def freeze_per_mib(kit: Kit) -> None:
    """Freezing a rollout of long-context entries costs at most the budget per MiB."""
    limit = _limits(kit, (FREEZE_KEY,))[FREEZE_KEY]
    sink = kit.sink()
    rollout = kit.rollout_id("large")
    for number in range(_FREEZE_ENTRIES):
        entry = kit.entries.entry(
            rollout,
            f"call-{number}",
            prompt_len=(number + 1) * _FREEZE_GROWTH[0],
            generation_len=_FREEZE_GROWTH[1],
        )
        step.put(kit, sink, entry, clause="PUT-1")
    source = kit.source()
    with heap_set_aside(), recording() as calls:
        views = [step.freeze(kit, source, rollout, clause="FREEZE-1") for _ in range(_FREEZES)]
    seconds = [call.seconds for call in calls if call.operation == "freeze"]
    size = payload_bytes(views[-1].raw)
    if not seconds or not size:
        return  # a freeze the meter cannot read is FREEZE-1's, judged by its own checks
    mib = size / 2**20
    per_mib = statistics.median(seconds) / mib
    if per_mib > limit:
        kit.fail(
            expected=f"a freeze of {mib:.2f} MiB of token payload within "
            f"{shown({FREEZE_KEY: limit})} per MiB",
            observed=f"{per_mib * 1e3:.1f} ms per MiB (median of {len(seconds)} freezes: "
            f"{statistics.median(seconds) * 1e3:.1f} ms)",
            hint="read a rollout's records in one pass and build the snapshot once; avoid a round "
            "trip or a re-parse per entry",
        )
