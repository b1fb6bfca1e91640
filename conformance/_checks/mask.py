"""MASK: marking a rollout incomplete is durable, sticky, versioned and keeps the evidence."""

from __future__ import annotations

from conformance import _steps as step
from conformance._entries import ODD_CALL_IDS
from conformance._kit import Endpoint, Kit
from conformance._reading import SnapshotView, entry_view, read_snapshot
from conformance._registry import basic, check
from conformance._violation import ClauseViolation, NotClaimed, fail
from conformance._workers import Operation, WorkerPlan, run_workers

_STICKY_ON_PUT = "never clear the incomplete flag on a put"
_MASKED_RETIRES = "a masked rollout is retired like any other"
_ANY_CALL_ID = "accept any call id string, empty included"


def _expect_incomplete(kit: Kit, rollout: str, why: str, hint: str) -> None:
    snapshot = step.freeze(kit, kit.source_for(rollout), rollout)
    if not snapshot.incomplete:
        kit.fail(expected=f"incomplete=True {why}", observed=step.describe(snapshot), hint=hint)


def _expect_masked_from_then_on(kit: Kit, rollout: str, why: str, hint: str) -> None:
    """Incomplete at the next freeze and at the freeze after it, each through a source that
    never read the rollout: a store that forgets the conflict once it has reported it breaks
    "from then on"."""
    _expect_incomplete(kit, rollout, why, hint)
    _expect_incomplete(kit, rollout, f"{why}, frozen a second time", hint)


@check("MASK-1", "fresh-instance")
def fresh_instance(kit: Kit) -> None:
    """A mark is seen by a fresh source instance in this process, and by one built before it."""
    early = kit.source()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    step.put(kit, kit.sink(), entry)
    step.mark(kit, kit.sink(), rollout, step.call_of(entry))
    _expect_incomplete(
        kit,
        rollout,
        "after mark_incomplete",
        "mark_incomplete must be durable before it returns",
    )
    seen = step.freeze(kit, early, rollout)
    if not seen.incomplete:
        kit.fail(
            expected="incomplete=True from a source built before the mark",
            observed=step.describe(seen),
            hint="a long-lived source must read marks made by any sink since it was built",
        )
    # A rollout's first model call may fail before anything of it was put: its mark is then
    # all the store holds of the rollout, and the next freeze must still report it.
    unwritten = kit.rollout_id("unwritten")
    step.mark(kit, kit.sink(), unwritten, "call-0")
    _expect_incomplete(
        kit,
        unwritten,
        "after mark_incomplete on a rollout nothing was put into yet",
        "keep a mark even when the rollout has no entries: the failed call may have been its first",
    )


@check("MASK-1", "other-process")
def other_process(kit: Kit) -> None:
    """A mark made by a sink in a spawned worker is seen by a source here."""
    if kit.claims("process-local"):
        raise NotClaimed("the target declares process-local")
    rollout, read_here = kit.rollout_id(), kit.rollout_id("read-here")
    entry, seen_entry = kit.entries.entry(rollout), kit.entries.entry(read_here)
    # A rollout this process froze before the worker marks it: a flag kept per process from
    # that first freeze must give way to the mark.
    early = kit.source()
    step.put(kit, kit.sink(), seen_entry)
    step.freeze(kit, early, read_here)
    plan = WorkerPlan(
        kit.settings.sink,
        dict(kit.settings.sink_kwargs),
        (
            Operation("put", entry_view(entry).payload),
            Operation("mark", rollout_id=rollout, model_call_id=step.call_of(entry)),
            Operation("mark", rollout_id=read_here, model_call_id=step.call_of(seen_entry)),
        ),
        entry_class=kit.settings.entry_class,
    )
    outcome = run_workers([plan], together=False)[0]
    if outcome.stage != "ok":
        kit.fail(
            expected="a spawned worker's mark_incomplete to be acked",
            observed=kit.redact(f"{outcome.stage}: {outcome.error}"),
            hint="build the sink from the target and kwargs alone",
        )
    for marked, how in ((rollout, ""), (read_here, " of a rollout this process froze before")):
        _expect_incomplete(
            kit,
            marked,
            f"after a mark in another process{how}",
            "keep marks where every process reads them, and read them on every freeze: never "
            "keep a rollout's flag from an earlier freeze",
        )
    seen = step.freeze(kit, early, read_here)
    if not seen.incomplete:
        kit.fail(
            expected="incomplete=True from the source that froze the rollout before another "
            "process marked it",
            observed=step.describe(seen),
            hint="a long-lived source must read marks made by any process since it last froze",
        )


