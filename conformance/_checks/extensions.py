"""EXT: the optional begin_call intent and batch retire/delete, checked when present."""

from __future__ import annotations

from conformance import _steps as step
from conformance._entries import ODD_CALL_IDS
from conformance._kit import Endpoint, Kit
from conformance._reading import read_snapshot
from conformance._registry import check
from conformance._violation import ExtensionMissing

_LOOKALIKE_INTENTS = (
    ("Call-X", "call-x"),
    ("call-x", "CALL-X"),
    ("caf\u00e9", "cafe\u0301"),
    ("a/b", "a_b"),
    ("\ufb01le", "file"),
    ("x ", "x"),
)
"""An intent's call id and the one call id stored beside it, equal only to a scheme that folds
case, normalizes unicode, maps separators or strips space: the intent is still dangling."""


def _require(endpoint: Endpoint, *names: str) -> None:
    missing = [name for name in names if not endpoint.has(name)]
    if missing:
        raise ExtensionMissing(f"extension not implemented: {', '.join(missing)}")


@check("EXT-BEGIN-1", "intents")
def intents(kit: Kit) -> None:
    """An intent without its entry makes the snapshot incomplete; a matched one does not."""
    sink = kit.sink()
    _require(sink, "begin_call")
    matched = kit.rollout_id("matched")
    for call in ("plain", *ODD_CALL_IDS):
        kit.run(sink.raw.begin_call(matched, call))
        step.put(
            kit,
            sink,
            kit.entries.entry(matched, call, prompt_len=2, generation_len=1),
        )
    snapshot = step.freeze(kit, kit.source(), matched)
    if snapshot.incomplete:
        kit.fail(
            expected="intents matched by their entries to leave it clean",
            observed=step.describe(snapshot),
            hint="match intents to entries by exact call id",
        )
    dangling = kit.rollout_id("dangling")
    step.put(kit, sink, kit.entries.entry(dangling, "done"))
    kit.run(sink.raw.begin_call(dangling, "never-finished\nid"))
    snapshot = step.freeze(kit, kit.source(), dangling)
    if not snapshot.incomplete:
        kit.fail(
            expected="an intent with no entry to make the snapshot incomplete",
            observed=step.describe(snapshot),
            hint="a call that began and never put lost its tokens",
        )
    for intent, stored in _LOOKALIKE_INTENTS:
        rollout = kit.rollout_id("lookalike")
        kit.run(sink.raw.begin_call(rollout, intent))
        step.put(kit, sink, kit.entries.entry(rollout, stored, prompt_len=2, generation_len=1))
        snapshot = step.freeze(kit, kit.source(), rollout)
        if not snapshot.incomplete:
            kit.fail(
                expected=f"an intent for call {intent!r}, whose only entry is of call "
                f"{stored!r}, to leave the snapshot incomplete",
                observed=step.describe(snapshot),
                hint="match intents to entries by the exact call id: no case folding, unicode "
                "normalization or separator mapping",
            )


@check("EXT-RETIRE-1", "retire-and-delete")
def retire_and_delete(kit: Kit) -> None:
    """Retire removes and fences in any state, repeats as a no-op; delete frees the id."""
    sink, source = kit.sink(), kit.source()
    _require(source, "retire", "delete")
    frozen, written, unknown = (kit.rollout_id(label) for label in ("frozen", "written", "unknown"))
    put_before = {rollout: kit.entries.entry(rollout) for rollout in (frozen, written)}
    for entry in put_before.values():
        step.put(kit, sink, entry)
    step.freeze(kit, source, frozen)
    ids = [frozen, written, unknown]
    for attempt in ("first", "repeated"):
        error = step.raises(source.retire, ids)
        if error is not None:
            kit.fail(
                expected=f"the {attempt} retire to succeed",
                observed=kit.redact(f"{type(error).__name__}: {error}"),
                hint="retire works whatever the state, and repeating it is a no-op",
            )
    late = [(rollout, kit.entries.entry(rollout), "new call") for rollout in ids]
    late += [(rollout, entry, "call it held") for rollout, entry in put_before.items()]
    for rollout, entry, what in late:
        if step.raises(kit.sink_for(rollout).put, entry) is None:
            kit.fail(
                expected=f"a put of a {what} into retired {rollout!r} to raise",
                observed="the put was acked",
                hint="retire fences the rollout: a re-put of a call it held is no retry to "
                "acknowledge, since its record is gone",
            )
    if not kit.claims("no-delete"):
        for rollout in (frozen, written):
            _expect_no_records(kit, rollout, "retire")
    live = kit.rollout_id("live")
    step.put(kit, sink, kit.entries.entry(live))
    step.mark(kit, sink, live, "call-0")
    # One call deletes both, as retire took all three: a store must take every id it is given.
    error = step.raises(source.delete, [frozen, live])
    if error is not None:
        kit.fail(
            expected="delete of a retired rollout and of one written and marked, never "
            "retired, in one call, to succeed",
            observed=kit.redact(f"{type(error).__name__}: {error}"),
            hint="delete removes records and fences, whatever the rollout's state",
        )
    for rollout, state in ((frozen, "retired"), (live, "written and marked, never retired")):
        reused = kit.entries.entry(rollout)
        step.put(kit, kit.sink_for(rollout), reused)
        snapshot = step.freeze(kit, kit.source_for(rollout), rollout)
        if list(step.payloads(snapshot)) != [step.call_of(reused)] or snapshot.incomplete:
            kit.fail(
                expected=f"the id of a deleted rollout ({state}, deleted together with "
                "another) to start again from nothing",
                observed=step.describe(snapshot),
                hint="delete removes the records, the marks and the tombstone of every id it is "
                "given, whether or not the rollout was retired first",
            )


def _expect_no_records(kit: Kit, rollout: str, what: str) -> None:
    """After ``what``, a freeze of ``rollout`` refuses or returns no entry: none is kept."""
    __tracebackhide__ = True
    try:
        found = read_snapshot(kit.run(kit.source_for(rollout).raw.freeze(rollout)))
    except Exception:
        return  # a retired rollout may refuse to freeze
    if found.entries:
        kit.fail(
            expected=f"{rollout!r} to hold no records after {what}",
            observed=step.describe(found),
            hint="retire removes the rollout's records as well as fencing it; a fence alone "
            "leaves abandoned calls to be read back into training",
        )
