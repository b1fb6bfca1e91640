"""DROP: only the exact current snapshot retires; a refused drop destroys nothing."""

from __future__ import annotations

from conformance import _steps as step
from conformance._entries import PATH_LIKE_CALL_IDS
from conformance._kit import Endpoint, Kit
from conformance._reading import SnapshotView, read_snapshot
from conformance._registry import basic, check
from conformance._violation import fail

_EXACT_ONLY = "retire only when both snapshot_id and version equal the current frozen state"
_COMPARE_STORED = "compare the stored frozen snapshot_id and version, from any instance"
_REFUSAL_KEEPS = "a refused drop must not delete, unfreeze or re-version anything"
_DELETE_OR_DECLARE = "delete on drop, or declare --tokcap-capability=no-delete"
_KEPT_AFTER_DROP = "the records to still freeze after drop (no-delete declared)"


def _frozen(kit: Kit, entries: int = 2) -> tuple[Endpoint, str, SnapshotView]:
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    for _ in range(entries):
        step.put(kit, sink, kit.entries.entry(rollout))
    return source, rollout, step.freeze(kit, source, rollout)


def _expect_refused(
    kit: Kit,
    source: Endpoint,
    rollout: str,
    snapshot_id: str,
    version: int,
    why: str,
    hint: str = _EXACT_ONLY,
) -> None:
    if step.drop(kit, source, rollout, snapshot_id, version):
        kit.fail(expected=f"drop to return False for {why}", observed="True", hint=hint)


@check("DROP-1", "exact-snapshot")
def exact_snapshot(kit: Kit) -> None:
    """Drop with the exact snapshot_id and version of the frozen state returns True, for a
    rollout with entries, for one frozen empty and for one marked incomplete, from a fresh
    source."""
    _, rollout, snapshot = _frozen(kit)
    empty, masked = kit.rollout_id("empty"), kit.rollout_id("masked")
    entry, marker = kit.entries.entry(masked), kit.sink_for(masked)
    step.put(kit, marker, entry)
    step.mark(kit, marker, masked, step.call_of(entry))
    for label, target, frozen in (
        ("the exact current snapshot", rollout, snapshot),
        (
            "the exact snapshot of a rollout frozen empty",
            empty,
            step.freeze(kit, kit.source_for(empty), empty),
        ),
        (
            "the exact snapshot of a rollout marked incomplete",
            masked,
            step.freeze(kit, kit.source_for(masked), masked),
        ),
    ):
        if not step.drop(kit, kit.source_for(target), target, frozen.snapshot_id, frozen.version):
            kit.fail(
                expected=f"True for {label}",
                observed=f"False for {step.describe(frozen)}",
                hint=_COMPARE_STORED + "; a freeze of a rollout nobody wrote, or of one marked "
                "incomplete, still names a state a consumer can retire",
            )


_LONG_HISTORY = 260
"""State changes of one rollout: past 256, versions are no longer interned small ints."""


@check("DROP-1", "long-history")
def long_history(kit: Kit) -> None:
    """After hundreds of state changes the exact snapshot still drops, from a fresh source."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout, prompt_len=8, generation_len=4)
    step.put(kit, sink, entry)
    for _ in range(_LONG_HISTORY):
        step.freeze(kit, source, rollout)
        step.mark(kit, sink, rollout, step.call_of(entry))
    snapshot = step.freeze(kit, kit.source(), rollout)
    if not step.drop(kit, kit.source(), rollout, snapshot.snapshot_id, snapshot.version):
        kit.fail(
            expected=f"True for the exact current snapshot after {_LONG_HISTORY} state changes",
            observed=f"False for {step.describe(snapshot)}",
            hint="compare snapshot_id and version by value (==), never by identity (is): "
            "equal ints past 256 and equal strings read back elsewhere are other objects",
        )


@check("DROP-2", "unseen-state")
def unseen_state(kit: Kit) -> None:
    """After freeze and later writes, no pair a freeze did not return retires the rollout."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    step.put(kit, sink, entry)
    snapshot = step.freeze(kit, source, rollout)
    for change in range(1, 4):
        if change == 2:
            step.raises(kit.sink().put, kit.entries.entry(rollout))
        else:
            step.mark(kit, kit.sink(), rollout, step.call_of(entry))
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
    current = step.freeze(kit, kit.source(), rollout)
    if not step.drop(kit, source, rollout, current.snapshot_id, current.version):
        fail(
            "DROP-1",
            expected="the pair the latest freeze returned to drop",
            observed=f"False for {step.describe(current)}",
            hint=_COMPARE_STORED,
        )


