"""LINEAGE: a put is seen by every resolver at once, which proves parents and never guesses.

Judged only when the run names a lineage resolver (``--tokcap-lineage``), built from the same
store as the sink. Every request is made by :mod:`conformance._conversations` and every entry
is stamped there, so what a check expects follows from the fingerprint layout alone.
"""

from __future__ import annotations

import contextlib
from typing import Any

from conformance import _steps as step
from conformance._conversations import (
    DIALECTS,
    TOOL_ONLY,
    Answer,
    Call,
    Conversation,
    captured,
    captured_delta,
    process_shared,
    resolve,
)
from conformance._entries import LOOKALIKE_CALL_IDS, ODD_CALL_IDS
from conformance._hazards import folded_twins
from conformance._kit import Endpoint, Kit
from conformance._reading import entry_view
from conformance._registry import check
from conformance._workers import Operation, WorkerPlan, run_workers

_TWIN_LENGTH = 6
"""Prompt and generation length of twins whose tokens differ at one length."""

_ATTEMPTS = 6
"""Puts each resolved the moment they return, by a resolver built before and one after."""

CHAT = DIALECTS[0]
Items = list[dict[str, Any]]


def _first(
    kit: Kit,
    rollout: str,
    dialect: Conversation = CHAT,
    *,
    call_id: str | None = None,
    size: int | None = None,
    question: str = "Weather in Oslo?",
    reply: str = "Let me see.",
    **stamp: Any,
) -> Call:
    """The first call of a rollout: a question answered with a tool call."""
    request, answer = dialect.ask(question), dialect.answer(reply, "t1")
    return captured(kit, rollout, request, answer, call_id=call_id, size=size, **stamp)


def _next_request(call: Call, dialect: Conversation, output: str = "sunny") -> Items:
    """What the harness sends after ``call``: its request, its answer echoed, the tool's output."""
    return [*call.request, *dialect.echo(call.answer), *dialect.result("t1", output)]


def _continues(call: Call, dialect: Conversation = CHAT) -> Items:
    """A request that continues ``call`` and nothing else: a later user turn after its answer."""
    return [*call.request, *dialect.echo(call.answer), *dialect.ask("And tomorrow?")[-1:]]


def _expect_parent(
    kit: Kit, answer: Answer, parent: Call, what: str, hint: str, *, tokens: bool = True
) -> None:
    """Fail unless ``answer`` resolved to ``parent`` (with its tokens, unless told not to:
    which tokens a match carries is LINEAGE-2's to judge, whether it was found LINEAGE-1's)."""
    if answer.status == "resolved" and answer.call_id == parent.call_id:
        if not tokens or answer.tokens == parent.cumulative:
            return
        kit.fail(
            expected=f"{what} to carry the parent's prompt and generation "
            f"({len(parent.cumulative)} tokens)",
            observed=f"{len(answer.tokens or ())} tokens",
            hint="cumulative_token_ids is the parent's prompt_token_ids followed by its "
            "generation_token_ids, after its parent chain's sequence when its prompt is a delta",
        )
    kit.fail(
        expected=f"{what} to resolve to call {parent.call_id!r}",
        observed=kit.redact(answer.describe()),
        hint=hint,
    )


