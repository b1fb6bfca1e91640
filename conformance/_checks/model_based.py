"""A model-based check: random programs of every operation, judged step by step by the model.

Hypothesis writes programs over four rollouts whose ids differ only by case or by ``-``/``.``/
``_``: puts of new, identical and conflicting entries, marks, intents when the sink has
``begin_call``, freezes from the same or a fresh source, drops with the current, a stale or a
foreign ``(snapshot_id, version)``, and closing and reopening the endpoints. After every
operation the sequential model of :mod:`conformance._history.model` must still explain what the
store did. A failure names the clause broken and prints the shrunk program, which replays.

Where the source offers ``retire`` or ``delete``, a second set of programs adds them, the ids
used again afterwards. They run apart so that the programs without them keep their short
shrunk forms.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    multiple,
    precondition,
    rule,
)

from conformance._entries import EntryFactory
from conformance._history.events import Event
from conformance._history.model import ModelRollout, Rules, init, step
from conformance._history.record import Recorder
from conformance._kit import Endpoint, Kit
from conformance._profiles import budget
from conformance._programs import run_programs
from conformance._registry import check
from conformance._steps import close as close_endpoint
from conformance._violation import ExtensionMissing, fail

ROLLOUTS = st.integers(min_value=0, max_value=3)
PICK = st.integers(min_value=0, max_value=2**16)
_HINT = (
    "replay the program above against the store; the last operation is the one the contract forbids"
)


def _program(
    kit: Kit, rules: Rules, reopens: int, *, fresh_sources: bool = True
) -> type[RuleBasedStateMachine]:
    """Return the state machine class bound to this check's target.

    Programs share one sink and one source, since each program has rollouts of its own: a
    program that closes and reopens them (at most ``reopens`` times) hands the new pair on to
    the next. A freeze from a fresh source takes a source that never froze that rollout.
    """
    live: list[tuple[Endpoint, Endpoint]] = []

    class Program(RuleBasedStateMachine):
        snapshots = Bundle("snapshots")

        def __init__(self) -> None:
            super().__init__()
            base = kit.rollout_id("m")
            self.rollouts = [f"{base}-x", f"{base}-X", f"{base}.x", f"{base}_x"]
            if not live:
                live.append((kit.sink(), kit.source()))
            self.sink, self.source = live[-1]
            self.reopened = 0
            self.states: dict[str, tuple[ModelRollout, ...]] = {r: (init(),) for r in self.rollouts}
            self.put_entries: dict[str, list[Any]] = {r: [] for r in self.rollouts}
            self.intents: dict[str, list[str]] = {r: [] for r in self.rollouts}
            self.recorder = Recorder("program")
            self.lines: list[str] = []
            self.calls = 0

        def _new_entry(self, rollout: str, call_id: str | None = None) -> Any:
            self.calls += 1
            rng = random.Random(f"{kit.settings.seed}:{self.calls}")
            factory = EntryFactory(rng, kit.entries.build)
            call = call_id or f"call-{self.calls}"
            return factory.entry(rollout, call, prompt_len=3, generation_len=2)

        def _judge(self, line: str, event: Event) -> None:
            self.lines.append(f"{line}  # {event.describe()}")
            found: list[ModelRollout] = []
            refusals = []
            for state in self.states[event.rollout_id]:
                following, refusal = step(rules, state, event)
                found.extend(following)
                if refusal is not None:
                    refusals.append(refusal)
            if found:
                self.states[event.rollout_id] = tuple(dict.fromkeys(found))
                return
            refusal = refusals[0]
            program = "\n".join(f"    {number}. {text}" for number, text in enumerate(self.lines))
            fail(
                refusal.clause,
                expected="every step of the program explained by the contract's model",
                observed=kit.redact(
                    f"{refusal.anomaly}: {refusal.reason}\n  program (rollouts r0..r3 "
                    f"are {', '.join(self.rollouts)}):\n{program}"
                ),
                hint=_HINT,
            )

        def _put(self, line: str, entry: Any) -> None:
            event = kit.run(self.recorder.put(self.sink.raw, entry))
            self._judge(line, event)

        @rule(r=ROLLOUTS)
        def put_new(self, r: int) -> None:
            rollout = self.rollouts[r]
            entry = self._new_entry(rollout)
            self.put_entries[rollout].append(entry)
            self._put(f"put_new(r{r})", entry)

        @rule(r=ROLLOUTS, pick=PICK)
        def put_identical(self, r: int, pick: int) -> None:
            known = self.put_entries[self.rollouts[r]]
            if known:
                self._put(f"put_identical(r{r}, {pick % len(known)})", known[pick % len(known)])

        @rule(r=ROLLOUTS, pick=PICK)
        def put_conflicting(self, r: int, pick: int) -> None:
            known = self.put_entries[self.rollouts[r]]
            if known:
                variant = kit.entries.variant(known[pick % len(known)])
                self._put(f"put_conflicting(r{r}, {pick % len(known)})", variant)

        @rule(r=ROLLOUTS, call=st.sampled_from(["", "lost call", "ü\nid"]))
        def mark(self, r: int, call: str) -> None:
            rollout = self.rollouts[r]
            event = kit.run(self.recorder.mark(self.sink.raw, rollout, call))
            self._judge(f"mark(r{r}, {call!r})", event)

        @precondition(lambda self: self.sink.has("begin_call"))
        @rule(r=ROLLOUTS)
        def begin_call(self, r: int) -> None:
            rollout = self.rollouts[r]
            self.calls += 1
            call = f"intent-{self.calls}"
            self.intents[rollout].append(call)
            event = kit.run(self.recorder.begin(self.sink.raw, rollout, call))
            self._judge(f"begin_call(r{r})", event)

        @rule(r=ROLLOUTS)
        def put_intended(self, r: int) -> None:
            rollout = self.rollouts[r]
            if self.intents[rollout]:
                entry = self._new_entry(rollout, self.intents[rollout].pop(0))
                self.put_entries[rollout].append(entry)
                self._put(f"put_intended(r{r})", entry)

        @rule(
            target=snapshots, r=ROLLOUTS, fresh=st.booleans() if fresh_sources else st.just(False)
        )
        def freeze(self, r: int, fresh: bool) -> Any:
            rollout = self.rollouts[r]
            source = kit.source_for(rollout) if fresh else self.source
            pair = kit.run(self.recorder.freeze(source.raw, rollout))
            self._judge(f"freeze(r{r}, fresh={fresh})", self.recorder.events[-1])
            return multiple() if pair is None else (r, pair)

        @rule(
            snapshot=snapshots,
            foreign=st.booleans(),
            change=st.sampled_from(["exact", "exact", "version+1", "version-1", "other-id"]),
        )
        def drop(self, snapshot: tuple[int, tuple[str, int]], foreign: bool, change: str) -> None:
            own, (snapshot_id, version) = snapshot
            r = (own + 1) % len(self.rollouts) if foreign else own
            if change == "version+1":
                version += 1
            elif change == "version-1":
                version -= 1
            elif change == "other-id":
                snapshot_id += "-other"
            rollout = self.rollouts[r]
            kit.run(self.recorder.drop(self.source.raw, rollout, (snapshot_id, version)))
            self._judge(f"drop(r{r}, snapshot of r{own}, {change})", self.recorder.events[-1])

        @precondition(lambda self: self.reopened < reopens)
        @rule()
        def close_and_reopen(self) -> None:
            close_endpoint(kit, self.sink.raw, judged=True)
            close_endpoint(kit, self.source.raw, judged=True)
            self.sink, self.source = kit.sink(), kit.source()
            live.append((self.sink, self.source))
            self.reopened += 1
            self.lines.append("close_and_reopen()")

    return Program


def _ending_program(kit: Kit, rules: Rules, reopens: int) -> type[RuleBasedStateMachine]:
    """Return :func:`_program`'s machine with ``retire`` and ``delete`` steps added.

    Its freezes all come from the program's long-lived source: fresh sources are the first
    programs' to try, and each one is a construction a slow-to-build target pays for.
    """

    class EndingProgram(_program(kit, rules, reopens, fresh_sources=False)):  # type: ignore[misc]
        @precondition(lambda self: self.source.has("retire"))
        @rule(r=ROLLOUTS)
        def retire(self, r: int) -> None:
            event = kit.run(self.recorder.retire_id(self.source.raw, self.rollouts[r]))
            self._judge(f"retire(r{r})", event)

        @precondition(lambda self: self.source.has("delete") and not rules.keeps_records)
        @rule(r=ROLLOUTS)
        def delete(self, r: int) -> None:
            event = kit.run(self.recorder.delete_id(self.source.raw, self.rollouts[r]))
            self._judge(f"delete(r{r})", event)

    return EndingProgram


_JUDGED = (
    "PUT-3",
    "PUT-4",
    "PUT-5",
    "FREEZE-2",
    "FREEZE-3",
    "FREEZE-4",
    "FENCE-1",
    "FENCE-2",
    "DROP-1",
    "DROP-2",
    "DROP-3",
    "DROP-4",
    "MASK-2",
    "MASK-3",
    "MASK-4",
    "MASK-5",
    "MASK-6",
)


@check(None, "model-based", covers=_JUDGED)
def model_based(kit: Kit) -> None:
    """Random programs of every operation over four look-alike rollouts follow the model."""
    plan = budget(kit.settings.profile)
    rules = Rules.judging(kit.fence, kit.settings.capabilities)
    machine = _program(kit, rules, plan.reopens)
    run_programs(kit, machine, examples=plan.examples, steps=plan.steps)


@check(None, "model-based-endings", covers=(*_JUDGED, "EXT-RETIRE-1"))
def model_based_endings(kit: Kit) -> None:
    """The same programs with ``retire`` and ``delete`` among their steps follow the model."""
    source = kit.source()
    if not (source.has("retire") or source.has("delete")):
        raise ExtensionMissing("extension not implemented: retire, delete")
    plan = budget(kit.settings.profile)
    rules = Rules.judging(kit.fence, kit.settings.capabilities)
    # No reopens and no fresh sources: those are the first programs' to try, and each is a
    # construction a slow-to-build target pays for.
    machine = _ending_program(kit, rules, 0)
    run_programs(kit, machine, examples=max(1, plan.examples // 2), steps=plan.steps)
