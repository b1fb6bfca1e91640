"""FREEZE: snapshots are named, idempotent, unique per call, and empty for unknown rollouts."""

from __future__ import annotations

from conformance._checks._operations import describe, expect_equal_snapshots, freeze, put
from conformance._kit import Kit
from conformance._registry import check


@check("FREEZE-1", "snapshot-identity")
def snapshot_identity(kit: Kit) -> None:
    """A snapshot names its rollout and carries a non-empty str snapshot_id and an int version.

    The freeze step reads every snapshot of every check that way; here it is the whole check.
    """
    sink = kit.sink()
    rollout = kit.rollout_id()
    put(kit, sink, kit.entries.entry(rollout))
    freeze(kit, kit.source(), rollout)


@check("FREEZE-2", "idempotent")
def idempotent(kit: Kit) -> None:
    """Freezing again, from the same or a fresh instance, returns the same snapshot."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    for _ in range(3):
        put(kit, sink, kit.entries.entry(rollout))
    first = freeze(kit, source, rollout)
    hint = "a freeze with no write in between must not mint a new snapshot_id or version"
    expect_equal_snapshots(kit, first, freeze(kit, source, rollout), hint=hint)
    expect_equal_snapshots(
        kit,
        first,
        freeze(kit, kit.source(), rollout),
        hint=hint + "; keep the frozen state where every instance reads it",
    )


@check("FREEZE-3", "unique-per-call")
def unique_per_call(kit: Kit) -> None:
    """Each model_call_id appears once in a snapshot, however often it was put."""
    sink = kit.sink()
    rollout = kit.rollout_id()
    entries = [kit.entries.entry(rollout, prompt_len=4, generation_len=2) for _ in range(4)]
    for entry in [*entries, *reversed(entries), entries[0]]:
        put(kit, sink, entry)
    snapshot = freeze(kit, kit.source(), rollout)
    calls = [entry.model_call_id for entry in snapshot.entries]
    if sorted(calls) != sorted(entry.model_call_id for entry in entries):
        kit.fail(
            expected=f"{len(entries)} entries, one per call id",
            observed=describe(snapshot),
            hint="key entries by model_call_id, not by arrival",
        )


@check("FREEZE-4", "never-written")
def never_written(kit: Kit) -> None:
    """Freezing a rollout that never saw a write returns an empty, clean snapshot."""
    snapshot = freeze(kit, kit.source(), kit.rollout_id("empty"))
    if snapshot.entries or snapshot.incomplete:
        kit.fail(
            expected="no entries and incomplete=False",
            observed=describe(snapshot),
            hint="an unknown rollout is empty and clean, not an error",
        )
