"""A freeze by a source a spawned worker builds, compared with one made here."""

from __future__ import annotations

from conformance._history.events import digest
from conformance._history.record import Action, Lane, LaneTargets, Workload
from conformance._kit import Kit
from conformance._reading import SnapshotView
from conformance._steps.operations import describe

__all__ = ["expect_same_in_spawned_worker"]


def expect_same_in_spawned_worker(
    kit: Kit, first: SnapshotView, *, clause: str | None = None
) -> None:
    """Fail ``clause`` (by default the check's own) unless a source built in a spawned worker
    freezes ``first``'s rollout, unchanged since, to the same pair, entries and mask (FREEZE-2).
    """
    __tracebackhide__ = True
    rollout = str(first.rollout_id)
    workload = Workload(
        LaneTargets.of(kit.settings), [Lane("freezer", (Action("freeze", rollout),))]
    )
    workload.start()
    events, problems = workload.finish()
    frozen = [event for event in events if event.kind == "freeze"]
    if problems or not frozen or frozen[0].outcome != "ok":
        why = problems[0] if problems else (frozen[0].error if frozen else "no freeze ran")
        kit.fail(
            expected="a source in a spawned worker to freeze the unchanged rollout",
            observed=kit.redact(why),
            hint="build the source from the target and kwargs alone; keep nothing a freeze "
            "needs in the memory of the process that wrote",
            clause=clause,
        )
    there = frozen[0]
    here = tuple(sorted((entry.model_call_id, digest(entry.payload)) for entry in first.entries))
    seen = (there.result, tuple(sorted(there.entries)), there.incomplete)
    if seen != ((first.snapshot_id, first.version), here, first.incomplete):
        pair = there.result or ("<none>", "<none>")
        kit.fail(
            expected=f"the same snapshot in a spawned worker: {describe(first)}",
            observed=kit.redact(
                f"snapshot_id={pair[0]!r} version={pair[1]!r}, {len(there.entries)} entries, "
                f"incomplete={there.incomplete}"
            ),
            hint="derive snapshot_id and version from the stored state alone: never from "
            "hash() (salted per process), id(), the clock or a per-process counter",
            clause=clause,
        )
