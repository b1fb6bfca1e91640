"""PUT: acked means durable and visible, exact round trips, idempotent re-puts, isolation."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from conformance import _hazards as hazards
from conformance import _steps as step
from conformance._entries import LOOKALIKE_CALL_IDS, ODD_CALL_IDS
from conformance._kit import Endpoint, Kit
from conformance._reading import SnapshotView, Unreadable, entry_view, record_fields
from conformance._registry import basic, check
from conformance.strategies import model_call_ids, token_entry_fields


def _differences(sent_fields: dict[str, Any], got_fields: dict[str, Any]) -> list[str]:
    return sorted(
        name
        for name in sent_fields.keys() | got_fields.keys()
        if _canonical(sent_fields.get(name, "<absent>"))
        != _canonical(got_fields.get(name, "<absent>"))
    )


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=True, default=repr)


def _expect_round_trip(kit: Kit, entry: Any, snapshot: SnapshotView) -> None:
    __tracebackhide__ = True
    want = entry_view(entry)
    got = snapshot.entry_for(want.model_call_id)
    if got is None:
        kit.fail(
            expected=f"call {want.model_call_id!r} in the snapshot",
            observed=f"calls {sorted(step.payloads(snapshot))!r}"[:400],
            hint="keep model_call_id exactly as given: any non-empty string",
        )
    if got.payload != want.payload:
        kit.fail(
            expected="the frozen entry equal to the entry put, field by field, floats bit for bit",
            observed="fields differ: "
            + ", ".join(_differences(dict(want.fields), dict(got.fields))),
            hint="serialize losslessly: plain JSON turns -inf into null, float32 loses precision, "
            "and some stores drop unknown fields",
        )


def _property_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=False,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


_ATTEMPTS = 12
"""Puts each followed at once by a freeze elsewhere: a late commit misses one of them."""
_LONG_CONTEXT = (65_536, 16_384)
"""The prompt and generated tokens of a long-context call, whose write outlasts any small one."""
_LONG_ATTEMPTS = 4
"""The last attempts put long-context entries, frozen by a source built before the put: a
store that writes large payloads beside the ack (a pool, a spill file) loses some of these."""


def _attempt_plan(attempt: int) -> tuple[int | None, int | None, bool]:
    """Prompt and generated token counts of PUT-1's attempt ``attempt``, and whether its
    source is built before the put."""
    if attempt >= _ATTEMPTS - _LONG_ATTEMPTS:
        return (*_LONG_CONTEXT, True)
    size = 4096 if attempt % 4 == 3 else None
    return size, size, attempt % 2 == 1


@check("PUT-1", "durable-on-return")
def durable_on_return(kit: Kit) -> None:
    """Once put returns, a fresh source's freeze contains the entry, before any close, here
    and in a spawned worker."""
    sink = kit.sink()
    for attempt in range(_ATTEMPTS):
        rollout = kit.rollout_id()
        prompt_len, generation_len, built_before = _attempt_plan(attempt)
        entry = kit.entries.entry(rollout, prompt_len=prompt_len, generation_len=generation_len)
        seen = step.visible_after(kit, sink, entry, built_before=built_before)
        if isinstance(seen, Unreadable):
            raise seen
        if isinstance(seen, SnapshotView) and step.call_of(entry) in step.payloads(seen):
            continue
        observed = (
            step.describe(seen)
            if isinstance(seen, SnapshotView)
            else kit.redact(f"the fresh source's freeze raised {type(seen).__name__}: {seen}")
        )
        kit.fail(
            expected=f"call {step.call_of(entry)!r} visible to a fresh source as soon as put "
            f"returned (attempt {attempt + 1})",
            observed=observed,
            hint="put must not return before the record is durable and visible; a background "
            "commit, a group commit or buffering until close() acks too early",
        )
    if kit.claims("process-local"):
        return
    rollout = kit.rollout_id("any-process")
    entry = kit.entries.entry(rollout)
    step.put(kit, sink, entry)
    step.expect_in_spawned_worker(
        kit,
        rollout,
        step.call_of(entry),
        hint="put must not return before the record is where every process reads it: a "
        "buffer this process writes out later, or a cache only it reads, acks too early",
    )


@check("PUT-2", "exact-round-trip")
def exact_round_trip(kit: Kit) -> None:
    """Entries with -inf, -0.0, extreme ids, unicode and extra fields freeze back exactly."""
    sink, source = kit.sink(), kit.source()
    big = kit.entries.hazardous(kit.rollout_id("big"), prompt_len=8192, generation_len=2048)
    rollout = entry_view(big).rollout_id
    step.put(kit, sink, big)
    _expect_round_trip(kit, big, step.freeze(kit, source, rollout))
    _edited_after_put(kit, sink)
    _lone_surrogates(kit, sink)
    plain_calls = st.integers(0, 2**20).map(lambda n: f"gen-{n}")

    @_property_settings(20)
    @given(st.data())
    def round_trip(data: st.DataObject) -> None:
        target = kit.rollout_id("gen")
        entry = kit.entries.build(**data.draw(token_entry_fields(target, plain_calls)))
        step.put(kit, sink, entry)
        _expect_round_trip(kit, entry, step.freeze(kit, kit.source_for(target), target))

    step.run_property(kit, round_trip)


def _edited_after_put(kit: Kit, sink: Endpoint) -> None:
    """An entry the caller edits in place once put returned still freezes as it was put.

    A framework may stamp fields on its own (mutable) record after the put; a store that kept
    a reference to the caller's lists instead of a copy hands back the edit.
    """
    entry = kit.entries.entry(kit.rollout_id("edited"))
    sent = entry_view(entry)
    step.put(kit, sink, entry)
    if not _edit_lists(entry):
        return
    got = step.freeze(kit, kit.source(), sent.rollout_id).entry_for(sent.model_call_id)
    if got is None or got.payload != sent.payload:
        kit.fail(
            expected="the entry frozen as it was when put returned",
            observed="it shows the caller's later edits to its lists"
            if got is not None
            else "the call is missing",
            hint="copy the entry's lists (or its encoded bytes) before put returns; never keep "
            "a reference to the caller's object",
        )


def _lone_surrogates(kit: Kit, sink: Endpoint) -> None:
    """Text holding a lone surrogate (which a JSON ``\\ud83d`` escape decodes to) is kept, or
    refused.

    UTF-8 cannot encode it, so a store may raise on the put; what it may not do is ack the
    entry and hand back other text (an encoder told to replace what it cannot encode).
    """
    base = kit.entries.hazardous(kit.rollout_id("surrogate"), prompt_len=16, generation_len=4)
    fields = record_fields(base)
    items = [dict(item) for item in fields["output_items"]]
    items[0]["content"] = "half an emoji: \ud83d."
    fields["output_items"] = items
    fields["x_extra_field"] = {"note": "\udc80 stray byte", "n": 1}
    entry = kit.entries.build(**fields)
    if step.raises(sink.put, entry) is not None:
        return
    _expect_round_trip(kit, entry, step.freeze(kit, kit.source(), entry_view(entry).rollout_id))


def _edit_lists(entry: Any) -> bool:
    """Change values inside the entry's own lists, in place; False when it has none to edit."""
    edited = False
    for name in ("prompt_token_ids", "generation_token_ids", "generation_log_probs"):
        values = entry.get(name) if isinstance(entry, dict) else getattr(entry, name, None)
        if isinstance(values, list) and values:
            values[0] = -9.0 if name == "generation_log_probs" else values[0] + 1
            edited = True
    return edited