@check("LINEAGE-1", "visible-on-return")
def visible_on_return(kit: Kit) -> None:
    """Once put returns, a resolver built before it and one built after it resolve to it."""
    early, sink = kit.lineage(), kit.sink()
    shared = process_shared(kit, early)
    if shared and kit.claims("process-local"):
        kit.fail(
            expected="is_process_shared() to answer False over a store declared process-local",
            observed="it answered True",
            hint="no resolver in another process sees what this process's sink put; a serving "
            "stack that trusts True resolves nothing in its other workers",
        )
    for attempt in range(_ATTEMPTS):
        rollout = kit.rollout_id()
        first = _first(kit, rollout, size=4096 if attempt % 3 == 2 else None)
        _warm(kit, early, rollout, _continues(first))
        step.put(kit, sink, first.entry)
        readers = [("a resolver built before the put", early)]
        if attempt % 2 == 0:
            readers.append(("a resolver built after it", kit.lineage()))
        for who, resolver in readers:
            _expect_parent(
                kit,
                resolve(kit, resolver, rollout, _continues(first)),
                first,
                f"a continuation resolved by {who} as soon as put returned (attempt {attempt + 1})",
                "put must not return before every resolver can read the entry; an index built "
                "once, or a cache the put has not reached, answers for the state before",
                tokens=False,
            )
        second = captured(kit, rollout, _next_request(first, CHAT), CHAT.answer("Sunny.", "t2"))
        frozen = attempt % 2 == 1 and _frozen_and_read(kit, early, rollout, first)
        if frozen and step.raises(sink.put, second.entry) is not None:
            continue  # a strict fence (FENCE-1): nothing more joins this rollout
        if not frozen:
            step.put(kit, sink, second.entry)
        _expect_parent(
            kit,
            resolve(kit, early, rollout, _continues(second)),
            second,
            "the second call's continuation, resolved by the resolver that answered the first"
            + (", put after the rollout was frozen and resolved" if frozen else ""),
            "read what the rollout holds now on every resolve; never keep the first answer, "
            "nor what a frozen rollout held: a put accepted after a freeze joins it",
            tokens=False,
        )
    if shared and not kit.claims("process-local"):
        _put_elsewhere(kit, early)


def _frozen_and_read(kit: Kit, resolver: Endpoint, rollout: str, first: Call) -> bool:
    """Freeze ``rollout`` and have ``resolver`` read it frozen; False where freeze raised,
    which FREEZE judges."""
    if step.raises(kit.source_for(rollout).freeze, rollout) is not None:
        return False
    _warm(kit, resolver, rollout, _continues(first))
    return True


def _warm(kit: Kit, resolver: Endpoint, rollout: str, request: Items) -> None:
    """Have ``resolver`` read ``rollout`` before the put, whatever it answers.

    What a resolver answers for a rollout nothing was put into, an error included, is
    LINEAGE-3's to judge; here it only has to have looked.
    """
    with contextlib.suppress(Exception):
        resolver.resolve(rollout, request)


def _put_elsewhere(kit: Kit, early: Endpoint) -> None:
    """Entries put by sinks in spawned workers are resolved here, by the resolver built before."""
    calls = [_first(kit, kit.rollout_id(f"w{n}")) for n in range(2)]
    for call in calls:  # a resolver that keeps what it read must still see other processes' puts
        _warm(kit, early, entry_view(call.entry).rollout_id, _continues(call))
    # And a rollout this process wrote and read before a worker adds its next call: what this
    # process put is no cache of the rollout.
    rollout = kit.rollout_id("w-here")
    here = _first(kit, rollout)
    step.put(kit, kit.sink(), here.entry)
    _warm(kit, early, rollout, _continues(here))
    calls.append(captured(kit, rollout, _next_request(here, CHAT), CHAT.answer("Sunny.", "t2")))
    plans = [
        WorkerPlan(
            kit.settings.sink,
            dict(kit.settings.sink_kwargs),
            (Operation("put", entry_view(call.entry).payload),),
            entry_class=kit.settings.entry_class,
        )
        for call in calls
    ]
    for number, outcome in enumerate(run_workers(plans)):
        step.expect(
            kit,
            outcome.stage == "ok",
            f"spawned worker {number} to ack its put",
            kit.redact(f"{outcome.stage}: {outcome.error}"),
            "build the sink from its target string and kwargs alone (SPAWN-1 says more)",
        )
    for call in calls:
        rollout = entry_view(call.entry).rollout_id
        _expect_parent(
            kit,
            resolve(kit, early, rollout, _continues(call)),
            call,
            "a continuation of a call a spawned worker put, resolved here",
            "is_process_shared() is True, so every process's resolver must see every put; "
            "answer False for a store other processes cannot read",
            tokens=False,
        )


