"""The contract as a sequential state machine over one rollout: ``init`` and ``step``.

The model admits exactly the freedom the contract leaves an implementation, as
nondeterminism: ``step`` returns every state the store may be in after one operation with the
observed outcome, or a :class:`Refusal` naming the clause no such state satisfies.

- A conflicting re-put (PUT-4) raises or marks: a refused one may or may not have marked,
  an acked one marked and kept either payload. An acked one that kept the first payload of a
  rollout already incomplete may leave the version where it was: nothing a freeze shows moved.
- A new call after freeze raises (strict fence) or is acked and changes the version
  (relaxed fence); ``Rules.fence`` narrows that choice.
- An identical re-put (PUT-3) changes nothing. Before freeze a store may still move its version
  unseen; after freeze it may raise instead, and either way the version stays.
- Versions are abstract: the model counts state changes (``epoch``) and binds each observed
  ``(snapshot_id, version)`` pair to one state. The same pair for two states is a stuck
  version; two pairs for one frozen state is a split freeze.
- A successful drop retires the rollout: puts raise (FENCE-2); freeze, mark and drop may
  raise; a freeze that answers shows no records (all of them under ``no-delete``) and shows
  any mark acked since (MASK-1); a second drop may answer either way.
- ``retire`` (the batch extension) does what a successful drop does, whatever the state, and
  again is a no-op; ``delete`` leaves a rollout nobody has written, whose calls, marks and
  fence are gone (EXT-RETIRE-1 names what either breaks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from conformance._history.events import Event, Pair

__all__ = ["ModelRollout", "Refusal", "Rules", "Step", "init", "step"]

Fence = Literal["any", "strict", "relaxed"]


@dataclass(frozen=True)
class Rules:
    """Which of the contract's freedoms the implementation is held to."""

    fence: Fence = "any"
    keeps_records: bool = False
    """``no-delete``: a successful drop leaves the records readable."""

    @classmethod
    def judging(cls, fence: str, capabilities: frozenset[str]) -> Rules:
        """The rules a kit run asks for with ``--tokcap-fence`` and ``--tokcap-capability``."""
        return cls(
            fence="strict" if fence == "strict" else "any",
            keeps_records="no-delete" in capabilities,
        )


@dataclass(frozen=True)
class ModelRollout:
    """What a rollout holds, abstractly. Hashable, so a checker can memoize on it."""

    entries: tuple[tuple[str, str], ...] = ()
    """``(call id, digest)`` sorted by call id."""
    incomplete: bool = False
    intents: frozenset[str] = frozenset()
    epoch: int = 0
    """How many state changes happened; a version must move with it."""
    frozen_at: int | None = None
    """The epoch of the latest freeze; equal to ``epoch`` while that freeze is current."""
    pair: Pair | None = None
    """The pair bound to ``frozen_at``, None when that freeze's result is unknown."""
    fenced: bool = False
    dropped: bool = False
    used: frozenset[Pair] = field(default_factory=frozenset)
    """Every pair bound to some state so far."""
    moved_by: str = ""
    """What made the latest state change (``put``, ``mark``, ``begin``, ``drop``): it names the
    clause a version that failed to move breaks."""
    after_refused_drop: bool = False
    """Whether the latest operation was a refused drop, which must have destroyed nothing."""
    masked_by: frozenset[str] = frozenset()
    """What made the rollout incomplete: ``mark`` (of a call with an entry), ``late-mark`` (any
    mark after a freeze), ``other-mark`` (of a call with none, or ``""``), ``conflict``: a lost
    flag breaks MASK-1, MASK-3, MASK-6 or MASK-4."""
    seen_masked: bool = False
    """Whether a freeze already showed it incomplete: a clean freeze after that breaks MASK-2."""
    retired: bool = False
    """Whether ``retire``, not a drop, fenced it for good."""
    forgotten: frozenset[str] = frozenset()
    """Call ids a ``delete`` removed, which nothing put since: seen again, delete kept them."""
    reborn: bool = False
    """Whether a ``delete`` made it new: what a new rollout must not show is EXT-RETIRE-1's."""

    @property
    def current(self) -> bool:
        """Whether the latest freeze still describes the rollout."""
        return self.frozen_at == self.epoch

    def payload(self, call_id: str) -> str | None:
        """Return the digest stored for ``call_id``, or None."""
        return dict(self.entries).get(call_id)


