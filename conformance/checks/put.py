"""PUT: acked means durable and visible, exact round trips, idempotent re-puts, isolation."""

from __future__ import annotations

import json

import hypothesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from conformance.checks._steps import (
    describe,
    drop,
    expect_equal_snapshots,
    freeze,
    mark,
    payloads,
    put,
    raises,
)
from conformance.context import Kit
from conformance.entries import ODD_CALL_IDS
from conformance.registry import check
from conformance.strategies import model_call_ids, token_entries
from conformance.violation import fail
from tokcap_spec.records import TokenEntry


def _differences(sent: TokenEntry, got: TokenEntry) -> list[str]:
    left, right = sent.model_dump(), got.model_dump()
    return sorted(
        name
        for name in left.keys() | right.keys()
        if _canonical(left.get(name, "<absent>")) != _canonical(right.get(name, "<absent>"))
    )


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=True, ensure_ascii=False)


def _expect_round_trip(
    kit: Kit,
    clause: str,
    sent: TokenEntry,
    snapshot_entries: dict[str, bytes],
    got: TokenEntry | None,
) -> None:
    if got is None:
        fail(
            clause,
            expected=f"call {sent.model_call_id!r} in the snapshot",
            observed=f"calls {sorted(snapshot_entries)!r}",
            hint="keep model_call_id exactly as given: any non-empty string",
        )
    if got.to_json_bytes() != sent.to_json_bytes():
        fail(
            clause,
            expected="the frozen entry equal to the entry put, floats bit for bit",
            observed=f"fields differ: {', '.join(_differences(sent, got))}",
            hint="serialize with TokenEntry.to_json_bytes(): plain JSON turns -inf into null, "
            "float32 loses precision, and some stores drop unknown fields",
        )


LOOKALIKE_CALL_IDS = ("a/b", "a_b", "a-b", "a.b", "A/B", "\u00e9", "e\u0301", "x", "x ", "X")
"""Call ids a sanitizing, case-folding or normalizing key scheme would merge (PUT-6)."""


def _property_settings(kit: Kit, examples: int) -> settings:
    return settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=False,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


@check("PUT-1", "durable-on-return")
def durable_on_return(kit: Kit) -> None:
    """Once put returns, a fresh source's freeze contains the entry, before any close."""
    sink = kit.sink()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    put(kit, "PUT-1", sink, entry)
    snapshot = freeze(kit, "PUT-1", kit.source(), rollout)
    if entry.model_call_id not in payloads(snapshot):
        fail(
            "PUT-1",
            expected=f"call {entry.model_call_id!r} visible to a fresh source",
            observed=describe(snapshot),
            hint="put must not return before the record is durable and visible; buffering "
            "until close() acks too early",
        )


@check("PUT-2", "exact-round-trip")
def exact_round_trip(kit: Kit) -> None:
    """Generated entries (-inf, -0.0, unicode, extras, large arrays) freeze back exactly."""
    sink, source = kit.sink(), kit.source()
    big = kit.entries.entry(kit.rollout_id("big"), prompt_len=8192, generation_len=2048)
    put(kit, "PUT-2", sink, big)
    snapshot = freeze(kit, "PUT-2", source, big.rollout_id)
    _expect_round_trip(kit, "PUT-2", big, payloads(snapshot), snapshot.entry_for(big.model_call_id))

    @_property_settings(kit, 20)
    @given(st.data())
    def round_trip(data: st.DataObject) -> None:
        rollout = kit.rollout_id("gen")
        entry = data.draw(token_entries(rollout))
        put(kit, "PUT-2", sink, entry)
        frozen = freeze(kit, "PUT-2", kit.source(), rollout)
        _expect_round_trip(
            kit, "PUT-2", entry, payloads(frozen), frozen.entry_for(entry.model_call_id)
        )

    hypothesis.seed(kit.settings.seed)(round_trip)()


@check("PUT-3", "identical-reput")
def identical_reput(kit: Kit) -> None:
    """Putting the same entry again, before or after freeze, keeps one clean entry and snapshot."""
    sink = kit.sink()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    for endpoint in (sink, sink, kit.sink()):
        put(kit, "PUT-3", endpoint, entry)
    snapshot = freeze(kit, "PUT-3", kit.source(), rollout)
    if len(snapshot.entries) != 1 or snapshot.incomplete:
        fail(
            "PUT-3",
            expected="one entry, incomplete=False after three identical puts",
            observed=describe(snapshot),
            hint="compare serialized bytes: an identical re-put is a no-op, not a new entry",
        )
    put(kit, "PUT-3", kit.sink(), entry)
    again = freeze(kit, "PUT-3", kit.source(), rollout)
    expect_equal_snapshots(
        "PUT-3",
        snapshot,
        again,
        hint="an identical re-put after freeze is a no-op too: no error, no new version; "
        "check for the same payload before applying the fence",
    )