@check("PUT-3", "identical-reput")
def identical_reput(kit: Kit) -> None:
    """An identical re-put is a no-op before freeze; after it, it may raise, but changes nothing."""
    sink = kit.sink()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    for endpoint in (sink, sink, kit.sink()):
        step.put(kit, endpoint, entry)
    snapshot = step.freeze(kit, kit.source(), rollout)
    if len(snapshot.entries) != 1 or snapshot.incomplete:
        kit.fail(
            expected="one entry, incomplete=False after three identical puts",
            observed=step.describe(snapshot),
            hint="compare payloads: an identical re-put is a no-op, not a new entry or a conflict",
        )
    step.raises(kit.sink().put, entry)
    again = step.freeze(kit, kit.source(), rollout)
    step.expect_equal_snapshots(
        kit,
        snapshot,
        again,
        hint="after freeze an identical re-put may raise or be a no-op, but it must change "
        "nothing: no new version, no mark",
    )
    if not step.drop(kit, kit.source(), rollout, snapshot.snapshot_id, snapshot.version):
        kit.fail(
            expected="the snapshot taken before the identical re-put to drop",
            observed="False",
            hint="an identical re-put after freeze must not move the version",
        )
    _identical_hazards(kit)
    _identical_among_others(kit)
    _identical_built_differently(kit)