@check("DROP-2", "wrong-snapshot-id")
def wrong_snapshot_id(kit: Kit) -> None:
    """Drop with another snapshot_id and the right version returns False."""
    source, rollout, snapshot = _frozen(kit)
    given = snapshot.snapshot_id
    others = (given + "x", given + " ", given[:-1], "", given.upper(), given.swapcase())
    for other in dict.fromkeys(others):
        if other != given:
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
    step.put(kit, sink, kit.entries.entry(rollout))
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
        if step.drop(kit, source, rollout, snapshot_id, version):
            fail(
                "DROP-2",
                expected=f"drop to return False for ({snapshot_id!r}, {version}) "
                f"(current {snapshot.snapshot_id!r}, {snapshot.version})",
                observed="True",
                hint=_EXACT_ONLY,
            )
    again = step.freeze(kit, kit.source(), rollout)
    step.expect_equal_snapshots(
        kit,
        snapshot,
        again,
        hint=_REFUSAL_KEEPS,
    )
    if not step.drop(kit, source, rollout, snapshot.snapshot_id, snapshot.version):
        kit.fail(
            expected="the exact snapshot to still drop after refused attempts",
            observed="False",
            hint="a refused drop must leave the rollout as it was",
        )


@check("DROP-4", "mark-after-freeze")
def mark_after_freeze(kit: Kit) -> None:
    """A mark_incomplete after freeze makes the old snapshot's drop return False."""
    source, rollout, snapshot = _frozen(kit)
    step.mark(kit, kit.sink(), rollout, next(iter(step.payloads(snapshot))))
    _expect_refused(
        kit,
        source,
        rollout,
        snapshot.snapshot_id,
        snapshot.version,
        "a snapshot taken before a mark_incomplete",
    )
    current = step.freeze(kit, source, rollout)
    if not current.incomplete:
        kit.fail(
            expected="the new snapshot to be incomplete",
            observed=step.describe(current),
            hint="a mark after freeze is a state change every source sees",
            clause="MASK-3",
        )


@check("DROP-4", "late-put-after-freeze")
def late_put_after_freeze(kit: Kit) -> None:
    """A new call accepted after freeze makes the old snapshot's drop return False.

    That holds before any new freeze, whichever sink put the call: the fence is relaxed.
    """
    sink, source = kit.sink(), kit.source()
    for late_sink in (sink, None):
        rollout = kit.rollout_id("late")
        step.put(kit, sink, kit.entries.entry(rollout))
        before = step.freeze(kit, source, rollout)
        if step.raises((late_sink or kit.sink()).put, kit.entries.entry(rollout)) is not None:
            continue  # a strict fence: nothing changed
        if step.drop(kit, source, rollout, before.snapshot_id, before.version):
            moved = step.late_put_moves_version(kit, sink, late_sink, source)
            kit.fail(
                expected="drop of the snapshot taken before an accepted late put to return False",
                observed="True" + (" (the late put did move the version)" if moved else ""),
                hint="compare the stored current version, not the snapshot the last freeze "
                "recorded: an accepted write after freeze is a state change",
                clause=None if moved else "FENCE-1",
            )