@check("PUT-4", "conflicting-reput")
def conflicting_reput(kit: Kit) -> None:
    """Reusing a call id with another payload raises or leaves the rollout incomplete."""
    sink = kit.sink()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    put(kit, "PUT-4", sink, entry)
    error = raises(sink.put, kit.entries.variant(entry))
    snapshot = freeze(kit, "PUT-4", kit.source(), rollout)
    if error is None and not snapshot.incomplete:
        kept = (
            "the new payload"
            if payloads(snapshot).get(entry.model_call_id) != entry.to_json_bytes()
            else "the first payload"
        )
        fail(
            "PUT-4",
            expected="the conflicting put to raise, or the rollout to freeze incomplete",
            observed=f"no error and a clean snapshot keeping {kept}: {describe(snapshot)}",
            hint="fail closed: a reused model_call_id with different tokens is lost evidence",
        )


@check("PUT-5", "rollout-isolation")
def rollout_isolation(kit: Kit) -> None:
    """Ids differing only by case or by '.', '_', '-' are separate rollouts."""
    sink, source = kit.sink(), kit.source()
    base = kit.rollout_id("Iso")
    rollouts = [f"{base}.a", f"{base}_a", f"{base}-a", f"{base}.A"]
    entries = {rollout: kit.entries.entry(rollout) for rollout in rollouts}
    for entry in entries.values():
        put(kit, "PUT-5", sink, entry)
    mark(kit, "PUT-5", sink, rollouts[0], "only-this-one")
    frozen = freeze(kit, "PUT-5", source, rollouts[1])
    for rollout in rollouts:
        snapshot = frozen if rollout == rollouts[1] else freeze(kit, "PUT-5", source, rollout)
        own = entries[rollout].model_call_id
        if list(payloads(snapshot)) != [own] or snapshot.incomplete != (rollout == rollouts[0]):
            fail(
                "PUT-5",
                expected=f"{rollout!r} to hold only its own entry, "
                f"incomplete={rollout == rollouts[0]}",
                observed=describe(snapshot),
                hint="key storage by the exact rollout id: no case folding or normalizing",
            )
    put(kit, "PUT-5", sink, kit.entries.entry(f"{base}-A"))
    mark(kit, "PUT-5", sink, f"{base}_A", "neighbour")
    again = freeze(kit, "PUT-5", kit.source(), rollouts[1])
    expect_equal_snapshots(
        "PUT-5",
        frozen,
        again,
        hint="writes to other rollouts must not move this rollout's version or snapshot_id; "
        "keep one version counter per rollout",
    )
    if not drop(kit, "PUT-5", source, rollouts[1], frozen.snapshot_id, frozen.version):
        fail(
            "PUT-5",
            expected=f"{rollouts[1]!r} to drop with its snapshot after writes to its neighbours",
            observed="False",
            hint="versions and fences are per rollout, never store-wide",
        )


@check("PUT-6", "any-call-id")
def any_call_id(kit: Kit) -> None:
    """Any non-empty model_call_id string, look-alikes included, is kept apart and exact."""
    sink = kit.sink()
    rollout = kit.rollout_id()
    sent = [
        kit.entries.entry(rollout, call, prompt_len=4, generation_len=2)
        for call in (*ODD_CALL_IDS, *LOOKALIKE_CALL_IDS)
    ]
    for entry in sent:
        put(kit, "PUT-6", sink, entry)
    snapshot = freeze(kit, "PUT-6", kit.source(), rollout)
    for entry in sent:
        _expect_round_trip(
            kit, "PUT-6", entry, payloads(snapshot), snapshot.entry_for(entry.model_call_id)
        )
    if len(snapshot.entries) != len(sent):
        fail(
            "PUT-6",
            expected=f"{len(sent)} entries, one per call id",
            observed=describe(snapshot),
            hint="never split or normalize call ids",
        )

    @_property_settings(kit, 15)
    @given(model_call_ids)
    def round_trip(call_id: str) -> None:
        target = kit.rollout_id("gen")
        entry = kit.entries.entry(target, call_id, prompt_len=2, generation_len=1)
        put(kit, "PUT-6", sink, entry)
        frozen = freeze(kit, "PUT-6", kit.source(), target)
        _expect_round_trip(kit, "PUT-6", entry, payloads(frozen), frozen.entry_for(call_id))

    hypothesis.seed(kit.settings.seed)(round_trip)()
