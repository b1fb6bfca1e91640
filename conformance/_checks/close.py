"""CLOSE: close is idempotent and loses nothing."""

from __future__ import annotations

from conformance import _steps as step
from conformance._kit import Kit
from conformance._registry import basic, check

_DURABLE_BEFORE_CLOSE = "every ack must already be durable when close runs"


@check("CLOSE-1", "idempotent")
def idempotent(kit: Kit) -> None:
    """Closing a sink and a source twice raises nothing, unused and after every operation."""
    rollout = kit.rollout_id("used")
    used_sink, used_source = kit.sink(), kit.source()
    entry = kit.entries.entry(rollout)
    step.put(kit, used_sink, entry)
    step.mark(kit, used_sink, rollout, step.call_of(entry))
    view = step.freeze(kit, used_source, rollout)
    step.drop(kit, used_source, rollout, view.snapshot_id, view.version)
    for endpoint, state in (
        (kit.sink(), "unused"),
        (kit.source(), "unused"),
        (used_sink, "after put and mark"),
        (used_source, "after freeze and drop"),
    ):
        for attempt in ("first", "second"):
            error = step.raises(endpoint.close)
            if error is not None:
                kit.fail(
                    expected=f"the {attempt} {endpoint.role}.close() {state} to succeed",
                    observed=kit.redact(f"{type(error).__name__}: {error}"),
                    hint="make close() a no-op once closed: forget every handle, descriptor "
                    "and connection the first close released",
                )


@check("CLOSE-2", "loses-nothing")
def loses_nothing(kit: Kit) -> None:
    """Everything acked before close is visible to a fresh source after it."""
    sink = kit.sink()
    rollout = kit.rollout_id()
    entries = [kit.entries.entry(rollout) for _ in range(5)]
    for entry in entries:
        step.put(kit, sink, entry)
    step.mark(kit, sink, rollout, step.call_of(entries[0]))
    # A call that failed before it put anything leaves a rollout with a mark and no entry.
    only_marked = kit.rollout_id("marked")
    step.mark(kit, sink, only_marked, "failed-call")
    error = step.raises(sink.close)
    if error is not None:
        kit.fail(
            expected="close() to succeed",
            observed=f"{type(error).__name__}",
            hint="see CLOSE-1",
        )
    snapshot = step.freeze(kit, kit.source(), rollout)
    expected = step.sent(entries)
    if step.payloads(snapshot) != expected or not snapshot.incomplete:
        kit.fail(
            expected=f"all {len(entries)} entries and the mark after close",
            observed=step.describe(snapshot),
            hint=_DURABLE_BEFORE_CLOSE,
        )
    marked = step.freeze(kit, kit.source(), only_marked)
    if not marked.incomplete:
        kit.fail(
            expected="a rollout with only a mark to stay incomplete after close",
            observed=step.describe(marked),
            hint=_DURABLE_BEFORE_CLOSE + "; a rollout with no entry still holds its mark",
        )
    _keeps_others_writes(kit)


def _keeps_others_writes(kit: Kit, clause: str | None = None) -> None:
    """A close writes nothing back: what another instance acked to the same rollout after this
    one's last write, entries and a mark, is there once this one closed."""
    __tracebackhide__ = True
    closing, other = kit.sink(), kit.sink()
    rollout = kit.rollout_id("close-shared")
    mine = kit.entries.entry(rollout)
    step.put(kit, closing, mine, clause="PUT-1")
    theirs = [kit.entries.entry(rollout) for _ in range(2)]
    for entry in theirs:
        step.put(kit, other, entry, clause="PUT-1")
    step.mark(kit, other, rollout, step.call_of(theirs[0]), clause="MASK-1")
    kit.run(closing.raw.close())
    after = step.freeze(kit, kit.source(), rollout)
    step.expect(
        kit,
        after.incomplete and after.payloads() == step.sent([mine, *theirs]),
        "what another instance acked to the rollout, entries and a mark, to be there after "
        "this instance closed",
        step.describe(after),
        "close must not write this instance's copy of a rollout back over the store: it is "
        "older than what other instances acked since",
        clause=clause,
    )


@basic("CLOSE-2", "closing")
def basic_closing(kit: Kit) -> None:
    """CLOSE-2: what was acked before close, a mark included, is there after it."""
    sink = kit.sink()
    rollout = kit.rollout_id("close")
    entry = kit.entries.entry(rollout)
    step.put(kit, sink, entry, clause="PUT-1")
    step.mark(kit, sink, rollout, step.call_of(entry), clause="MASK-1")
    only_marked = kit.rollout_id("close-marked")
    step.mark(kit, sink, only_marked, "failed-call", clause="MASK-6")
    kit.run(sink.raw.close())
    step.expect_masked(
        kit,
        only_marked,
        "a rollout with only a mark to stay incomplete after close",
        _DURABLE_BEFORE_CLOSE,
    )
    after = step.freeze(kit, kit.source(), rollout)
    step.expect(
        kit,
        after.incomplete and after.payloads() == step.sent([entry]),
        "the entry and the mark acked before close to be there after it",
        step.describe(after),
        _DURABLE_BEFORE_CLOSE,
    )
    _keeps_others_writes(kit, "CLOSE-2")