@dataclass(frozen=True)
class Refusal:
    """Why no state explains an operation: the clause, the anomaly name and a sentence."""

    clause: str
    anomaly: str
    reason: str


Step = tuple[tuple[ModelRollout, ...], Refusal | None]
"""The possible next states (empty when refused) and, when empty, why."""


def init() -> ModelRollout:
    """A rollout nobody has written: empty, clean, never frozen."""
    return ModelRollout()


def step(rules: Rules, state: ModelRollout, event: Event) -> Step:
    """Return every state ``state`` may move to under ``event``, or why none exists."""
    handlers: dict[str, Callable[[Rules, ModelRollout, Event, str], Step]] = {
        "put": _put,
        "mark": _mark,
        "begin": _begin,
        "freeze": _freeze,
        "drop": _drop,
        "retire": _retire,
        "delete": _delete,
    }
    handler = handlers[event.kind]
    if event.outcome != "unknown":
        return handler(rules, state, event, event.outcome)
    # An operation that never completed may have taken effect or not.
    states: list[ModelRollout] = [state]
    for outcome in ("ok", "fail"):
        found, _ = handler(rules, state, event, outcome)
        states.extend(found)
    return _unique(states), None


def _unique(states: list[ModelRollout]) -> tuple[ModelRollout, ...]:
    return tuple(dict.fromkeys(states))


def _ok(*states: ModelRollout) -> Step:
    return _unique(list(states)), None


def _refuse(clause: str, anomaly: str, reason: str) -> Step:
    return (), Refusal(clause, anomaly, reason)


def _changed(state: ModelRollout, by: str, **changes: object) -> ModelRollout:
    return replace(
        state,
        epoch=state.epoch + 1,
        moved_by=by,
        after_refused_drop=False,
        **changes,  # type: ignore[arg-type]
    )


def _masked(state: ModelRollout, cause: str, **changes: object) -> ModelRollout:
    return _changed(state, "mark", incomplete=True, masked_by=state.masked_by | {cause}, **changes)


def _lost_mask(state: ModelRollout) -> str:
    """The clause a rollout that froze clean although it was masked breaks."""
    if state.masked_by == {"conflict"}:
        return "MASK-4"  # masked by conflicts alone: incomplete "from then on" is MASK-4's
    if state.seen_masked:
        return "MASK-2"
    if "mark" in state.masked_by:
        return "MASK-1"
    if "late-mark" in state.masked_by:
        return "MASK-3"
    return "MASK-6" if "other-mark" in state.masked_by else "MASK-4"


def _with_entry(state: ModelRollout, call_id: str, digest: str) -> tuple[tuple[str, str], ...]:
    entries = dict(state.entries)
    entries[call_id] = digest
    return tuple(sorted(entries.items()))


def _put(rules: Rules, state: ModelRollout, event: Event, outcome: str) -> Step:
    known = state.payload(event.call_id)
    if outcome == "fail":
        if state.dropped:
            return _ok(state)
        if known is not None and known == event.digest:
            if state.fenced:
                return _ok(state)  # After freeze a strict fence may refuse it (PUT-3).
            return _refuse("PUT-3", "refused", "an identical re-put raised; it must be a no-op")
        if known is not None and known != event.digest:
            return _ok(state, _masked(state, "conflict"))
        if state.fenced and (known is not None or rules.fence != "relaxed"):
            return _ok(state)
        if state.reborn and not state.fenced:
            return _refuse("EXT-RETIRE-1", "refused", "a put into a deleted rollout raised")
        return _refuse(
            "FENCE-1" if state.fenced else "SPAWN-4",
            "refused",
            "a put the contract requires to succeed raised"
            + (" (relaxed fence required)" if state.fenced else " on an open rollout"),
        )
    if state.dropped:
        if state.retired:
            return _refuse("EXT-RETIRE-1", "lost-ack", "a put into a retired rollout was acked")
        return _refuse("FENCE-2", "lost-ack", "a put into a dropped rollout was acked")
    if known == event.digest:
        # Before freeze nobody can see a version move; after it, nothing may change (PUT-3).
        return _ok(state) if state.fenced else _ok(state, _changed(state, "put"))
    if known is not None:
        masked = (
            _masked(state, "conflict"),
            _masked(state, "conflict", entries=_with_entry(state, event.call_id, event.digest)),
        )
        if state.incomplete:
            # Keeping the first payload of a rollout already incomplete changes nothing any
            # freeze shows, so the version may stay.
            return _ok(*masked, replace(state, masked_by=state.masked_by | {"conflict"}))
        return _ok(*masked)
    if state.fenced and rules.fence == "strict":
        return _refuse("FENCE-1", "lost-ack", "a new call after freeze was acked (strict fence)")
    return _ok(
        _changed(
            state,
            "put",
            entries=_with_entry(state, event.call_id, event.digest),
            intents=state.intents - {event.call_id},
            forgotten=state.forgotten - {event.call_id},
        )
    )