def _identical_built_differently(kit: Kit) -> None:
    """An equal entry whose mappings were built in another key order is the same call: its
    re-put is a no-op, before and after freeze."""
    for _ in range(2):
        entry = kit.entries.hazardous(kit.rollout_id("order"), prompt_len=8, generation_len=4)
        if not step.round_trips(kit, entry):
            continue
        rollout = entry_view(entry).rollout_id
        fields = record_fields(entry)
        copy = kit.entries.build(**hazards.reordered(fields))
        sink = kit.sink_for(rollout)
        step.put(kit, sink, entry)
        step.put(kit, sink, copy)
        snapshot = step.freeze(kit, kit.source_for(rollout), rollout)
        step.raises(kit.sink_for(rollout).put, copy)
        again = step.freeze(kit, kit.source_for(rollout), rollout)
        if snapshot.incomplete or step.payloads(snapshot) != step.sent([entry]):
            kit.fail(
                expected="an equal entry whose output_items and extra fields list their keys in "
                "another order to be an identical re-put: one clean entry",
                observed=step.describe(snapshot),
                hint="compare payloads in a canonical form (keys sorted), never as the bytes a "
                "serializer happened to write for the order the mappings were built in",
            )
        step.expect_equal_snapshots(
            kit,
            snapshot,
            again,
            hint="after freeze, an equal entry built in another key order is an identical re-put: "
            "it may raise, but it must change nothing",
        )


def _identical_among_others(kit: Kit) -> None:
    """An identical re-put awaited together with puts of new calls, on one sink, is a no-op
    and the new calls are stored: a store that batches concurrent puts handles both kinds."""
    sink = kit.sink()
    rollout = kit.rollout_id("together")
    first, *others = (kit.entries.entry(rollout, prompt_len=8, generation_len=4) for _ in range(3))
    step.put(kit, sink, first)
    copy = kit.entries.build(**record_fields(first))
    errors = [
        error
        for error in kit.gather(sink.raw.put(copy), *(sink.raw.put(e) for e in others))
        if isinstance(error, BaseException)
    ]
    snapshot = step.freeze(kit, kit.source_for(rollout), rollout)
    if errors or snapshot.incomplete or step.payloads(snapshot) != step.sent([first, *others]):
        kit.fail(
            expected="an identical re-put and two new puts, awaited together, to leave three "
            "clean entries",
            observed=kit.redact("; ".join(f"{type(e).__name__}: {e}" for e in errors))
            or step.describe(snapshot),
            hint="a no-op re-put inside a batch of concurrent puts must not end or shift the batch",
        )


def _identical_hazards(kit: Kit) -> None:
    """Entries with unicode, ``-inf``, ``-0.0`` and extra fields, re-put as equal copies.

    An entry the store cannot keep even once is PUT-2's to judge, so it is skipped here.
    """
    for _ in range(3):
        entry = kit.entries.hazardous(kit.rollout_id("hazard"), prompt_len=32, generation_len=8)
        if not step.round_trips(kit, entry):
            continue
        rollout = entry_view(entry).rollout_id
        copy = kit.entries.build(**record_fields(entry))
        step.put(kit, kit.sink_for(rollout), entry)
        step.put(kit, kit.sink_for(rollout), copy)
        snapshot = step.freeze(kit, kit.source_for(rollout), rollout)
        if snapshot.incomplete or step.payloads(snapshot) != step.sent([entry]):
            kit.fail(
                expected="an equal copy of an entry with unicode, -inf, -0.0 and extra fields "
                "to be a no-op: one clean entry",
                observed=step.describe(snapshot),
                hint="judge identity by the payload's exact values, encoded the way the store "
                "keeps them, not by a second encoding (ASCII escapes against UTF-8, say)",
            )


