"""FREEZE: snapshots are named, idempotent, unique per call, and empty for unknown rollouts."""

from __future__ import annotations

from typing import Any

from conformance import _steps as step
from conformance._kit import Kit
from conformance._reading import SnapshotView, canonical, entry_view
from conformance._registry import basic, check
from conformance._settings import DEFAULT_ENTRY_CLASS

_EMPTY_AND_CLEAN = "an unknown rollout is empty and clean, not an error"


@check("FREEZE-1", "snapshot-identity")
def snapshot_identity(kit: Kit) -> None:
    """A snapshot names its rollout and carries a non-empty str snapshot_id and an int version.

    The freeze step reads every snapshot of every check that way; here it is the whole check.
    """
    sink = kit.sink()
    rollout = kit.rollout_id()
    step.put(kit, sink, kit.entries.entry(rollout))
    step.freeze(kit, kit.source(), rollout)


_IDEMPOTENT_ENTRIES = 12
"""Entries of the rollout frozen again: enough that a snapshot id hashed from a set, or a
dict keyed by ``hash()``, in the order one process's salt gives, differs in another process
all but certainly."""

_LONG_CHANGES = 260
"""Puts into the long rollout frozen twice: its version passes 256, past which CPython no
longer shares one int object per value, so a store that compares versions with ``is`` (or
keys its snapshot on an object's identity) mints a new snapshot on every freeze of a long
conversation while passing every short one."""


@check("FREEZE-2", "idempotent")
def idempotent(kit: Kit) -> None:
    """Freezing again, from the same, a fresh or a spawned worker's source, gives one snapshot,
    on a short rollout and on one whose version passed 256."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    for _ in range(_IDEMPOTENT_ENTRIES):
        step.put(kit, sink, kit.entries.entry(rollout))
    first = step.freeze(kit, source, rollout)
    hint = "a freeze with no write in between must not mint a new snapshot_id or version"
    step.expect_equal_snapshots(kit, first, step.freeze(kit, source, rollout), hint=hint)
    step.expect_equal_snapshots(
        kit,
        first,
        step.freeze(kit, kit.source(), rollout),
        hint=hint + "; keep the frozen state where every instance reads it",
    )
    if not kit.claims("process-local"):
        step.expect_same_in_spawned_worker(kit, first)
    long = kit.rollout_id("long")
    for _ in range(_LONG_CHANGES):
        step.put(kit, sink, kit.entries.entry(long, prompt_len=2, generation_len=1))
    settled = step.freeze(kit, source, long)
    step.expect_equal_snapshots(
        kit,
        settled,
        step.freeze(kit, source, long),
        hint=hint + f"; after {_LONG_CHANGES} changes too (compare versions by value, not by "
        "identity: `is` holds for small ints only)",
    )


@check("FREEZE-3", "unique-per-call")
def unique_per_call(kit: Kit) -> None:
    """Each model_call_id appears once in a snapshot, however often and however it was put.

    Identical re-puts come in both orders, from the same and a fresh sink; conflicting ones
    (which may raise, or mask the rollout) come between them. Two long-lived sinks each re-put
    the call the other put: what either remembers of the rollout is stale by then.
    """
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    entries = [kit.entries.entry(rollout, prompt_len=4, generation_len=2) for _ in range(4)]
    for entry in [*entries, *reversed(entries)]:
        step.put(kit, sink, entry)
    step.raises(sink.put, kit.entries.variant(entries[1]))
    step.put(kit, kit.sink(), entries[0])
    step.raises(kit.sink().put, kit.entries.variant(entries[2]))
    step.raises(sink.put, entries[1])
    for snapshot in (step.freeze(kit, kit.source(), rollout), step.freeze(kit, source, rollout)):
        _expect_one_per_call(kit, snapshot, entries)
    crossed = kit.rollout_id("crossed")
    mine, theirs = (kit.entries.entry(crossed, prompt_len=4, generation_len=2) for _ in range(2))
    other = kit.sink_for(crossed)
    step.put(kit, sink, mine)
    step.put(kit, other, theirs)
    step.put(kit, sink, theirs, clause="PUT-3")
    step.put(kit, other, mine, clause="PUT-3")
    _expect_one_per_call(kit, step.freeze(kit, source, crossed), [mine, theirs])


def _expect_one_per_call(kit: Kit, snapshot: SnapshotView, entries: list[Any]) -> None:
    __tracebackhide__ = True
    held = sorted(entry.model_call_id for entry in snapshot.entries)
    step.expect(
        kit,
        held == sorted(step.call_of(entry) for entry in entries),
        f"{len(entries)} entries, one per call id",
        step.describe(snapshot),
        "key entries by model_call_id, not by arrival: a re-put, identical or conflicting, "
        "never adds a second entry for its call, whichever sink sends it and whatever that "
        "sink remembers of the rollout",
    )


@check("FREEZE-4", "never-written")
def never_written(kit: Kit) -> None:
    """Freezing a rollout that never saw a write returns an empty, clean snapshot."""
    snapshot = step.freeze(kit, kit.source(), kit.rollout_id("empty"))
    if snapshot.entries or snapshot.incomplete:
        kit.fail(
            expected="no entries and incomplete=False",
            observed=step.describe(snapshot),
            hint=_EMPTY_AND_CLEAN,
        )


@basic(None, "one-rollout")
def basic_one_rollout(kit: Kit) -> None:
    """FREEZE-3, PUT-2, FREEZE-2, FREEZE-4, PUT-3 on plain entries of one rollout."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id("basic")
    entry = kit.entries.entry(rollout)
    step.put(kit, sink, entry, clause="PUT-1")
    first = step.freeze(kit, source, rollout, clause="FREEZE-1")
    step.expect(
        kit,
        len(first.entries) == 1,
        "one entry for one put",
        step.describe(first),
        "key entries by model_call_id",
        clause="FREEZE-3",
    )
    if first.payloads() != step.sent([entry]):
        observed, hint = _round_trip_findings(kit, first, entry)
        kit.fail(
            expected="a plain entry (ASCII, float32-exact log probs) to freeze back unchanged",
            observed=observed,
            hint=hint,
            clause="PUT-2",
        )
    for repeat in (
        step.freeze(kit, source, rollout, clause="FREEZE-2"),
        step.freeze(kit, kit.source(), rollout, clause="FREEZE-2"),
    ):
        step.expect(
            kit,
            step.state(repeat) == step.state(first),
            f"the same snapshot: {step.describe(first)}",
            step.describe(repeat),
            "a freeze with no write in between mints nothing new",
            clause="FREEZE-2",
        )
    empty = step.freeze(kit, source, kit.rollout_id("never"), clause="FREEZE-4")
    step.expect(
        kit,
        not empty.entries and not empty.incomplete,
        "a rollout never written to freeze empty and clean",
        step.describe(empty),
        _EMPTY_AND_CLEAN,
        clause="FREEZE-4",
    )
    for how in ("", " from another sink"):
        again = kit.rollout_id("reput")
        twice = kit.entries.entry(again)
        step.put(kit, sink, twice, clause="PUT-3")
        step.put(kit, kit.sink() if how else sink, twice, clause="PUT-3")
        frozen = step.freeze(kit, source, again, clause="PUT-3")
        # A sink that appends every re-put breaks PUT-3; one that knows only its own puts, so
        # that another sink's re-put lists the call twice, breaks FREEZE-3 (as two long-lived
        # sinks re-putting each other's calls do).
        step.expect(
            kit,
            len(frozen.entries) == 1 or not how,
            "one entry for the call after an identical re-put from another sink",
            step.describe(frozen),
            "key entries by model_call_id in the store, not in what one sink remembers",
            clause="FREEZE-3",
        )
        step.expect(
            kit,
            len(frozen.entries) == 1 and not frozen.incomplete,
            f"one clean entry after an identical re-put{how}",
            step.describe(frozen),
            "an identical re-put is a no-op",
            clause="PUT-3",
        )
    step.raises(kit.sink().put, twice)
    step.expect(
        kit,
        step.state(step.freeze(kit, kit.source(), again, clause="PUT-3")) == step.state(frozen),
        "an identical re-put after freeze to change nothing",
        step.describe(frozen),
        "after freeze an identical re-put may raise, but never moves the version",
        clause="PUT-3",
    )