def _mark(rules: Rules, state: ModelRollout, event: Event, outcome: str) -> Step:
    if outcome == "fail":
        if state.dropped:
            return _ok(state)
        if state.reborn and not state.fenced:
            return _refuse("EXT-RETIRE-1", "refused", "mark_incomplete raised after delete")
        return _refuse("MASK-6", "refused", "mark_incomplete raised on a live rollout")
    if state.fenced:
        return _ok(_masked(state, "late-mark"))
    return _ok(_masked(state, "mark" if state.payload(event.call_id) else "other-mark"))


def _begin(rules: Rules, state: ModelRollout, event: Event, outcome: str) -> Step:
    if outcome == "fail":
        if state.dropped or state.fenced:
            return _ok(state)
        if state.reborn:
            return _refuse("EXT-RETIRE-1", "refused", "begin_call raised after delete")
        return _refuse("EXT-BEGIN-1", "refused", "begin_call raised on an open rollout")
    if state.payload(event.call_id) is not None:
        return _ok(state, _changed(state, "begin"))
    intents = state.intents | {event.call_id}
    return _ok(replace(state, intents=intents), _changed(state, "begin", intents=intents))


def _freeze(rules: Rules, state: ModelRollout, event: Event, outcome: str) -> Step:
    if outcome == "fail":
        if state.dropped:
            return _ok(state)
        if state.epoch == 0:
            if state.reborn:
                return _refuse("EXT-RETIRE-1", "refused", "freeze raised on a deleted rollout")
            return _refuse("FREEZE-4", "refused", "freeze raised on a rollout never written")
        return _refuse("FREEZE-5", "refused", "freeze raised on a live rollout")
    if event.result is None:
        fenced = replace(state, fenced=True)
        if not state.current:
            fenced = replace(fenced, frozen_at=state.epoch, pair=None)
        return _ok(state, fenced)
    wrong = _content_refusal(state, event)
    if wrong is not None:
        if state.after_refused_drop and wrong.clause not in ("FREEZE-3", "EXT-BEGIN-1"):
            # A duplicate or an intent the store never kept shows whatever came before.
            wrong = replace(wrong, clause="DROP-3", reason=f"after a refused drop, {wrong.reason}")
        return (), wrong
    if state.dropped:
        return _ok(state)
    state = replace(
        state, after_refused_drop=False, seen_masked=state.seen_masked or event.incomplete
    )
    dangling = bool(state.intents - {call for call, _ in state.entries})
    masked = replace(state, incomplete=True) if dangling else state
    pair = event.result
    if state.current and state.pair is not None:
        if pair != state.pair:
            return _refuse(
                "DROP-3" if state.after_refused_drop else "FREEZE-2",
                "split-freeze",
                f"the rollout was frozen as {state.pair} and, unchanged, froze again as {pair}",
            )
        return _ok(state, masked)
    if pair in state.used:
        return _refuse(
            _STUCK_BY.get(state.moved_by, "DROP-4"),
            "version-stuck",
            f"the pair {pair} already named an earlier state of the rollout",
        )
    bound = replace(state, frozen_at=state.epoch, pair=pair, fenced=True, used=state.used | {pair})
    return _ok(bound, replace(bound, incomplete=True) if dangling else bound)


_STUCK_BY = {"put": "FENCE-1", "mark": "MASK-3"}
"""The clause a version that did not move after a freeze breaks, by what changed the state."""


