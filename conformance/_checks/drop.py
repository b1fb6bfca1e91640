"""DROP: only the exact current snapshot retires; a refused drop destroys nothing."""

from __future__ import annotations

from conformance._checks._operations import (
    describe,
    drop,
    expect_equal_snapshots,
    freeze,
    mark,
    put,
)
from conformance._kit import Endpoint, Kit
from conformance._reading import SnapshotView, read_snapshot
from conformance._registry import check
from conformance._violation import fail


def _frozen(kit: Kit, entries: int = 2) -> tuple[Endpoint, str, SnapshotView]:
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    for _ in range(entries):
        put(kit, sink, kit.entries.entry(rollout))
    return source, rollout, freeze(kit, source, rollout)


def _expect_refused(
    kit: Kit, source: Endpoint, rollout: str, snapshot_id: str, version: int, why: str
) -> None:
    if drop(kit, source, rollout, snapshot_id, version):
        kit.fail(
            expected=f"drop to return False for {why}",
            observed="True",
            hint="retire only when both snapshot_id and version equal the current frozen state",
        )


@check("DROP-1", "exact-snapshot")
def exact_snapshot(kit: Kit) -> None:
    """Drop with the exact snapshot_id and version of the frozen state returns True."""
    _, rollout, snapshot = _frozen(kit)
    if not drop(kit, kit.source(), rollout, snapshot.snapshot_id, snapshot.version):
        kit.fail(
            expected="True for the exact current snapshot",
            observed=f"False for {describe(snapshot)}",
            hint="compare the stored frozen snapshot_id and version, from any instance",
        )


@check("DROP-2", "wrong-snapshot-id")
def wrong_snapshot_id(kit: Kit) -> None:
    """Drop with another snapshot_id and the right version returns False."""
    source, rollout, snapshot = _frozen(kit)
    for other in (snapshot.snapshot_id + "x", "", snapshot.snapshot_id.upper() + "-other"):
        if other != snapshot.snapshot_id:
            _expect_refused(
                kit,
                source,
                rollout,
                other,
                snapshot.version,
                f"snapshot_id {other!r} (current {snapshot.snapshot_id!r})",
            )


@check("DROP-2", "stale-version")
def stale_version(kit: Kit) -> None:
    """Drop with the right snapshot_id and a version off by any amount returns False."""
    source, rollout, snapshot = _frozen(kit)
    for delta in (1, -1, 2, 1000, -(snapshot.version + 5)):
        _expect_refused(
            kit,
            source,
            rollout,
            snapshot.snapshot_id,
            snapshot.version + delta,
            f"version {snapshot.version + delta} (current {snapshot.version})",
        )


@check("DROP-2", "unfrozen-rollout")
def unfrozen_rollout(kit: Kit) -> None:
    """Drop of a rollout that was written but never frozen returns False."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    put(kit, sink, kit.entries.entry(rollout))
    for version in (0, 1, 2):
        _expect_refused(
            kit,
            source,
            rollout,
            "never-frozen",
            version,
            "a rollout that was never frozen",
        )


@check("DROP-2", "unknown-rollout")
def unknown_rollout(kit: Kit) -> None:
    """Drop of a rollout that never existed returns False."""
    _expect_refused(kit, kit.source(), kit.rollout_id("unknown"), "any", 0, "an unknown rollout")


@check("DROP-3", "refusal-destroys-nothing")
def refusal_destroys_nothing(kit: Kit) -> None:
    """After refused drops, the next freeze returns the same evidence and can still drop."""
    source, rollout, snapshot = _frozen(kit, entries=3)
    for snapshot_id, version in (
        (snapshot.snapshot_id, snapshot.version + 1),
        (snapshot.snapshot_id + "x", snapshot.version),
    ):
        if drop(kit, source, rollout, snapshot_id, version):
            fail(
                "DROP-2",
                expected=f"drop to return False for ({snapshot_id!r}, {version}) "
                f"(current {snapshot.snapshot_id!r}, {snapshot.version})",
                observed="True",
                hint="retire only when both snapshot_id and version equal the current frozen state",
            )
    again = freeze(kit, kit.source(), rollout)
    expect_equal_snapshots(
        kit,
        snapshot,
        again,
        hint="a refused drop must not delete, unfreeze or re-version anything",
    )
    if not drop(kit, source, rollout, snapshot.snapshot_id, snapshot.version):
        kit.fail(
            expected="the exact snapshot to still drop after refused attempts",
            observed="False",
            hint="a refused drop must leave the rollout as it was",
        )


@check("DROP-4", "mark-after-freeze")
def mark_after_freeze(kit: Kit) -> None:
    """A mark_incomplete after freeze makes the old snapshot's drop return False."""
    source, rollout, snapshot = _frozen(kit)
    mark(kit, kit.sink(), rollout, "late-failure")
    _expect_refused(
        kit,
        source,
        rollout,
        snapshot.snapshot_id,
        snapshot.version,
        "a snapshot taken before a mark_incomplete",
    )
    current = freeze(kit, source, rollout)
    if not current.incomplete:
        kit.fail(
            expected="the new snapshot to be incomplete",
            observed=describe(current),
            hint="see MASK-3",
        )


@check("DROP-5", "delete-semantics")
def delete_semantics(kit: Kit) -> None:
    """After a successful drop the records are gone, unless the target declares no-delete."""
    source, rollout, snapshot = _frozen(kit)
    if not drop(kit, source, rollout, snapshot.snapshot_id, snapshot.version):
        kit.fail(expected="True for the exact snapshot", observed="False", hint="see DROP-1")
    try:
        after: SnapshotView | None = read_snapshot(kit.source().freeze(rollout))
    except Exception:
        after = None
    kept = after is not None and bool(after.entries)
    if kit.claims("no-delete"):
        if not kept:
            kit.fail(
                expected="the records to still freeze after drop (no-delete declared)",
                observed="they were gone",
                hint="a transport that cannot delete keeps the records readable",
            )
    elif kept:
        assert after is not None
        kit.fail(
            expected="the dropped records to be gone",
            observed=f"freeze after drop returned {describe(after)}",
            hint="delete on drop, or declare --tokcap-capability=no-delete",
        )