@check("MASK-2", "sticky")
def sticky(kit: Kit) -> None:
    """No later put (the marked call's own included), freeze or re-mark clears incomplete."""
    sink = kit.sink()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    step.put(kit, sink, entry)
    step.mark(kit, sink, rollout, step.call_of(entry))
    step.put(kit, sink, kit.entries.entry(rollout))
    step.put(kit, sink, entry)
    _expect_incomplete(kit, rollout, "after later puts", _STICKY_ON_PUT)
    step.mark(kit, sink, rollout, step.call_of(entry))
    step.raises(sink.put, entry)
    _expect_incomplete(
        kit,
        rollout,
        "after freeze and re-mark",
        "never clear the incomplete flag on freeze or re-mark",
    )
    # A call marked as failed whose entry arrives after all (a retry that got through): the
    # flag is the rollout's, not the call's.
    for rollout, before in ((kit.rollout_id("retried"), False), (kit.rollout_id("later"), True)):
        late = kit.entries.entry(rollout)
        if before:
            step.put(kit, sink, kit.entries.entry(rollout))
        step.mark(kit, sink, rollout, step.call_of(late))
        step.raises(sink.put, late)
        _expect_incomplete(
            kit, rollout, "after the marked call's own entry was put", _STICKY_ON_PUT
        )


@check("MASK-3", "after-freeze")
def after_freeze(kit: Kit) -> None:
    """A mark after freeze is accepted and changes the version, seen by a fresh source and
    by the long-lived one that froze before it, whichever sink marked."""
    sink, source = kit.sink(), kit.source()
    for marker in ("the sink that wrote", "a fresh sink"):
        rollout = kit.rollout_id()
        entry = kit.entries.entry(rollout)
        step.put(kit, sink, entry)
        before = step.freeze(kit, source, rollout)
        step.mark(
            kit,
            sink if marker == "the sink that wrote" else kit.sink(),
            rollout,
            step.call_of(entry),
        )
        shown = False
        for reader, endpoint in (("the same source", source), ("a fresh source", kit.source())):
            after = step.freeze(kit, endpoint, rollout)
            if shown and not after.incomplete:
                kit.fail(
                    expected="the mark to stay once a freeze showed it",
                    observed=step.describe(after),
                    hint="never clear the incomplete flag on freeze",
                    clause="MASK-2",
                )
            shown = shown or after.incomplete
            if not after.incomplete or after.version == before.version:
                kit.fail(
                    expected=f"incomplete=True under a new version, frozen by {reader} after "
                    f"{marker} marked",
                    observed=f"before: {step.describe(before)}; after: {step.describe(after)}",
                    hint="a mark is a state change: record it after freeze and bump the "
                    "version; a source that caches a snapshot must see every later change",
                )


@check("MASK-4", "conflict-masks")
def conflict_masks(kit: Kit) -> None:
    """A conflicting re-put that does not raise leaves the rollout incomplete, whichever one
    field it changes (a difference the store cannot keep at all is PUT-2's)."""
    sink = kit.sink()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    step.put(kit, sink, entry)
    if step.raises(kit.sink().put, kit.entries.variant(entry)) is None:
        _expect_masked_from_then_on(
            kit,
            rollout,
            "after an unrefused conflicting re-put",
            "mark the rollout incomplete when a call id comes back changed, and keep it so: "
            "a freeze that reported the conflict must not clear it",
        )
    for what, first, second in kit.entries.field_variants(kit.rollout_id):
        rollout = entry_view(first).rollout_id
        step.put(kit, sink, first)
        if step.raises(sink.put, second) is None and step.round_trips(kit, first, second):
            _expect_masked_from_then_on(
                kit,
                rollout,
                f"after an unrefused re-put differing only in {what}",
                "compare the whole payload (every field, floats bit for bit, extra fields) and "
                "mark the rollout incomplete when a call id comes back changed",
            )


