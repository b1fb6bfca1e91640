"""MASK: marking a rollout incomplete is durable, sticky, versioned and keeps the evidence."""

from __future__ import annotations

from conformance._checks._operations import (
    call_of,
    describe,
    drop,
    freeze,
    mark,
    payloads,
    put,
    raises,
    sent,
)
from conformance._entries import ODD_CALL_IDS
from conformance._kit import Kit
from conformance._reading import entry_view, read_snapshot
from conformance._registry import check
from conformance._violation import ClauseViolation, NotClaimed, fail
from conformance._workers import Operation, WorkerPlan, run_workers


def _expect_incomplete(kit: Kit, rollout: str, why: str, hint: str) -> None:
    snapshot = freeze(kit, kit.source(), rollout)
    if not snapshot.incomplete:
        kit.fail(expected=f"incomplete=True {why}", observed=describe(snapshot), hint=hint)


@check("MASK-1", "fresh-instance")
def fresh_instance(kit: Kit) -> None:
    """A mark is seen by a fresh source instance in this process."""
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    put(kit, kit.sink(), entry)
    mark(kit, kit.sink(), rollout, call_of(entry))
    _expect_incomplete(
        kit,
        rollout,
        "after mark_incomplete",
        "mark_incomplete must be durable before it returns",
    )


@check("MASK-1", "other-process")
def other_process(kit: Kit) -> None:
    """A mark made by a sink in a spawned worker is seen by a source here."""
    if kit.claims("process-local"):
        raise NotClaimed("the target declares process-local")
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    plan = WorkerPlan(
        kit.settings.sink,
        dict(kit.settings.sink_kwargs),
        (
            Operation("put", entry_view(entry).payload),
            Operation("mark", rollout_id=rollout, model_call_id=call_of(entry)),
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
    _expect_incomplete(
        kit,
        rollout,
        "after a mark in another process",
        "keep marks where every process reads them",
    )


@check("MASK-2", "sticky")
def sticky(kit: Kit) -> None:
    """No later put, freeze or re-mark clears incomplete."""
    sink = kit.sink()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    put(kit, sink, entry)
    mark(kit, sink, rollout, call_of(entry))
    put(kit, sink, kit.entries.entry(rollout))
    put(kit, sink, entry)
    _expect_incomplete(kit, rollout, "after later puts", "never clear the incomplete flag on a put")
    mark(kit, sink, rollout, call_of(entry))
    raises(sink.put, entry)
    _expect_incomplete(
        kit,
        rollout,
        "after freeze and re-mark",
        "never clear the incomplete flag on freeze or re-mark",
    )


@check("MASK-3", "after-freeze")
def after_freeze(kit: Kit) -> None:
    """A mark after freeze is accepted and changes the version."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    put(kit, sink, entry)
    before = freeze(kit, source, rollout)
    mark(kit, sink, rollout, call_of(entry))
    after = freeze(kit, kit.source(), rollout)
    if not after.incomplete or after.version == before.version:
        kit.fail(
            expected="incomplete=True under a new version",
            observed=f"before: {describe(before)}; after: {describe(after)}",
            hint="a mark is a state change: record it after freeze and bump the version",
        )


@check("MASK-4", "conflict-masks")
def conflict_masks(kit: Kit) -> None:
    """A conflicting re-put that does not raise leaves the rollout incomplete."""
    sink = kit.sink()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    put(kit, sink, entry)
    if raises(kit.sink().put, kit.entries.variant(entry)) is None:
        _expect_incomplete(
            kit,
            rollout,
            "after an unrefused conflicting re-put",
            "mark the rollout incomplete when a call id comes back changed",
        )


@check("MASK-5", "keeps-evidence")
def keeps_evidence(kit: Kit) -> None:
    """A masked rollout freezes with the same entries every time."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    entries = [kit.entries.entry(rollout) for _ in range(3)]
    for entry in entries:
        put(kit, sink, entry)
    mark(kit, sink, rollout, call_of(entries[0]))
    expected = sent(entries)
    for endpoint in (source, source, kit.source()):
        snapshot = freeze(kit, endpoint, rollout)
        if payloads(snapshot) != expected:
            kit.fail(
                expected=f"all {len(entries)} entries of the masked rollout",
                observed=describe(snapshot),
                hint="masking keeps the evidence; only a consumer's drop removes it",
            )
        if not snapshot.incomplete:
            fail(
                "MASK-2",
                expected="every freeze after the mark to say incomplete=True",
                observed=describe(snapshot),
                hint="never clear the incomplete flag on freeze",
            )
    current = freeze(kit, source, rollout)
    if not drop(kit, source, rollout, current.snapshot_id, current.version):
        kit.fail(
            expected="the masked snapshot to drop with its exact id and version",
            observed="False",
            hint="a masked rollout is retired like any other",
        )


@check("MASK-6", "after-drop")
def after_drop(kit: Kit) -> None:
    """A mark on a dropped rollout may raise or return, but no later freeze comes back clean."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    put(kit, sink, kit.entries.entry(rollout))
    snapshot = freeze(kit, source, rollout)
    if not drop(kit, source, rollout, snapshot.snapshot_id, snapshot.version):
        fail(
            "DROP-1",
            expected="the exact snapshot to drop",
            observed="False",
            hint="compare the stored frozen snapshot_id and version",
        )
    raises(kit.sink().mark_incomplete, rollout, "after-drop")
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
            observed=f"freeze after drop returned {describe(later)}",
            hint="delete on drop, or declare --tokcap-capability=no-delete",
        )
    if not later.incomplete:
        kit.fail(
            expected="a freeze after drop and mark to raise or to be incomplete",
            observed=describe(later),
            hint="keep a dropped rollout retired: refuse the mark, or keep it and show it",
        )


@check("MASK-6", "any-call-id")
def any_call_id(kit: Kit) -> None:
    """mark_incomplete accepts any model_call_id: empty, odd, or one no entry has."""
    sink = kit.sink()
    for call in ("", *ODD_CALL_IDS):
        rollout = kit.rollout_id()
        mark(kit, sink, rollout, call)
        _expect_incomplete(
            kit,
            rollout,
            f"after mark_incomplete with {call[:30]!r}",
            "accept any call id string, empty included",
        )
    for call in ("", "never-put", "call-1 "):
        # A failed model call has no entry: its mark must mask a rollout that has others.
        rollout = kit.rollout_id()
        put(kit, sink, kit.entries.entry(rollout, "call-1"))
        mark(kit, sink, rollout, call)
        _expect_incomplete(
            kit,
            rollout,
            f"after mark_incomplete with {call[:30]!r}",
            "accept any call id string, empty included",
        )