def _round_trip_findings(kit: Kit, frozen: SnapshotView, entry: Any) -> tuple[str, str]:
    """Say how a plain entry came back changed, and what to do about it.

    A store on a record class of its own (NeMo Gym's ``TokenEntry`` has fields tokcap's lacks)
    hands back every field it was given plus its class's defaults. Judged with tokcap's record
    class, that is no transport bug: the run is told which ``--tokcap-entry-class`` to pass.
    """
    plain = step.describe(frozen)
    hint = "store every field of the record as given"
    given = entry_view(entry)
    back = frozen.entry_for(given.model_call_id)
    if back is None or kit.settings.entry_class != DEFAULT_ENTRY_CLASS:
        return plain, hint
    added = sorted(set(back.fields) - set(given.fields))
    kept = {name: back.fields.get(name) for name in given.fields}
    if not added or canonical(kept) != given.payload:
        return plain, hint
    record_class = next(
        type(raw)
        for raw in frozen.raw.entries
        if entry_view(raw).model_call_id == given.model_call_id
    )
    target = f"{record_class.__module__}:{record_class.__qualname__}"
    shown = ", ".join(added[:6]) + (" ..." if len(added) > 6 else "")
    return (
        f"{plain}, as {target} records holding every field given plus {len(added)} the kit "
        f"never sent ({shown}); rerun with --tokcap-entry-class={target}",
        f"the store keeps records of its own class: judge it on that class with "
        f"--tokcap-entry-class={target}",
    )
