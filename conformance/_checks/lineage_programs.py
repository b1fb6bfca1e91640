"""LINEAGE under programs: random sequences of every write, with a resolve judged after each.

Judged only when the run names a lineage resolver. Hypothesis writes programs over two rollouts
whose ids differ only by case: puts of new calls (each answering a question of its own, in one
of the dialects), identical re-puts, conflicting re-puts, marks, freezes, ``delete`` and
``retire`` where the source offers them, and resolves of a continuation of any call put so far,
by one long-lived resolver and by fresh ones. What a resolve must answer follows from what the
sink acknowledged alone: a call acked with one payload resolves, with that payload's tokens; a
call never acked, acked with two payloads, or deleted with its rollout (even once its ids are
used again) is unresolved. A rollout once retired is not asked about again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, NoReturn

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from conformance._conversations import (
    DIALECTS,
    TOOL_ONLY,
    Answer,
    Conversation,
    no_room_for_the_stamp,
    read_answer,
)
from conformance._entries import EntryFactory
from conformance._kit import Endpoint, Kit
from conformance._profiles import budget
from conformance._programs import run_programs
from conformance._reading import entry_view
from conformance._registry import check
from conformance._violation import fail
from tokcap_spec.fingerprint import continuation_stamp

Items = list[dict[str, Any]]
ROLLOUTS = st.integers(min_value=0, max_value=1)
PICK = st.integers(min_value=0, max_value=2**16)
_SPEAKERS = (*DIALECTS, *TOOL_ONLY)
_HINT = (
    "replay the program above: resolve must answer from what the sink acknowledged, at once, "
    "in every resolver"
)


@dataclass
class _Call:
    """A call of the program: its question, its answer and every payload acked for it."""

    dialect: Conversation
    request: Items
    answer: Items
    entry: Any
    acked: list[bytes] = field(default_factory=list)
    tokens: tuple[int, ...] = ()

    def continuation(self) -> Items:
        ask = self.dialect.ask("And tomorrow?")[-1:]
        return [*self.request, *self.dialect.echo(self.answer), *ask]


def _program(kit: Kit) -> type[RuleBasedStateMachine]:
    """The state machine bound to this check's target; each program has rollouts of its own."""

    class Program(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            base = kit.rollout_id("lp")
            self.rollouts = [f"{base}-q", f"{base}-Q"]
            self.sink, self.source, self.resolver = kit.sink(), kit.source(), kit.lineage()
            self.calls: dict[str, dict[str, _Call]] = {r: {} for r in self.rollouts}
            self.retired: set[str] = set()
            self.lines: list[str] = []
            self.count = 0

        def _entry(self, rollout: str, call_id: str, dialect: Conversation) -> _Call:
            self.count += 1
            rng = random.Random(f"{kit.settings.seed}:lp:{self.count}")
            request = dialect.ask(f"Question {self.count} of {rollout[-1]}?")
            answer = dialect.answer(f"Answer {self.count}.", f"t{self.count}")
            stamp = {"output_items": answer, **continuation_stamp(request, answer)}
            factory = EntryFactory(rng, kit.entries.build)
            try:
                entry = factory.entry(rollout, call_id, prompt_len=4, generation_len=3, **stamp)
            except (TypeError, ValueError) as exc:
                raise no_room_for_the_stamp(kit, exc) from None
            return _Call(dialect, request, answer, entry)

        def _done(self, line: str, method: Any, *arguments: Any) -> bool:
            """Run one step whose own promises other clauses judge; note whether it raised."""
            try:
                kit.run(method(*arguments))
            except Exception as exc:
                self.lines.append(f"{line}  # raised {type(exc).__name__}")
                return False
            self.lines.append(line)
            return True

        def _put(self, rollout: str, call: _Call, entry: Any, line: str) -> None:
            try:
                kit.run(self.sink.raw.put(entry))
            except Exception as exc:
                self.lines.append(f"{line}  # raised {type(exc).__name__}")
                return
            fields = entry_view(entry).fields
            payload = entry_view(entry).payload
            if payload not in call.acked:
                call.acked.append(payload)
            call.tokens = (*fields["prompt_token_ids"], *fields["generation_token_ids"])
            self.lines.append(f"{line}  # acked")

        @rule(r=ROLLOUTS, speaker=st.integers(0, len(_SPEAKERS) - 1))
        def put_new(self, r: int, speaker: int) -> None:
            rollout = self.rollouts[r]
            call_id = f"call-{len(self.calls[rollout])}"
            call = self._entry(rollout, call_id, _SPEAKERS[speaker])
            self.calls[rollout][call_id] = call
            self._put(rollout, call, call.entry, f"put_new(r{r}, {call_id!r}, {call.dialect.name})")

        @rule(r=ROLLOUTS, pick=PICK, conflicting=st.booleans())
        def put_again(self, r: int, pick: int, conflicting: bool) -> None:
            rollout = self.rollouts[r]
            if not self.calls[rollout]:
                return
            call_id = sorted(self.calls[rollout])[pick % len(self.calls[rollout])]
            call = self.calls[rollout][call_id]
            entry = kit.entries.variant(call.entry) if conflicting else call.entry
            what = "conflicting" if conflicting else "identical"
            self._put(rollout, call, entry, f"put_again(r{r}, {call_id!r}, {what})")

        @rule(r=ROLLOUTS)
        def mark(self, r: int) -> None:
            self._done(f"mark(r{r})", self.sink.raw.mark_incomplete, self.rollouts[r], "lost")

        @rule(r=ROLLOUTS)
        def freeze(self, r: int) -> None:
            self._done(f"freeze(r{r})", self.source.raw.freeze, self.rollouts[r])

        @precondition(lambda self: self.source.has("delete") and not kit.claims("no-delete"))
        @rule(r=ROLLOUTS)
        def delete(self, r: int) -> None:
            rollout = self.rollouts[r]
            if not self._done(f"delete(r{r})", self.source.raw.delete, [rollout]):
                return
            for call in self.calls[rollout].values():
                call.acked.clear()
            self.retired.discard(rollout)

        @precondition(lambda self: self.source.has("retire"))
        @rule(r=ROLLOUTS)
        def retire(self, r: int) -> None:
            rollout = self.rollouts[r]
            self.retired.add(rollout)
            self._done(f"retire(r{r})", self.source.raw.retire, [rollout])

        @rule(r=ROLLOUTS, pick=PICK, fresh=st.booleans())
        def resolve(self, r: int, pick: int, fresh: bool) -> None:
            rollout = self.rollouts[r]
            if not self.calls[rollout] or rollout in self.retired:
                return
            call_id = sorted(self.calls[rollout])[pick % len(self.calls[rollout])]
            call = self.calls[rollout][call_id]
            resolver = kit.lineage() if fresh else self.resolver
            line = f"resolve(r{r}, continuation of {call_id!r}, {'fresh' if fresh else 'kept'})"
            self.lines.append(line)
            self._judge(resolver, rollout, call_id, call, fresh)

        def _ask(self, resolver: Endpoint, rollout: str, call: _Call) -> Answer:
            try:
                return read_answer(kit.run(resolver.raw.resolve(rollout, call.continuation())))
            except Exception as exc:
                self._fail("LINEAGE-3", "an answer", f"resolve raised {type(exc).__name__}")

        def _judge(
            self, resolver: Endpoint, rollout: str, call_id: str, call: _Call, fresh: bool
        ) -> None:
            answer = self._ask(resolver, rollout, call)
            shown = answer.describe()
            if answer.status == "root":  # a request with a model turn continues something
                self._fail("LINEAGE-2", "no root: the request holds a model turn", shown)
            if len(call.acked) == 1:
                if answer.status != "resolved" or answer.call_id != call_id:
                    # Unresolved where a fresh resolver finds the call is a resolver answering
                    # for an older state (LINEAGE-1); where none does, a proven parent missed.
                    late = answer.status == "unresolved" and not fresh
                    if late and self._ask(kit.lineage(), rollout, call).call_id == call_id:
                        self._fail("LINEAGE-1", f"resolved to {call_id!r}, acked once", shown)
                    self._fail("LINEAGE-2", f"resolved to {call_id!r}, acked once", shown)
                if answer.tokens != call.tokens:
                    self._fail("LINEAGE-2", f"the {len(call.tokens)} tokens of {call_id!r}", shown)
                return
            if answer.status != "unresolved" or answer.problem:
                why = "acked with two payloads" if call.acked else "never acked, or deleted"
                self._fail("LINEAGE-3", f"unresolved: {call_id!r} was {why}", shown)

        def _fail(self, clause: str, expected: str, observed: str) -> NoReturn:
            program = "\n".join(f"    {n}. {text}" for n, text in enumerate(self.lines))
            fail(
                clause,
                expected=expected,
                observed=kit.redact(
                    f"{observed}\n  program (r0, r1 are {', '.join(self.rollouts)}):\n{program}"
                ),
                hint=_HINT,
            )

    return Program


@check("LINEAGE-3", "programs", covers=("LINEAGE-1", "LINEAGE-2"))
def programs(kit: Kit) -> None:
    """Random programs of every write, a resolve judged from the acks after each."""
    kit.lineage()  # not claimed when the run names no resolver
    plan = budget(kit.settings.profile)
    run_programs(kit, _program(kit), examples=max(4, plan.examples // 2), steps=plan.steps)