@check("LINEAGE-2", "root-and-resolved")
def root_and_resolved(kit: Kit) -> None:
    """Requests without model turns are roots; continuations resolve to their own parent."""
    resolver, sink = kit.lineage(), kit.sink()
    rollout = kit.rollout_id("roots")
    first = _first(kit, rollout)
    roots = [
        [],
        CHAT.ask("Hello?"),
        [*CHAT.ask("Weather?"), *CHAT.result("t0", "a tool's output")],
        [{"type": "reasoning", "summary": []}, *DIALECTS[1].ask("Hi")],
    ]
    for attempt in ("before", "after"):
        for items in roots:
            answer = resolve(kit, resolver, rollout, items)
            step.expect(
                kit,
                answer.status == "root" and answer.call_id is None,
                f"a request of {len(items)} items, none model-authored, to be a root "
                f"({attempt} the rollout has a call)",
                kit.redact(answer.describe()),
                "a request with no assistant item and no function_call continues nothing",
            )
        if attempt == "before":
            step.put(kit, sink, first.entry)
    for dialect in (*DIALECTS, *TOOL_ONLY):
        _chain(kit, resolver, sink, dialect)
    _lookalikes(kit, resolver, sink)
    _marked(kit, resolver, sink)
    _deltas(kit, resolver, sink)


def _marked(kit: Kit, resolver: Endpoint, sink: Endpoint) -> None:
    """A rollout marked incomplete, as a whole or for a call that never put, still holds its
    committed calls: each continuation resolves to its own."""
    for whole in (True, False):
        rollout = kit.rollout_id("marked")
        first = _first(kit, rollout)
        step.put(kit, sink, first.entry)
        step.mark(kit, sink, rollout, "" if whole else "call-lost")
        second = captured(kit, rollout, _next_request(first, CHAT), CHAT.answer("Sunny.", "t2"))
        step.put(kit, sink, second.entry)
        how = "as a whole" if whole else "for a call that never put"
        for request, parent, which in (
            (second.request, first, "the second call's request"),
            (_continues(second), second, "the third call's request"),
        ):
            _expect_parent(
                kit,
                resolve(kit, resolver, rollout, request),
                parent,
                f"{which} in a rollout marked incomplete {how}",
                "a mark tells the consumer to mask the rollout; the calls committed in it are "
                "still proven parents, and the resolver answers for them as for any other",
            )


def _deltas(kit: Kit, resolver: Endpoint, sink: Endpoint) -> None:
    """Calls stored as NeMo Gym's ``delta_records`` stores them resolve with their whole
    sequence, rebuilt through the parent chain."""
    rollout = kit.rollout_id("delta")
    first = _first(kit, rollout)
    second = captured_delta(kit, first, _next_request(first, CHAT), CHAT.answer("Next.", "t2"))
    third = captured_delta(
        kit, second, _next_request(second, CHAT, "windy"), CHAT.answer("Last.", "t3")
    )
    for call in (first, second, third):
        step.put(kit, sink, call.entry)
    for parent, which in ((second, "a delta record"), (third, "a delta record of a delta")):
        _expect_parent(
            kit,
            resolve(kit, resolver, rollout, _continues(parent)),
            parent,
            f"a continuation of {which} (prompt_is_delta)",
            "a delta entry's prompt holds only what follows its parent's sequence: the match's "
            "cumulative_token_ids are the parent chain's sequence followed by its own prompt "
            "and generation, the sequence its digest covers",
        )


def _lookalikes(kit: Kit, resolver: Endpoint, sink: Endpoint) -> None:
    """Calls of one rollout whose ids differ only by case, separators, accents or a space, each
    answering its own question: each continuation resolves to its own call, id kept exactly."""
    rollout = kit.rollout_id("lookalike")
    calls = []
    for number, call_id in enumerate((*ODD_CALL_IDS[:4], *LOOKALIKE_CALL_IDS)):
        request = CHAT.ask(f"Weather in city {number}?")
        answer = CHAT.answer(f"Looking up city {number}.", f"t{number}")
        calls.append(captured(kit, rollout, request, answer, call_id=call_id))
    for call in calls:
        step.put(kit, sink, call.entry)
    for call in calls:
        _expect_parent(
            kit,
            resolve(kit, resolver, rollout, _continues(call)),
            call,
            f"a continuation of call {call.call_id[:20]!r}",
            "keep call ids exactly as put: never normalize, case-fold, strip or split them",
        )