def _content_refusal(state: ModelRollout, event: Event) -> Refusal | None:
    calls = [call for call, _ in event.entries]
    if len(set(calls)) != len(calls):
        twice = sorted({call for call in calls if calls.count(call) > 1})
        return Refusal("FREEZE-3", "duplicate", f"call {twice[0]!r} appears twice")
    seen, held = dict(event.entries), dict(state.entries)
    extra = sorted(set(seen) - set(held))
    kept = sorted(set(extra) & state.forgotten)
    if kept:
        return Refusal("EXT-RETIRE-1", "phantom", f"call {kept[0]!r} is still there after delete")
    if extra and state.retired:
        return Refusal("EXT-RETIRE-1", "phantom", f"call {extra[0]!r} is still there after retire")
    if extra and state.dropped:
        return Refusal("DROP-5", "phantom", f"call {extra[0]!r} is still there after a drop")
    if extra:
        return Refusal("FREEZE-5", "phantom", f"call {extra[0]!r} is not in the rollout")
    missing = sorted(set(held) - set(seen))
    if missing:
        return Refusal("FREEZE-5", "lost-ack", f"call {missing[0]!r} is missing")
    torn = sorted(call for call in held if held[call] != seen[call])
    if torn:
        return Refusal("FREEZE-5", "torn", f"call {torn[0]!r} has a payload never put")
    dangling = bool(state.intents - set(held))
    if event.incomplete != (state.incomplete or dangling) and not state.dropped:
        if state.incomplete and not event.incomplete:
            return Refusal(
                _lost_mask(state), "lost-ack", "an acked mark is missing: incomplete=False"
            )
        if dangling and not event.incomplete:
            return Refusal(
                "EXT-BEGIN-1", "lost-ack", "an intent with no entry, yet incomplete=False"
            )
        if state.reborn and not state.masked_by:
            return Refusal("EXT-RETIRE-1", "phantom", "a deleted rollout froze incomplete")
        if state.epoch == 0:
            return Refusal("FREEZE-4", "phantom", "a rollout never written froze incomplete")
        return Refusal("MASK-1", "phantom", "incomplete=True with no mark, conflict or intent")
    if state.dropped and state.incomplete and not event.incomplete:
        return Refusal("MASK-1", "lost-ack", "an acked mark is missing: incomplete=False")
    return None


def _drop(rules: Rules, state: ModelRollout, event: Event, outcome: str) -> Step:
    if outcome == "fail":
        if state.dropped:
            return _ok(state)
        return _refuse("DROP-2", "refused", "drop raised instead of returning a bool")
    if state.dropped:
        return _ok(state)
    pair = event.pair
    exact = state.current and (
        state.pair == pair if state.pair is not None else pair not in state.used
    )
    if not event.returned:
        if exact and state.pair is not None:
            return _refuse(
                "DROP-1", "refused", f"drop{pair} of the current snapshot returned False"
            )
        return _ok(replace(state, after_refused_drop=True))
    if not exact:
        stale = pair in state.used
        # An old pair retiring after an accepted late put is FENCE-1's; after a mark, DROP-4's.
        return _refuse(
            ("FENCE-1" if state.moved_by == "put" else "DROP-4") if stale else "DROP-2",
            "version-stuck" if stale else "lost-ack",
            f"drop{pair} returned True but the rollout is no longer at that snapshot"
            if stale
            else f"drop{pair} returned True for a pair the rollout never had",
        )
    kept = state if rules.keeps_records else replace(state, entries=(), incomplete=False)
    return _ok(_changed(kept, "drop", dropped=True, intents=frozenset()))


def _retire(rules: Rules, state: ModelRollout, event: Event, outcome: str) -> Step:
    if outcome == "fail":
        return _refuse("EXT-RETIRE-1", "refused", "retire raised; it works in any state")
    if state.dropped:
        return _ok(state)
    kept = state if rules.keeps_records else replace(state, entries=(), incomplete=False)
    return _ok(_changed(kept, "retire", dropped=True, retired=True, intents=frozenset()))


def _delete(rules: Rules, state: ModelRollout, event: Event, outcome: str) -> Step:
    if outcome == "fail":
        # The promise leaves delete free to refuse what it cannot free (a rollout it never
        # held, say); a refused delete changes nothing, and what delete must do to the states
        # it is asked about is EXT-RETIRE-1's own check.
        return _ok(state)
    gone = state.forgotten | {call for call, _ in state.entries}
    return _ok(replace(init(), forgotten=gone, reborn=True))