@check("MASK-5", "keeps-evidence")
def keeps_evidence(kit: Kit) -> None:
    """A masked rollout freezes with the same entries every time."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    entries = [kit.entries.entry(rollout) for _ in range(3)]
    for entry in entries:
        step.put(kit, sink, entry)
    step.mark(kit, sink, rollout, step.call_of(entries[0]))
    expected = step.sent(entries)
    for endpoint in (source, source, kit.source()):
        snapshot = step.freeze(kit, endpoint, rollout)
        if step.payloads(snapshot) != expected:
            kit.fail(
                expected=f"all {len(entries)} entries of the masked rollout",
                observed=step.describe(snapshot),
                hint="masking keeps the evidence; only a consumer's drop removes it",
            )
        if not snapshot.incomplete:
            fail(
                "MASK-2",
                expected="every freeze after the mark to say incomplete=True",
                observed=step.describe(snapshot),
                hint="never clear the incomplete flag on freeze",
            )
    current = step.freeze(kit, source, rollout)
    if not step.drop(kit, source, rollout, current.snapshot_id, current.version):
        kit.fail(
            expected="the masked snapshot to drop with its exact id and version",
            observed="False",
            hint=_MASKED_RETIRES,
            clause="DROP-1",
        )


@check("MASK-6", "after-drop")
def after_drop(kit: Kit) -> None:
    """A mark on a dropped rollout may raise or return, but no later freeze comes back clean."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    step.put(kit, sink, kit.entries.entry(rollout))
    snapshot = step.freeze(kit, source, rollout)
    if not step.drop(kit, source, rollout, snapshot.snapshot_id, snapshot.version):
        fail(
            "DROP-1",
            expected="the exact snapshot to drop",
            observed="False",
            hint="compare the stored frozen snapshot_id and version",
        )
    step.raises(kit.sink().mark_incomplete, rollout, "after-drop")
    try:
        later = read_snapshot(kit.source().freeze(rollout))
    except ClauseViolation:
        raise
    except Exception:
        return  # A retired rollout may refuse to freeze.
    if later.entries and not kit.claims("no-delete"):
        fail(
            "DROP-5",
            expected="the dropped records to be gone",
            observed=f"freeze after drop returned {step.describe(later)}",
            hint="delete on drop, or declare --tokcap-capability=no-delete",
        )
    if not later.incomplete:
        kit.fail(
            expected="a freeze after drop and mark to raise or to be incomplete",
            observed=step.describe(later),
            hint="keep a dropped rollout retired: refuse the mark, or keep it and show it",
        )
    _unclean_after_second_drop(kit, kit.source_for(rollout), rollout, later)


def _unclean_after_second_drop(
    kit: Kit, source: Endpoint, rollout: str, masked: SnapshotView, *, clause: str | None = None
) -> None:
    """Where the masked snapshot of a dropped rollout that took a mark drops as well, the
    next freeze still raises or is incomplete: a consumer retiring that state has not made
    the rollout clean."""
    __tracebackhide__ = True
    try:
        dropped = kit.run(
            source.raw.drop(rollout, snapshot_id=masked.snapshot_id, version=masked.version)
        )
    except Exception:
        return  # refusing to retire a dropped rollout again keeps it retired
    if dropped is not True:
        return
    try:
        again = read_snapshot(kit.run(kit.source_for(rollout).raw.freeze(rollout)))
    except Exception:
        return  # a retired rollout may refuse to freeze
    step.expect(
        kit,
        again.incomplete,
        "a freeze to raise or be incomplete after a dropped rollout took a mark and its "
        "masked snapshot was dropped too",
        step.describe(again),
        "a mark on a dropped rollout masks it for good: keep the rollout retired (refuse the "
        "mark or the freeze), or keep the mark through every later drop",
        clause=clause,
    )


@check("MASK-6", "any-call-id")
def any_call_id(kit: Kit) -> None:
    """mark_incomplete accepts any model_call_id: empty, odd, or one no entry has."""
    sink = kit.sink()
    for call in ("", *ODD_CALL_IDS):
        rollout = kit.rollout_id()
        step.mark(kit, sink, rollout, call)
        _expect_incomplete(
            kit,
            rollout,
            f"after mark_incomplete with {call[:30]!r}",
            _ANY_CALL_ID,
        )
    for call in ("", "never-put", "call-1 "):
        # A failed model call has no entry: its mark must mask a rollout that has others.
        rollout = kit.rollout_id()
        step.put(kit, sink, kit.entries.entry(rollout, "call-1"))
        step.mark(kit, sink, rollout, call)
        _expect_incomplete(
            kit,
            rollout,
            f"after mark_incomplete with {call[:30]!r}",
            _ANY_CALL_ID,
        )