def _chain(kit: Kit, resolver: Endpoint, sink: Endpoint, dialect: Conversation) -> None:
    """Three calls of one rollout: each request resolves to the call right before it."""
    rollout = kit.rollout_id(dialect.name)
    first = _first(kit, rollout, dialect)
    second = captured(kit, rollout, _next_request(first, dialect), dialect.answer("Next.", "t2"))
    for call in (first, second):
        step.put(kit, sink, call.entry)
    for request, parent, which in (
        (second.request, first, "the second call's request"),
        (_continues(second, dialect), second, "the third call's request"),
    ):
        _expect_parent(
            kit,
            resolve(kit, resolver, rollout, request),
            parent,
            f"{which} in the {dialect.name} dialect",
            "match the request's continuation fingerprint, then verify the recorded context "
            "(tokcap_spec.fingerprint): the parent is the call whose answer the request ends "
            "with, not the first or the latest call of the rollout",
        )


@check("LINEAGE-3", "never-guesses")
def never_guesses(kit: Kit) -> None:
    """Without one proven parent the answer is unresolved: rewritten (after the genuine
    request was resolved), ambiguous, elsewhere."""
    resolver, sink = kit.lineage(), kit.sink()
    cases: list[tuple[str, str, Items]] = []

    def case(what: str, rollout: str, request: Items) -> None:
        cases.append((what, rollout, request))

    rollout = kit.rollout_id("never")
    case("a rollout nothing was put into", rollout, _continues(_first(kit, rollout)))
    rollout = kit.rollout_id("edited")
    parent = _first(kit, rollout)
    second = captured(kit, rollout, _next_request(parent, CHAT), CHAT.answer("Sunny.", "t2"))
    for call in (parent, second):
        step.put(kit, sink, call.entry)
        # The genuine requests first: a resolver that keeps what it verified must not take a
        # rewritten history of the same length for one it checked.
        _warm(kit, resolver, rollout, _continues(call))
    system, *rest = _continues(parent)
    rewritten = [{**system, "content": "Be long."}, *rest]
    case("a history whose system prompt was rewritten", rollout, rewritten)
    case("a history that lost its first items", rollout, _continues(parent)[1:])
    for summarized in _summarized(kit, sink):
        case(*summarized)
    changed = [*_next_request(parent, CHAT, output="rainy"), *CHAT.echo(second.answer)]
    case("a history whose tool result was changed", rollout, [*changed, *CHAT.ask("And?")[-1:]])
    # Twins of one length as well: a resolver may take equal lengths for equal tokens.
    pairs = [(names, size) for names in folded_twins("twin") for size in (None, _TWIN_LENGTH)]
    for names, size in [(("twin-0", "twin-1"), None), *pairs]:
        rollout = kit.rollout_id("twins")
        twins = [_first(kit, rollout, call_id=name, size=size) for name in names]
        for call in twins:
            step.put(kit, sink, call.entry)
        if twins[0].cumulative != twins[1].cumulative:
            case(
                f"two calls {names[0]!r} and {names[1]!r} that answered alike with different "
                "tokens",
                rollout,
                _continues(twins[0]),
            )
    rollout = kit.rollout_id("undigested")
    bare = _first(kit, rollout, continuation_context_digest="")
    step.put(kit, sink, bare.entry)
    case("an entry whose recorded context digest is empty", rollout, _continues(bare))
    for deleted in _deleted(kit, resolver, sink):
        case(*deleted)
    base = kit.rollout_id("Iso")
    # A conversation no other rollout had: a resolver that looks further than the rollout
    # finds this one parent, not a crowd of look-alike ones.
    unique = f"Weather where {base} runs?"
    # Under a call id no other rollout used: a resolver that pools every rollout's calls by
    # call id finds exactly one candidate.
    elsewhere = _first(
        kit,
        f"{base}.a",
        call_id=f"only-{base}",
        question=unique,
        reply=f"Looking up: {unique}",
    )
    step.put(kit, sink, elsewhere.entry)
    for lookalike in (f"{base}-a", f"{base}_a", f"{base}.A", base):
        case(f"a parent put into {base}.a, asked in {lookalike}", lookalike, _continues(elsewhere))
    busy = kit.rollout_id("busy")
    own = captured(kit, busy, CHAT.ask("Weather in Rome?"), CHAT.answer("Rome.", "t9"))
    step.put(kit, sink, own.entry)
    case(
        f"a parent put into {base}.a, asked in a rollout with calls of its own",
        busy,
        _continues(elsewhere),
    )
    conflicted = _conflicted(kit, sink)
    if conflicted is not None:
        case("a call id committed with two payloads", *conflicted)
    rollout = kit.rollout_id("v1")
    stale = _first(kit, rollout, fingerprint_version=1)
    step.put(kit, sink, stale.entry)
    case("an entry stamped by fingerprint version 1", rollout, _continues(stale))
    for what, rollout, request in cases:
        answer = resolve(kit, resolver, rollout, request)
        step.expect(
            kit,
            answer.status == "unresolved" and not answer.problem,
            f"unresolved for {what}",
            kit.redact(answer.describe()),
            "answer unresolved unless exactly one parent is proven: the same model turns, the "
            "recorded context repeated item for item, in this rollout, by this fingerprint "
            "version; among candidates with different tokens never pick one",
        )