@check("PUT-4", "conflicting-reput")
def conflicting_reput(kit: Kit) -> None:
    """Reusing a call id with a payload one field apart raises or leaves the rollout incomplete.

    Every field is varied alone, from this sink and from a fresh one. A difference the store
    cannot keep in the first place (a lossy round trip) is PUT-2's to judge, not this clause's.
    """
    sink = kit.sink()
    for number, (what, first, second) in enumerate(kit.entries.field_variants(kit.rollout_id)):
        rollout = entry_view(first).rollout_id
        step.put(kit, sink, first)
        error = step.raises((sink if number % 2 == 0 else kit.sink_for(rollout)).put, second)
        snapshot = step.freeze(kit, kit.source_for(rollout), rollout)
        if error is not None or snapshot.incomplete or not step.round_trips(kit, first, second):
            continue
        kept = step.payloads(snapshot).get(step.call_of(first))
        keeping = (
            "the new payload" if kept == step.sent([second])[step.call_of(first)] else "the first"
        )
        kit.fail(
            expected=f"a re-put differing only in {what} to raise, or the rollout to freeze "
            "incomplete",
            observed=f"no error and a clean snapshot keeping {keeping}: {step.describe(snapshot)}",
            hint="fail closed: compare the whole payload (every field, floats bit for bit, "
            "extra fields), not only the tokens; a reused model_call_id with another payload "
            "is lost evidence",
        )


@check("PUT-5", "rollout-isolation")
def rollout_isolation(kit: Kit) -> None:
    """Ids differing only by case or by '.', '_', '-' are separate rollouts."""
    sink, source = kit.sink(), kit.source()
    base = kit.rollout_id("Iso")
    rollouts = [f"{base}.a", f"{base}_a", f"{base}-a", f"{base}.A"]
    entries = {rollout: kit.entries.entry(rollout) for rollout in rollouts}
    for entry in entries.values():
        step.put(kit, sink, entry)
    step.mark(kit, sink, rollouts[0], step.call_of(entries[rollouts[0]]))
    frozen = step.freeze(kit, source, rollouts[1])
    for rollout in rollouts:
        snapshot = frozen if rollout == rollouts[1] else step.freeze(kit, source, rollout)
        own = step.call_of(entries[rollout])
        if list(step.payloads(snapshot)) != [own] or snapshot.incomplete != (
            rollout == rollouts[0]
        ):
            kit.fail(
                expected=f"{rollout!r} to hold only its own entry, "
                f"incomplete={rollout == rollouts[0]}",
                observed=step.describe(snapshot),
                hint="key storage by the exact rollout id: no case folding or normalizing",
            )
    step.put(kit, sink, kit.entries.entry(f"{base}-A"))
    neighbour = kit.entries.entry(f"{base}_A")
    step.put(kit, sink, neighbour)
    step.mark(kit, sink, f"{base}_A", step.call_of(neighbour))
    again = step.freeze(kit, kit.source(), rollouts[1])
    step.expect_equal_snapshots(
        kit,
        frozen,
        again,
        hint="writes to other rollouts must not move this rollout's version or snapshot_id; "
        "keep one version counter per rollout",
    )
    if not step.drop(kit, source, rollouts[1], frozen.snapshot_id, frozen.version):
        kit.fail(
            expected=f"{rollouts[1]!r} to drop with its snapshot after writes to its neighbours",
            observed="False",
            hint="versions and fences are per rollout, never store-wide",
        )


_MAX_ID = 200
"""The longest rollout id the contract's pattern allows."""


