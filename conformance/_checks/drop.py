"""DROP: only the exact current snapshot retires; a refused drop destroys nothing."""

from __future__ import annotations

from conformance._checks._operations import (
    call_of,
    describe,
    drop,
    expect_equal_snapshots,
    freeze,
    mark,
    payloads,
    put,
    raises,
    state,
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
    kit: Kit,
    source: Endpoint,
    rollout: str,
    snapshot_id: str,
    version: int,
    why: str,
    hint: str = "retire only when both snapshot_id and version equal the current frozen state",
) -> None:
    if drop(kit, source, rollout, snapshot_id, version):
        kit.fail(expected=f"drop to return False for {why}", observed="True", hint=hint)


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


_LONG_HISTORY = 260
"""State changes of one rollout: past 256, versions are no longer interned small ints."""


@check("DROP-1", "long-history")
def long_history(kit: Kit) -> None:
    """After hundreds of state changes the exact snapshot still drops, from a fresh source."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout, prompt_len=8, generation_len=4)
    put(kit, sink, entry)
    for _ in range(_LONG_HISTORY):
        freeze(kit, source, rollout)
        mark(kit, sink, rollout, call_of(entry))
    snapshot = freeze(kit, source, rollout)
    if not drop(kit, kit.source(), rollout, snapshot.snapshot_id, snapshot.version):
        kit.fail(
            expected=f"True for the exact current snapshot after {_LONG_HISTORY} state changes",
            observed=f"False for {describe(snapshot)}",
            hint="compare snapshot_id and version by value (==), never by identity (is): "
            "equal ints past 256 and equal strings read back elsewhere are other objects",
        )


@check("DROP-2", "unseen-state")
def unseen_state(kit: Kit) -> None:
    """After freeze and later writes, no pair a freeze did not return retires the rollout."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    put(kit, sink, entry)
    snapshot = freeze(kit, source, rollout)
    for change in range(1, 4):
        if change == 2:
            raises(kit.sink().put, kit.entries.entry(rollout))
        else:
            mark(kit, kit.sink(), rollout, call_of(entry))
        for delta in range(1, 2 * change + 1):
            _expect_refused(
                kit,
                source,
                rollout,
                snapshot.snapshot_id,
                snapshot.version + delta,
                f"version {snapshot.version + delta}, which no freeze returned (the snapshot "
                f"frozen was version {snapshot.version}, then {change} write(s) followed)",
                hint="retire only a pair a freeze returned: remember the frozen version, and "
                "refuse a guessed one even when it equals the current state's",
            )
    current = freeze(kit, kit.source(), rollout)
    if not drop(kit, source, rollout, current.snapshot_id, current.version):
        fail(
            "DROP-1",
            expected="the pair the latest freeze returned to drop",
            observed=f"False for {describe(current)}",
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
    mark(kit, kit.sink(), rollout, next(iter(payloads(snapshot))))
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


@check("DROP-4", "conflict-after-freeze")
def conflict_after_freeze(kit: Kit) -> None:
    """A conflicting re-put after freeze that changes the rollout's state retires nothing old."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    put(kit, sink, entry)
    snapshot = freeze(kit, source, rollout)
    raises(kit.sink().put, kit.entries.variant(entry))
    after = freeze(kit, kit.source(), rollout)
    if state(after)[1:] == state(snapshot)[1:]:
        return  # Refused and nothing changed: the old snapshot is still the current state.
    _expect_refused(
        kit,
        source,
        rollout,
        snapshot.snapshot_id,
        snapshot.version,
        f"a snapshot taken before a conflicting re-put changed the rollout "
        f"(before: {describe(snapshot)}; after: {describe(after)})",
        hint="a conflict that marks the rollout incomplete is a state change: bump the version",
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