@check("DROP-4", "conflict-after-freeze")
def conflict_after_freeze(kit: Kit) -> None:
    """A conflicting re-put after freeze that changes the rollout's state retires nothing old."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    step.put(kit, sink, entry)
    snapshot = step.freeze(kit, source, rollout)
    step.raises(kit.sink().put, kit.entries.variant(entry))
    after = step.freeze(kit, kit.source(), rollout)
    if step.state(after)[1:] == step.state(snapshot)[1:]:
        return  # Refused and nothing changed: the old snapshot is still the current state.
    _expect_refused(
        kit,
        source,
        rollout,
        snapshot.snapshot_id,
        snapshot.version,
        f"a snapshot taken before a conflicting re-put changed the rollout "
        f"(before: {step.describe(snapshot)}; after: {step.describe(after)})",
        hint="a conflict that marks the rollout incomplete is a state change: bump the version",
    )


@check("DROP-5", "delete-semantics")
def delete_semantics(kit: Kit) -> None:
    """After a successful drop the records are gone, unless the target declares no-delete;
    also those of calls whose ids mean something to a file system or a glob."""
    source, rollout, snapshot = _frozen(kit)
    _expect_gone(kit, source, rollout, snapshot)
    sink, rollout = kit.sink(), kit.rollout_id("path-like")
    # A refused put is PUT-6's to judge; the acked ones must go with the drop.
    entries = [kit.entries.entry(rollout, call) for call in PATH_LIKE_CALL_IDS]
    refusals = [step.raises(sink.put, entry) for entry in entries]
    if not all(refusals):
        _expect_gone(kit, source, rollout, step.freeze(kit, source, rollout))


def _expect_gone(kit: Kit, source: Endpoint, rollout: str, snapshot: SnapshotView) -> None:
    """Drop ``snapshot``; its records must be gone after, or kept under ``no-delete``."""
    __tracebackhide__ = True
    if not step.drop(kit, source, rollout, snapshot.snapshot_id, snapshot.version):
        kit.fail(expected="True for the exact snapshot", observed="False", hint="see DROP-1")
    try:
        after: SnapshotView | None = read_snapshot(kit.source_for(rollout).freeze(rollout))
    except Exception:
        after = None
    kept = after is not None and bool(after.entries)
    if kit.claims("no-delete"):
        if not kept:
            kit.fail(
                expected=_KEPT_AFTER_DROP,
                observed="they were gone",
                hint="a transport that cannot delete keeps the records readable",
            )
    elif kept:
        assert after is not None
        kit.fail(
            expected="the dropped records to be gone",
            observed=f"freeze after drop returned {step.describe(after)}",
            hint=_DELETE_OR_DECLARE,
        )


@basic(None, "retire")
def basic_retire(kit: Kit) -> None:
    """DROP-1, DROP-2, DROP-3, FENCE-2, FENCE-1: exact drops retire; others destroy nothing."""
    sink, source = kit.sink(), kit.source()
    exact, other = kit.rollout_id("basic"), kit.rollout_id("basic")
    for rollout in (exact, other):
        step.put(kit, sink, kit.entries.entry(rollout), clause="PUT-1")
    first = step.freeze(kit, source, exact, clause="FREEZE-1")
    step.expect(
        kit,
        step.drop(kit, kit.source(), exact, first.snapshot_id, first.version, clause="DROP-1"),
        "drop of the exact current snapshot to return True",
        f"False for {step.describe(first)}",
        _COMPARE_STORED,
        clause="DROP-1",
    )
    for endpoint in (kit.sink(), sink):
        step.expect(
            kit,
            step.raises(endpoint.put, kit.entries.entry(exact)) is not None,
            "a put after drop to raise, from a fresh sink and from the one that wrote before",
            "it was acked",
            "keep a tombstone for dropped rollouts, and check it on every put",
            clause="FENCE-2",
        )
    try:
        gone = read_snapshot(kit.run(kit.source().raw.freeze(exact)))
    except Exception:
        gone = None  # A retired rollout may refuse to freeze.
    if gone is not None:
        remains = bool(gone.entries)
        step.expect(
            kit,
            remains == kit.claims("no-delete"),
            _KEPT_AFTER_DROP if kit.claims("no-delete") else "the records to be gone after drop",
            step.describe(gone),
            _DELETE_OR_DECLARE,
            clause="DROP-5",
        )
    kept = step.freeze(kit, source, other, clause="FREEZE-1")
    for snapshot_id, version in ((kept.snapshot_id, kept.version + 1), ("other", kept.version)):
        step.expect(
            kit,
            not step.drop(kit, source, other, snapshot_id, version, clause="DROP-2"),
            f"drop with ({snapshot_id!r}, {version}) to return False",
            f"True (current {kept.snapshot_id!r}, {kept.version})",
            "retire only the exact current snapshot",
            clause="DROP-2",
        )
    step.expect(
        kit,
        step.state(step.freeze(kit, kit.source(), other, clause="DROP-3")) == step.state(kept),
        "a refused drop to destroy nothing",
        step.describe(kept),
        _REFUSAL_KEEPS,
        clause="DROP-3",
    )
    for writer in (sink, None):
        _late_put_after_freeze(kit, sink, source, writer)


def _late_put_after_freeze(
    kit: Kit, sink: Endpoint, source: Endpoint, writer: Endpoint | None
) -> None:
    """FENCE-1 in the retire basic: a new call put after freeze, by ``writer`` (the sink that
    wrote before the freeze) or, for None, a fresh sink, is refused or moves the version."""
    late = kit.rollout_id("late")
    step.put(kit, sink, kit.entries.entry(late), clause="PUT-1")
    before = step.freeze(kit, source, late, clause="FREEZE-1")
    if step.raises((writer or kit.sink()).put, kit.entries.entry(late)) is not None:
        return
    step.expect(
        kit,
        kit.fence != "strict",
        "a put of a new call after freeze to raise (--tokcap-fence=strict)",
        "it was acked",
        "refuse writes to a frozen rollout",
        clause="FENCE-1",
    )
    if step.drop(kit, source, late, before.snapshot_id, before.version, clause="FENCE-1"):
        # A late put that moved the version (seen on a rollout of its own) did the fence's
        # part: the old snapshot still dropping is then the drop's fault.
        moved = step.late_put_moves_version(kit, sink, writer, source, clause="FENCE-1")
        step.expect(
            kit,
            False,
            "drop of the snapshot taken before an accepted late put to return False",
            "True" + (" (the late put did move the version)" if moved else ""),
            "an accepted write after freeze is a state change: the old snapshot no longer drops",
            clause="DROP-4" if moved else "FENCE-1",
        )
    after = step.freeze(kit, kit.source(), late, clause="FENCE-1")
    step.expect(
        kit,
        after.version != before.version and len(after.entries) == 2,
        "a put after freeze to raise, or to be kept under a new version",
        f"before: {step.describe(before)}; after: {step.describe(after)}",
        "a relaxed fence bumps the version on every accepted write",
        clause="FENCE-1",
    )