def related_ids(base: str) -> list[str]:
    """Rollout ids that a prefix listing, a truncation or a folding key scheme would merge.

    Each is a valid id: ``base`` and ids extending it (``base.a``, ``base1``, ``base-1``),
    its case-swapped twin, and ids of the maximum length that differ only in their last
    character or are one character shorter.
    """
    long = (base + "-" + "z" * _MAX_ID)[: _MAX_ID - 1]
    return [
        base,
        f"{base}.a",
        f"{base}a",
        f"{base}1",
        f"{base}-1",
        f"{base}_1",
        base.swapcase(),
        long,
        long + "y",
        long + "Y",
        long[:-1] + "y",
    ]


@check("PUT-5", "related-ids")
def related_rollout_ids(kit: Kit) -> None:
    """Ids that extend, prefix or nearly equal another (up to 200 characters) stay apart, and
    so do pairs whose rollout and call ids join into another pair's join."""
    sink = kit.sink()
    ids = related_ids(kit.rollout_id("Rel"))
    entries = {rollout: kit.entries.entry(rollout, "call-1") for rollout in ids}
    for rollout in ids:
        step.put(kit, sink, entries[rollout])
    marked = ids[1::3]
    for rollout in marked:
        step.mark(kit, kit.sink_for(rollout), rollout, "call-1")
    source = kit.source()
    for rollout in ids:
        snapshot = step.freeze(kit, source, rollout)
        if step.payloads(snapshot) != step.sent([entries[rollout]]) or snapshot.incomplete != (
            rollout in marked
        ):
            kit.fail(
                expected=f"{rollout!r} ({len(rollout)} characters) to hold only its own entry, "
                f"incomplete={rollout in marked}",
                observed=step.describe(snapshot),
                hint="key storage by the exact, whole rollout id: a prefix match, a pattern "
                "listing ('r*' also finds 'r1') or a cut at some length merges rollouts",
            )
    _joined_pairs(kit)


def _expect_pairs_apart(kit: Kit, pairs: list[tuple[str, str]], why: str) -> None:
    """Put one entry per ``(rollout, call)`` pair; each rollout must freeze holding only its own."""
    __tracebackhide__ = True
    own: dict[str, list[Any]] = {}
    sink = kit.sink()
    for rollout, call in pairs:
        entry = kit.entries.entry(rollout, call, prompt_len=2, generation_len=1)
        own.setdefault(rollout, []).append(entry)
        step.put(kit, sink, entry)
    for rollout, entries in own.items():
        snapshot = step.freeze(kit, kit.source_for(rollout), rollout)
        if step.payloads(snapshot) != step.sent(entries) or snapshot.incomplete:
            calls = sorted(step.call_of(entry) for entry in entries)
            kit.fail(
                expected=f"{rollout!r} to hold only its own calls {calls}, {why}",
                observed=step.describe(snapshot),
                hint="key entries by the pair (rollout id, call id), never by one string joining "
                "them: rollout 'r' with call 'a.x' and rollout 'r.a' with call 'x' both join to "
                "'r.a.x', and a listing by the pattern 'r.*' finds both",
            )


def _joined_pairs(kit: Kit) -> None:
    """Pairs whose rollout and call ids, joined, spell another pair's join: every separator a
    rollout id can hold, then chains drawn from the hazard grammar."""
    _expect_pairs_apart(
        kit, list(hazards.joined_pairs(kit.rollout_id("Join"))), "beside pairs joining alike"
    )

    @_property_settings(6)
    @given(hazards.join_recipes())
    def drawn(recipe: hazards.JoinRecipe) -> None:
        pairs = hazards.chained_pairs(kit.rollout_id("jn"), recipe)
        _expect_pairs_apart(kit, pairs, f"beside a chain joined with {recipe[0]!r}/{recipe[2]!r}")

    step.run_property(kit, drawn)


