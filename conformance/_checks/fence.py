"""FENCE: a frozen rollout either refuses new calls or moves its version; a dropped one refuses."""

from __future__ import annotations

from typing import Any

from conformance import _steps as step
from conformance._kit import Endpoint, Kit
from conformance._reading import SnapshotView, entry_view
from conformance._registry import check
from conformance._workers import Operation, WorkerPlan, run_workers


@check("FENCE-1", "put-after-freeze")
def put_after_freeze(kit: Kit) -> None:
    """A new call after freeze raises, or bumps the version so the old snapshot cannot drop.

    The late put comes from the long-lived sink that wrote before the freeze (whatever it
    remembers of the rollout being open is stale by then) and, on other rollouts, from a
    fresh sink and from a sink in a spawned worker.
    """
    sink, source = kit.sink(), kit.source()
    for late_sink, who in ((sink, "the sink that wrote before the freeze"), (None, "a fresh sink")):
        rollout = kit.rollout_id()
        step.put(kit, sink, kit.entries.entry(rollout))
        before = step.freeze(kit, source, rollout)
        late = kit.entries.entry(rollout)
        error = step.raises((late_sink or kit.sink()).put, late)
        if error is not None:
            kit.observe("fence", "strict")
            continue
        kit.observe("fence", "relaxed")
        _relaxed_late_put(kit, source, before, late, who, twin=(sink, late_sink))
    if not kit.claims("process-local"):
        _late_put_elsewhere(kit, sink, source)


def _late_put_elsewhere(kit: Kit, sink: Endpoint, source: Endpoint) -> None:
    """The late put comes from a sink a spawned worker builds after the freeze here: a fence
    kept in this process's memory does not hold there."""
    __tracebackhide__ = True
    rollout = kit.rollout_id("elsewhere")
    step.put(kit, sink, kit.entries.entry(rollout))
    before = step.freeze(kit, source, rollout)
    late = kit.entries.entry(rollout)
    plan = WorkerPlan(
        kit.settings.sink,
        dict(kit.settings.sink_kwargs),
        (Operation("put", entry_view(late).payload),),
        entry_class=kit.settings.entry_class,
    )
    (outcome,) = run_workers([plan], together=False)
    if outcome.stage == "operation":
        return  # the put raised there: the fence held
    step.expect(
        kit,
        outcome.stage == "ok",
        "a sink built in a spawned worker to answer a late put, acked or raised",
        kit.redact(f"{outcome.stage}: {outcome.error}"),
        "build from the target string and kwargs alone",
        clause="SPAWN-1",
    )
    _relaxed_late_put(kit, source, before, late, "a sink in a spawned worker")


def _relaxed_late_put(
    kit: Kit,
    source: Endpoint,
    before: SnapshotView,
    late: Any,
    who: str,
    twin: tuple[Endpoint, Endpoint | None] | None = None,
) -> None:
    """Judge an acked put of a new call after ``before`` was frozen: the fence is relaxed.

    Where the old snapshot still drops, ``twin`` (the sink that wrote first and the one that
    put late, None for a fresh one) replays the late put on a rollout of its own: a version
    that moved there makes the drop DROP-4's to answer for.
    """
    __tracebackhide__ = True
    rollout = str(before.rollout_id)
    if kit.fence == "strict":
        kit.fail(
            expected=f"a put of a new call after freeze, from {who}, to raise "
            "(--tokcap-fence=strict)",
            observed="the put was acked",
            hint="refuse writes to a frozen rollout, checking the stored fence at every put",
        )
    # The old snapshot is tried before any new freeze: a store that compares with the version
    # its latest freeze recorded is right only once that freeze happened.
    if step.drop(kit, source, rollout, before.snapshot_id, before.version):
        moved = twin is not None and step.late_put_moves_version(kit, *twin, source)
        kit.fail(
            expected=f"drop of the snapshot taken before the late put from {who} to return False",
            observed="True: the late entry was retired without ever being consumed"
            + (" (the late put did move the version)" if moved else ""),
            hint="drop must compare the current version, not the one the last freeze saw; a "
            "sink must not trust what it remembers of a rollout being open",
            clause="DROP-4" if moved else None,
        )
    after = step.freeze(kit, kit.source(), rollout)
    if after.version == before.version or step.call_of(late) not in {
        entry.model_call_id for entry in after.entries
    }:
        kit.fail(
            expected=f"the late entry from {who} frozen under a new version",
            observed=f"before: {step.describe(before)}; after: {step.describe(after)}",
            hint="a relaxed fence must bump the version on every accepted write",
        )


@check("FENCE-2", "put-after-drop")
def put_after_drop(kit: Kit) -> None:
    """After a successful drop, a put for that rollout raises, for a new or an old call, from
    the sink that wrote it before and from fresh ones."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    first = kit.entries.entry(rollout)
    step.put(kit, sink, first)
    snapshot = step.freeze(kit, source, rollout)
    if not step.drop(kit, source, rollout, snapshot.snapshot_id, snapshot.version):
        kit.fail(
            expected="drop of the exact snapshot to return True",
            observed="False",
            hint="see DROP-1",
        )
    for label, entry, endpoint in (
        ("a new call", kit.entries.entry(rollout), kit.sink()),
        ("the dropped call", first, kit.sink()),
        ("a new call, from the sink that wrote before the drop,", kit.entries.entry(rollout), sink),
    ):
        if step.raises(endpoint.put, entry) is None:
            kit.fail(
                expected=f"a put of {label} after drop to raise",
                observed="the put was acked into a retired rollout",
                hint="keep a tombstone for dropped rollouts and refuse writes to them",
            )