@basic(None, "masking")
def basic_masking(kit: Kit) -> None:
    """MASK-1, MASK-5, MASK-3, MASK-2, MASK-6: a mark is seen, keeps entries, moves versions,
    sticks, masks for a call that never put, and masks a rollout nothing was put to."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id("mask")
    entry = kit.entries.entry(rollout)
    step.put(kit, sink, entry, clause="PUT-1")
    step.mark(kit, kit.sink(), rollout, step.call_of(entry), clause="MASK-1")
    seen = step.freeze(kit, kit.source(), rollout, clause="MASK-1")
    step.expect(
        kit,
        seen.incomplete,
        "a fresh source to see the mark: incomplete=True",
        step.describe(seen),
        "mark_incomplete must be durable and visible before it returns",
        clause="MASK-1",
    )
    step.expect(
        kit,
        seen.payloads() == step.sent([entry]),
        "the masked rollout to keep its entry",
        step.describe(seen),
        "masking keeps the evidence",
        clause="MASK-5",
    )
    fresh = kit.rollout_id("mask-frozen")
    fresh_entry = kit.entries.entry(fresh)
    step.put(kit, sink, fresh_entry, clause="PUT-1")
    clean = step.freeze(kit, source, fresh, clause="FREEZE-1")
    step.mark(kit, kit.sink(), fresh, step.call_of(fresh_entry), clause="MASK-3")
    shown = False
    for endpoint in (source, kit.source()):
        after = step.freeze(kit, endpoint, fresh, clause="MASK-3")
        # A later freeze that lost a mark an earlier one showed is not sticky: MASK-2.
        step.expect(
            kit,
            after.incomplete or not shown,
            "the mark to stay once a freeze showed it",
            step.describe(after),
            "never clear the incomplete flag on freeze",
            clause="MASK-2",
        )
        shown = shown or after.incomplete
        step.expect(
            kit,
            after.incomplete and after.version != clean.version,
            "a mark after freeze to show under a new version, to a fresh source and to the "
            "one that froze before",
            f"before: {step.describe(clean)}; after: {step.describe(after)}",
            "a mark is a state change: bump the version, and let no source serve a snapshot "
            "it kept from before",
            clause="MASK-3",
        )
    stale = kit.rollout_id("mask-stale")
    stale_entry = kit.entries.entry(stale)
    step.put(kit, sink, stale_entry, clause="PUT-1")
    old = step.freeze(kit, source, stale, clause="FREEZE-1")
    step.mark(kit, kit.sink(), stale, step.call_of(stale_entry), clause="DROP-4")
    step.expect(
        kit,
        not step.drop(kit, source, stale, old.snapshot_id, old.version, clause="DROP-4"),
        "drop of the snapshot taken before the mark to return False",
        "True",
        "drop must compare the current version, not the one frozen",
        clause="DROP-4",
    )
    step.mark(kit, sink, rollout, step.call_of(entry), clause="MASK-2")
    for _ in range(2):
        again = step.freeze(kit, source, rollout, clause="MASK-2")
        step.expect(
            kit,
            again.incomplete,
            "incomplete to stick over re-marks and freezes",
            step.describe(again),
            "never clear the incomplete flag",
            clause="MASK-2",
        )
    step.expect(
        kit,
        step.drop(kit, source, rollout, again.snapshot_id, again.version, clause="DROP-1"),
        "a masked snapshot to drop with its exact id and version",
        "False",
        _MASKED_RETIRES,
        clause="DROP-1",
    )
    later = kit.rollout_id("mask-late")
    first_entry = kit.entries.entry(later)
    step.put(kit, sink, first_entry, clause="PUT-1")
    step.mark(kit, sink, later, step.call_of(first_entry), clause="MASK-2")
    step.put(kit, sink, kit.entries.entry(later), clause="MASK-2")
    before = step.freeze(kit, source, later, clause="MASK-2")
    step.expect(
        kit,
        before.incomplete,
        "a put after a mark to leave it incomplete",
        step.describe(before),
        _STICKY_ON_PUT,
        clause="MASK-2",
    )
    failed = kit.rollout_id("mask-failed-call")
    step.put(kit, sink, kit.entries.entry(failed), clause="PUT-1")
    for call in ("never-put", ""):
        # A call that failed before it put anything is the usual reason to mark.
        step.mark(kit, sink, failed, call, clause="MASK-6")
    step.expect_masked(
        kit,
        failed,
        "marks of calls with no entry to mask the rollout",
        _ANY_CALL_ID,
        clause="MASK-6",
    )
    retired = kit.rollout_id("mask-retired")
    step.put(kit, sink, kit.entries.entry(retired), clause="PUT-1")
    consumed = step.freeze(kit, source, retired, clause="FREEZE-1")
    if step.drop(kit, source, retired, consumed.snapshot_id, consumed.version, clause="DROP-1"):
        step.raises(sink.mark_incomplete, retired, "after-drop")
        try:
            masked = read_snapshot(kit.run(source.raw.freeze(retired)))
        except Exception:
            masked = None  # a retired rollout may refuse to freeze
        if masked is not None:
            step.expect(
                kit,
                masked.incomplete,
                "a freeze after drop and mark to raise or to be incomplete",
                step.describe(masked),
                "keep a dropped rollout retired: refuse the mark, or keep it and show it",
                clause="MASK-6",
            )
            _unclean_after_second_drop(kit, source, retired, masked, clause="MASK-6")
    # A call that failed before the rollout's first put leaves a rollout with a mark alone.
    # Marks of calls with no entry were seen to mask above, so losing this one is about the
    # rollout, not the call id: MASK-1's.
    alone = kit.rollout_id("mask-alone")
    step.mark(kit, sink, alone, "failed-call", clause="MASK-1")
    step.expect_masked(
        kit,
        alone,
        "a mark on a rollout with no entry yet to mask it",
        "record a mark even for a rollout nothing was put to: no entry or row needs to exist",
        clause="MASK-1",
    )
