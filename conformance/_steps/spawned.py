"""Freezes by sources spawned workers build, compared with one made here or with each other."""

from __future__ import annotations

from typing import NoReturn

from conformance._history.events import Event, digest
from conformance._history.record import Action, Lane, LaneTargets, Workload
from conformance._kit import Kit
from conformance._reading import SnapshotView
from conformance._steps.operations import describe

__all__ = [
    "expect_in_spawned_worker",
    "expect_same_in_spawned_worker",
    "expect_spawned_freezes_agree",
]


def _freeze_in_spawned_worker(kit: Kit, rollout: str) -> Event | str:
    """Freeze ``rollout`` with a source a spawned worker builds (and closes when done); return
    the freeze's event, or why there is none."""
    workload = Workload(
        LaneTargets.of(kit.settings), [Lane("freezer", (Action("freeze", rollout),))]
    )
    workload.start()
    events, problems = workload.finish()
    frozen = [event for event in events if event.kind == "freeze"]
    if problems or not frozen or frozen[0].outcome != "ok":
        return problems[0] if problems else (frozen[0].error if frozen else "no freeze ran")
    return frozen[0]


def _unfrozen(kit: Kit, why: str, clause: str | None) -> NoReturn:
    __tracebackhide__ = True
    kit.fail(
        expected="a source in a spawned worker to freeze the unchanged rollout",
        observed=kit.redact(why),
        hint="build the source from the target and kwargs alone; keep nothing a freeze needs "
        "in the memory of the process that wrote",
        clause=clause,
    )


def expect_spawned_freezes_agree(kit: Kit, rollout: str, *, clause: str | None = None) -> None:
    """Fail ``clause`` (by default the check's own) unless two spawned workers, one after the
    other, freeze ``rollout`` to the same pair, entries and mask (FREEZE-2).

    Neither freeze is made here, so a store that keeps what this process wrote in memory until
    close (SPAWN-3's hazard) passes, and one whose ids differ from process to process does not.
    """
    __tracebackhide__ = True
    first = _freeze_in_spawned_worker(kit, rollout)
    if isinstance(first, str):
        _unfrozen(kit, first, clause)
    second = _freeze_in_spawned_worker(kit, rollout)
    if isinstance(second, str):
        _unfrozen(kit, second, clause)
    if _state(first) != _state(second):
        kit.fail(
            expected="two spawned workers to freeze the unchanged rollout to one snapshot",
            observed=kit.redact(f"{_shown(first)}, then {_shown(second)}"),
            hint=_SAME_HINT,
            clause=clause,
        )


def _state(event: Event) -> tuple[object, ...]:
    return (event.result, tuple(sorted(event.entries)), event.incomplete)


def _shown(event: Event) -> str:
    pair = event.result or ("<none>", "<none>")
    return (
        f"snapshot_id={pair[0]!r} version={pair[1]!r}, {len(event.entries)} entries, "
        f"incomplete={event.incomplete}"
    )


_SAME_HINT = (
    "derive snapshot_id and version from the stored state alone: never from hash() (salted "
    "per process), id(), the clock or a per-process counter"
)


def expect_same_in_spawned_worker(
    kit: Kit, first: SnapshotView, *, clause: str | None = None
) -> None:
    """Fail ``clause`` (by default the check's own) unless a source built in a spawned worker
    freezes ``first``'s rollout, unchanged since, to the same pair, entries and mask (FREEZE-2).
    """
    __tracebackhide__ = True
    there = _freeze_in_spawned_worker(kit, str(first.rollout_id))
    if isinstance(there, str):
        _unfrozen(kit, there, clause)
    here = tuple(sorted((entry.model_call_id, digest(entry.payload)) for entry in first.entries))
    if _state(there) != ((first.snapshot_id, first.version), here, first.incomplete):
        kit.fail(
            expected=f"the same snapshot in a spawned worker: {describe(first)}",
            observed=kit.redact(_shown(there)),
            hint=_SAME_HINT,
            clause=clause,
        )


def expect_in_spawned_worker(
    kit: Kit, rollout: str, call_id: str, *, hint: str, clause: str | None = None
) -> None:
    """Fail ``clause`` (by default the check's own) unless a source a spawned worker builds
    freezes ``rollout`` with ``call_id`` among its entries (PUT-1's "in any process").

    The entry was acked here and nothing here was closed: a store that keeps acked records in
    this process's memory, or in a buffer a thread writes out later, fails.
    """
    __tracebackhide__ = True
    there = _freeze_in_spawned_worker(kit, rollout)
    if isinstance(there, str):
        _unfrozen(kit, there, clause)
    if call_id not in {call for call, _ in there.entries}:
        kit.fail(
            expected=f"call {call_id!r}, acked here, in the freeze of a source built in a "
            "spawned worker",
            observed=kit.redact(_shown(there)),
            hint=hint,
            clause=clause,
        )
