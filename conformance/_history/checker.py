"""Judging a concurrent history against the sequential model: ok, illegal or unknown.

Rollouts are independent (PUT-5), so each rollout's operations are judged on their own. For
each, two readers run:

- direct detectors, each a sufficient condition for illegality read straight off the history,
  that name the anomaly and keep a witness of one to four operations: ``refused``,
  ``duplicate``, ``phantom``, ``torn``, ``lost-ack``, ``version-stuck`` and ``split-freeze``;
- a linearizability search (Wing and Gong, with Lowe's memoization as in porcupine) that looks
  for an order of the operations, consistent with real time, that the model accepts.

The verdict is ``illegal`` when a detector fires or the search proves no order exists,
``unknown`` when the search ran out of budget, and ``ok`` otherwise.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from conformance._history.events import Event
from conformance._history.model import ModelRollout, Refusal, Rules, init, step

__all__ = ["Anomaly", "Verdict", "check_history"]

ANOMALIES = ("lost-ack", "phantom", "torn", "duplicate", "split-freeze", "version-stuck", "refused")
DEFAULT_BUDGET = 200_000
"""Model steps the search may take per rollout before the verdict is unknown."""


@dataclass(frozen=True)
class Anomaly:
    """One way the history breaks the contract, with the fewest operations that show it."""

    name: str
    clause: str
    rollout_id: str
    reason: str
    witness: tuple[Event, ...]

    def describe(self, *, clause: bool = True) -> str:
        """Return the anomaly and its witness, one operation per line.

        ``clause=False`` leaves out the clause the anomaly breaks in one process, for a
        verdict that blames another clause (a concurrency check blames its own).
        """
        named = f" ({self.clause})" if clause else ""
        lines = [f"{self.name}{named} on {self.rollout_id}: {self.reason}"]
        lines += [f"    {event.describe()}" for event in self.witness]
        return "\n".join(lines)


@dataclass(frozen=True)
class Verdict:
    """``ok``, ``illegal`` (with anomalies) or ``unknown`` (the search gave up)."""

    outcome: Literal["ok", "illegal", "unknown"]
    anomalies: tuple[Anomaly, ...] = ()
    note: str = ""

    @property
    def names(self) -> list[str]:
        """The distinct anomaly names found, in the catalog's order."""
        found = {anomaly.name for anomaly in self.anomalies}
        return [name for name in ANOMALIES if name in found]


def check_history(
    events: Iterable[Event], rules: Rules, *, budget: int = DEFAULT_BUDGET
) -> Verdict:
    """Judge every rollout of a history; illegal wins over unknown, unknown over ok."""
    by_rollout: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        by_rollout[event.rollout_id].append(event)
    anomalies: list[Anomaly] = []
    unknown: list[str] = []
    for rollout_id, own in sorted(by_rollout.items()):
        own.sort(key=lambda event: (event.invoke, event.lane, event.index))
        found = detect(own)
        if found:
            anomalies.extend(found)
            continue
        legal, anomaly = _search(rollout_id, own, rules, budget)
        if legal is None:
            unknown.append(rollout_id)
        elif not legal:
            assert anomaly is not None
            anomalies.append(anomaly)
    if anomalies:
        return Verdict("illegal", tuple(anomalies))
    if unknown:
        return Verdict("unknown", note=f"search budget exhausted on {', '.join(unknown[:3])}")
    return Verdict("ok")


def detect(events: list[Event]) -> list[Anomaly]:
    """Return every anomaly the direct detectors find in one rollout's operations."""
    found: list[Anomaly] = []
    detectors = (_refusals, _duplicates, _phantoms_and_torn, _lost_acks, _stuck_versions, _splits)
    for detector in detectors:
        found.extend(detector(events))
    return found


def _freezes(events: list[Event]) -> list[Event]:
    return [e for e in events if e.kind == "freeze" and e.outcome == "ok" and e.result is not None]


def _writes(events: list[Event]) -> list[Event]:
    return [e for e in events if e.kind in ("put", "mark", "begin")]


def _retiring(events: list[Event]) -> list[Event]:
    """Drops that returned True or may have: after one, the records may be gone."""
    return [
        e
        for e in events
        if e.kind == "drop" and (e.outcome == "unknown" or (e.outcome == "ok" and e.returned))
    ]