def _summarized(kit: Kit, sink: Endpoint) -> list[tuple[str, str, Items]]:
    """A call whose request held six items, asked with histories a harness shortened below that
    length: the model's turn is kept, so the fingerprint still matches, but the history has
    fewer items than the recorded digest covers, so nothing verifies it."""
    rollout = kit.rollout_id("summarized")
    turns = [*CHAT.ask("Weather in Oslo?")]
    turns += [item for number in range(4) for item in CHAT.ask(f"And in city {number}?")[-1:]]
    call = captured(kit, rollout, turns, CHAT.answer("Let me see.", "t1"))
    step.put(kit, sink, call.entry)
    later = [*CHAT.echo(call.answer), *CHAT.ask("And tomorrow?")[-1:]]
    return [
        (f"a history of {len(turns)} items shortened to its last {kept}", rollout, request)
        for kept, request in (
            (2, [*turns[-2:], *later]),
            (1, [*turns[-1:], *later]),
            (0, later),
        )
    ]


def _deleted(kit: Kit, resolver: Endpoint, sink: Endpoint) -> list[tuple[str, str, Items]]:
    """Rollouts whose call was resolved, then deleted, then used again by a new attempt: one
    with the same call id, one with another (a resolver's index of call ids that a delete never
    pruned still holds the old one). The continuation of each deleted call; none without
    ``delete``."""
    source = kit.source()
    if not source.has("delete") or kit.claims("no-delete"):
        return []
    again_sink, cases = kit.sink(), []
    for label, reused in (("reused", "call-0"), ("renumbered", "call-1")):
        rollout = kit.rollout_id(label)
        gone = _first(kit, rollout, call_id="call-0")
        step.put(kit, sink, gone.entry)
        _warm(kit, resolver, rollout, _continues(gone))
        if step.raises(source.delete, [rollout]) is not None:
            return []  # what delete must do is EXT-RETIRE-1's to judge
        again = CHAT.ask("Weather in Rome?")
        attempt = captured(kit, rollout, again, CHAT.answer("Rome.", "t1"), call_id=reused)
        step.put(kit, again_sink, attempt.entry)
        what = "the same call id" if reused == "call-0" else "another call id"
        cases.append(
            (
                f"a call of a deleted attempt, its rollout id used again with {what}",
                rollout,
                _continues(gone),
            )
        )
    return cases


def _conflicted(kit: Kit, sink: Endpoint) -> tuple[str, Items] | None:
    """A call put, then put again with other tokens: where the sink acks the second put (a
    silent conflict, MASK-4), the continuation of that call; None where it refuses it."""
    rollout = kit.rollout_id("conflict")
    first = _first(kit, rollout, call_id="call-0")
    step.put(kit, sink, first.entry)
    again = _first(kit, rollout, call_id="call-0")
    if again.cumulative == first.cumulative or step.raises(sink.put, again.entry) is not None:
        return None
    return rollout, _continues(first)