@check("PUT-6", "any-call-id")
def any_call_id(kit: Kit) -> None:
    """Any non-empty model_call_id string, look-alikes included, is kept apart and exact."""
    sink = kit.sink()
    rollout = kit.rollout_id()
    entries = [
        kit.entries.entry(rollout, call, prompt_len=4, generation_len=2)
        for call in (*ODD_CALL_IDS, *LOOKALIKE_CALL_IDS)
    ]
    for entry in entries:
        step.put(kit, sink, entry)
    snapshot = step.freeze(kit, kit.source(), rollout)
    for entry in entries:
        _expect_round_trip(kit, entry, snapshot)
    if len(snapshot.entries) != len(entries):
        kit.fail(
            expected=f"{len(entries)} entries, one per call id",
            observed=step.describe(snapshot),
            hint="never split or normalize call ids",
        )

    @_property_settings(15)
    @given(model_call_ids)
    def round_trip(call_id: str) -> None:
        target = kit.rollout_id("gen")
        entry = kit.entries.entry(target, call_id, prompt_len=2, generation_len=1)
        step.put(kit, sink, entry)
        _expect_round_trip(kit, entry, step.freeze(kit, kit.source_for(target), target))

    step.run_property(kit, round_trip)


_BASIC_ATTEMPTS = 8
"""Puts each frozen elsewhere at once, alternately by a source built before and after it,
some of them large: a commit left behind the ack loses one of these races, run after run."""


@basic("PUT-1", "visible-on-return")
def basic_visible_on_return(kit: Kit) -> None:
    """PUT-1 and FREEZE-1: a plain put is visible to a fresh source at once; snapshots read."""
    sink = kit.sink()
    for attempt in range(_BASIC_ATTEMPTS):
        rollout = kit.rollout_id("basic")
        size = 4096 if attempt % 4 == 3 else None
        entry = kit.entries.entry(rollout, prompt_len=size, generation_len=size)
        seen = step.visible_after(kit, sink, entry, built_before=attempt % 2 == 1)
        if isinstance(seen, Unreadable):
            raise seen
        step.expect(
            kit,
            isinstance(seen, SnapshotView) and bool(seen.entries),
            "a plain entry visible to a fresh source as soon as put returned",
            step.describe(seen)
            if isinstance(seen, SnapshotView)
            else kit.redact(f"the fresh source's freeze raised {type(seen).__name__}: {seen}"),
            "ack a put only once the write is durable and visible",
        )


@basic(None, "isolation")
def basic_isolation(kit: Kit) -> None:
    """PUT-5 and PUT-6: look-alike rollouts stay apart; odd ASCII call ids come back exactly."""
    sink, source = kit.sink(), kit.source()
    base = kit.rollout_id("Iso")
    ids = [f"{base}.a", f"{base}_a", f"{base}.A"]
    entries = [kit.entries.entry(rollout) for rollout in ids]
    for entry in entries:
        step.put(kit, sink, entry, clause="PUT-5")
    first = step.freeze(kit, source, ids[0], clause="PUT-5")
    step.put(kit, sink, kit.entries.entry(f"{base}-a"), clause="PUT-5")
    for rollout, entry in zip(ids, entries, strict=True):
        view = step.freeze(kit, source, rollout, clause="PUT-5")
        step.expect(
            kit,
            view.payloads() == step.sent([entry]),
            f"{rollout!r} to hold only its own entry",
            step.describe(view),
            "key storage by the exact rollout id",
            clause="PUT-5",
        )
    step.expect(
        kit,
        step.state(step.freeze(kit, source, ids[0], clause="PUT-5")) == step.state(first),
        "writes to other rollouts to leave this one's snapshot as it was",
        step.describe(first),
        "keep one version per rollout",
        clause="PUT-5",
    )
    rollout = kit.rollout_id("calls")
    odd = [
        kit.entries.entry(rollout, call, prompt_len=4, generation_len=2)
        for call in (*ODD_CALL_IDS, "a/b", "a_b", "A/B")
        if call.isascii()
    ]
    for entry in odd:
        step.put(kit, sink, entry, clause="PUT-6")
    view = step.freeze(kit, source, rollout, clause="PUT-6")
    step.expect(
        kit,
        view.payloads() == step.sent(odd),
        "odd call ids to come back exactly",
        step.describe(view),
        "never split, cut or normalize call ids",
        clause="PUT-6",
    )