def _after_a_drop(event: Event, retiring: list[Event]) -> bool:
    return any(drop.invoke <= event.ends for drop in retiring)


def _refusals(events: list[Event]) -> list[Anomaly]:
    """A freeze or drop may raise only once the rollout may have been dropped."""
    retiring = _retiring(events)
    for event in events:
        raised = event.kind in ("freeze", "drop") and event.outcome == "fail"
        if raised and not _after_a_drop(event, retiring):
            written = any(w.invoke <= event.ends for w in _writes(events))
            clause = "DROP-2" if event.kind == "drop" else "FREEZE-5" if written else "FREEZE-4"
            reason = f"{event.kind} raised on a rollout nobody dropped"
            return [Anomaly("refused", clause, event.rollout_id, reason, (event,))]
    return []


def _duplicates(events: list[Event]) -> list[Anomaly]:
    for freeze in _freezes(events):
        calls = [call for call, _ in freeze.entries]
        twice = sorted({call for call in calls if calls.count(call) > 1})
        if twice:
            reason = f"the snapshot lists call {twice[0]!r} more than once"
            return [Anomaly("duplicate", "FREEZE-3", freeze.rollout_id, reason, (freeze,))]
    return []


def _phantoms_and_torn(events: list[Event]) -> list[Anomaly]:
    puts = [e for e in events if e.kind == "put"]
    for freeze in _freezes(events):
        for call, digest in freeze.entries:
            tried = [p for p in puts if p.call_id == call and p.invoke <= freeze.ends]
            if not tried:
                reason = f"the snapshot holds call {call!r}, which nobody put into this rollout"
                return [Anomaly("phantom", "FREEZE-5", freeze.rollout_id, reason, (freeze,))]
            if all(p.digest != digest for p in tried):
                reason = f"call {call!r} froze with bytes [{digest[:8]}] no put carried"
                return [Anomaly("torn", "FREEZE-5", freeze.rollout_id, reason, (tried[0], freeze))]
    return []


def _lost_acks(events: list[Event]) -> list[Anomaly]:
    retiring = _retiring(events)
    acked = [e for e in _writes(events) if e.outcome == "ok" and e.kind != "begin"]
    freezes = _freezes(events)
    for freeze in freezes:
        if _after_a_drop(freeze, retiring):
            continue
        calls = {call for call, _ in freeze.entries}
        for write in acked:
            if not write.precedes(freeze):
                continue
            if write.kind == "put" and write.call_id not in calls:
                reason = f"put of call {write.call_id!r} was acked before a freeze that lacks it"
                # Acked once the rollout was frozen: a relaxed fence must keep it (FENCE-1).
                late = any(f.precedes(write) for f in freezes if f.outcome == "ok")
                clause = "FENCE-1" if late else "FREEZE-5"
                return [Anomaly("lost-ack", clause, write.rollout_id, reason, (write, freeze))]
            if write.kind == "mark" and not freeze.incomplete:
                reason = "mark_incomplete was acked before a freeze that says incomplete=False"
                clause = "MASK-2" if _cleared(write, freeze, events) else "MASK-1"
                return [Anomaly("lost-ack", clause, write.rollout_id, reason, (write, freeze))]
    if len(retiring) != 1 or retiring[0].outcome != "ok":
        return []
    drop = retiring[0]
    minted = [f for f in freezes if f.result == drop.pair and not _after_a_drop(f, retiring)]
    if not minted:
        return []
    frozen = minted[0]
    calls = {call for call, _ in frozen.entries}
    for write in acked:
        if write.kind == "put" and write.call_id not in calls and frozen.precedes(write):
            reason = (
                f"put of call {write.call_id!r} was acked after the freeze returned, yet the "
                "snapshot without it was dropped: the put must raise or move the version"
            )
            return [Anomaly("lost-ack", "FENCE-1", drop.rollout_id, reason, (write, frozen, drop))]
        if write.kind == "put" and write.call_id not in calls:
            reason = (
                f"put of call {write.call_id!r} was acked, yet the snapshot without it was "
                "dropped: before the freeze it belongs in the snapshot, after it the version "
                "must move (or the put raise), after the drop the put must raise"
            )
            return [Anomaly("lost-ack", "FREEZE-5", drop.rollout_id, reason, (write, frozen, drop))]
        if write.kind != "mark" or frozen.incomplete:
            continue
        if write.precedes(drop):
            reason = "mark_incomplete was acked before the drop, yet the clean snapshot dropped"
            return [
                Anomaly("version-stuck", "DROP-4", drop.rollout_id, reason, (write, frozen, drop))
            ]
        for later in freezes:
            if write.precedes(later) and drop.precedes(later) and not later.incomplete:
                reason = (
                    "mark_incomplete was acked and the clean snapshot dropped, yet the next "
                    "freeze says incomplete=False: the mark was lost"
                )
                witness = (write, frozen, drop, later)
                return [Anomaly("lost-ack", "MASK-1", drop.rollout_id, reason, witness)]
    return []


def _cleared(mark: Event, freeze: Event, events: list[Event]) -> bool:
    """Whether the mark was seen, or other writes came, before the clean freeze (MASK-2)."""
    between = [
        e
        for e in events
        if e is not mark and e.outcome == "ok" and mark.precedes(e) and e.precedes(freeze)
    ]
    return any(e.kind == "freeze" and e.incomplete for e in between) or any(
        e.kind in ("put", "mark") for e in between
    )


def _state_of(freeze: Event) -> tuple[frozenset[tuple[str, str]], bool]:
    return frozenset(freeze.entries), freeze.incomplete


def _stuck_versions(events: list[Event]) -> list[Anomaly]:
    retiring = _retiring(events)
    live = [f for f in _freezes(events) if not _after_a_drop(f, retiring)]
    for first in live:
        for second in live:
            if first.result == second.result and _state_of(first) != _state_of(second):
                reason = f"one pair {first.result} named two different states of the rollout"
                anomaly = Anomaly(
                    "version-stuck", "DROP-4", first.rollout_id, reason, (first, second)
                )
                return [anomaly]
    return []


def _splits(events: list[Event]) -> list[Anomaly]:
    retiring = _retiring(events)
    live = [f for f in _freezes(events) if not _after_a_drop(f, retiring)]
    writes = _writes(events)
    for first in live:
        for second in live:
            if first.result == second.result or _state_of(first) != _state_of(second):
                continue
            start, end = min(first.invoke, second.invoke), max(first.ends, second.ends)
            if any(write.invoke <= end and write.ends >= start for write in writes):
                continue
            reason = (
                f"with no write in between, one state froze as {first.result} and as "
                f"{second.result}"
            )
            return [Anomaly("split-freeze", "FREEZE-2", first.rollout_id, reason, (first, second))]
    return []


class _OutOfBudget(Exception):
    pass


def _search(
    rollout_id: str, events: list[Event], rules: Rules, budget: int
) -> tuple[bool | None, Anomaly | None]:
    """Look for a legal linearization; (True, None), (False, anomaly) or (None, None)."""
    count = len(events)
    required = sum(1 << i for i, event in enumerate(events) if event.outcome != "unknown")
    failed: set[tuple[int, ModelRollout]] = set()
    path: list[Event] = []
    deepest: list[tuple[int, Refusal, tuple[Event, ...]]] = []
    steps = 0

    def search(done: int, state: ModelRollout) -> bool:
        nonlocal steps
        if done & required == required:
            return True
        if (done, state) in failed:
            return False
        horizon = min(events[i].ends for i in range(count) if not done >> i & 1)
        for i in range(count):
            event = events[i]
            if done >> i & 1 or event.invoke > horizon:
                continue
            steps += 1
            if steps > budget:
                raise _OutOfBudget
            states, refusal = step(rules, state, event)
            if refusal is not None and (not deepest or len(path) >= deepest[0][0]):
                deepest[:] = [(len(path), refusal, (*path[-2:], event))]
            path.append(event)
            try:
                if any(search(done | 1 << i, following) for following in states):
                    return True
            finally:
                path.pop()
        failed.add((done, state))
        return False

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * count + 200))
    try:
        legal = search(0, init())
    except _OutOfBudget:
        return None, None
    finally:
        sys.setrecursionlimit(limit)
    if legal:
        return True, None
    if not deepest:
        reason = "no order of the operations is legal"
        return False, Anomaly("refused", "FREEZE-5", rollout_id, reason, tuple(events[:3]))
    _, refusal, witness = deepest[0]
    reason = f"no order of the operations is legal; at best, {refusal.reason}"
    return False, Anomaly(refusal.anomaly, refusal.clause, rollout_id, reason, witness)
