"""The plainest use of every operation, tried when a check fails, to tell failed from blocked.

A check that fails may be failing because of its own clause, or because something more basic
is broken: the object is no sink, a plain put raises or is not visible on return, a snapshot
cannot be read, a freeze is not idempotent, an exact drop is refused, a mark is not seen. The
runner tries these basics in that order, on fresh endpoints and plain entries; the first one
that breaks is the clause the failing check is *blocked by*, unless it is the check's own.
Each basic is one small promise of one clause, so a store with one bug fails one clause.

The outcome is computed once per run and process: the basics do not depend on the check.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import threading
from collections.abc import Callable
from typing import Any

from conformance._checks._operations import (
    describe,
    drop,
    expect_drop_shape,
    freeze,
    mark,
    put,
    raises,
    sent,
    state,
    unreadable,
)
from conformance._entries import ODD_CALL_IDS
from conformance._kit import Endpoint, Kit, build_endpoint, unexpected_error
from conformance._reading import SnapshotView, Unreadable, canonical, entry_view, read_snapshot
from conformance._settings import DEFAULT_ENTRY_CLASS, KitSettings
from conformance._violation import ClauseViolation
from conformance._workers import Operation, WorkerPlan, constructor, run_workers
from tokcap_spec.errors import EndpointError
from tokcap_spec.protocols import TokenSink, TokenSource, protocol_problems

__all__ = ["construct", "first_broken", "freeze_elsewhere"]

_VISIBILITY_ATTEMPTS = 3

_outcomes: dict[tuple[int, str], tuple[KitSettings, ClauseViolation | None]] = {}


STRUCTURAL = frozenset({"SHAPE-1", "SHAPE-2", "BUILD-1", "BUILD-2"})
"""Clauses about what the target is, not what it does: only the shape and build basics apply."""


def first_broken(settings: KitSettings, clause: str = "") -> ClauseViolation | None:
    """Return the violation of the first basic that breaks for the target, or None.

    For a ``clause`` in :data:`STRUCTURAL` only the basics of shape and construction count.
    """
    basics = _BASICS[:2] if clause in STRUCTURAL else _BASICS
    for basic, judged in basics:
        known = _outcomes.get((id(settings), basic.__name__))
        if known is None or known[0] is not settings:
            # A kit of its own for each: endpoints one basic left open never hinder the next.
            kit = Kit(settings, f"basics-{basic.__name__.strip('_')}", judged)
            try:
                known = (settings, _broken(kit, basic))
            finally:
                kit.close()
            _outcomes[(id(settings), basic.__name__)] = known
        if known[1] is not None:
            return known[1]
    return None


def _broken(kit: Kit, basic: Callable[[Kit], None]) -> ClauseViolation | None:
    try:
        basic(kit)
    except ClauseViolation as violation:
        return violation
    except Unreadable as problem:
        return unreadable(problem, kit)
    except EndpointError as exc:
        return unexpected_error("BUILD-1", "building the target", exc, kit)
    except Exception as exc:
        return unexpected_error("BUILD-1", "a plain use of the target", exc, kit)
    return None


def construct(kit: Kit, target: str, kwargs: dict[str, Any]) -> Any:
    """Build ``module:Class`` with ``kwargs`` and nothing else (no check of the protocol).

    The constructor runs under the check's deadline.
    """
    module, _, name = target.partition(":")
    with kit.watch.call([constructor(target)]):
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
        return found(**kwargs)


def _shapes(kit: Kit) -> None:
    """SHAPE-1 and SHAPE-2: the protocol methods are coroutine functions; drop takes keywords."""
    settings = kit.settings
    for target, kwargs, protocol in (
        (settings.sink, settings.sink_kwargs, TokenSink),
        (settings.source, settings.source_kwargs, TokenSource),
    ):
        try:
            built = construct(kit, target, dict(kwargs))
        except Exception:
            return  # Construction is BUILD-1's to judge, next.
        try:
            problems = protocol_problems(built, protocol)
            if problems:
                kit.fail(
                    expected=f"a {protocol.__name__} with async methods",
                    observed="; ".join(problems),
                    hint="declare the protocol methods with 'async def'",
                )
            if protocol is TokenSource:
                expect_drop_shape(Endpoint(kit, built, "source"))
        finally:
            closing = getattr(built, "close", None)
            if callable(closing) and inspect.iscoroutinefunction(closing):
                kit.run(closing())


def _builds(kit: Kit) -> None:
    """BUILD-1: the sink and the source build from the target string and kwargs."""
    for build in (kit.sink, kit.source):
        try:
            build()
        except EndpointError as exc:
            raise unexpected_error(kit.blame(), "building the target", exc, kit) from None


def _expect(
    kit: Kit, holds: bool, expected: str, observed: str, hint: str, *, clause: str | None = None
) -> None:
    __tracebackhide__ = True
    if not holds:
        kit.fail(expected=expected, observed=observed, hint=hint, clause=clause)


def _visible_on_return(kit: Kit) -> None:
    """PUT-1 and FREEZE-1: a plain put is visible to a fresh source at once; snapshots read."""
    sink = kit.sink()
    for _ in range(_VISIBILITY_ATTEMPTS):
        rollout = kit.rollout_id("basic")
        put(kit, sink, kit.entries.entry(rollout))
        seen = freeze_elsewhere(kit, rollout)
        if isinstance(seen, Unreadable):
            raise seen
        _expect(
            kit,
            isinstance(seen, SnapshotView) and bool(seen.entries),
            "a plain entry visible to a fresh source as soon as put returned",
            describe(seen)
            if isinstance(seen, SnapshotView)
            else kit.redact(f"the fresh source's freeze raised {type(seen).__name__}: {seen}"),
            "ack a put only once the write is durable and visible",
        )


def _one_rollout(kit: Kit) -> None:
    """FREEZE-3, PUT-2, FREEZE-2, FREEZE-4, PUT-3 on plain entries of one rollout."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id("basic")
    entry = kit.entries.entry(rollout)
    put(kit, sink, entry, clause="PUT-1")
    first = freeze(kit, source, rollout, clause="FREEZE-1")
    _expect(
        kit,
        len(first.entries) == 1,
        "one entry for one put",
        describe(first),
        "key entries by model_call_id",
        clause="FREEZE-3",
    )
    if first.payloads() != sent([entry]):
        observed, hint = _round_trip_findings(kit, first, entry)
        kit.fail(
            expected="a plain entry (ASCII, float32-exact log probs) to freeze back unchanged",
            observed=observed,
            hint=hint,
            clause="PUT-2",
        )
    for repeat in (
        freeze(kit, source, rollout, clause="FREEZE-2"),
        freeze(kit, kit.source(), rollout, clause="FREEZE-2"),
    ):
        _expect(
            kit,
            state(repeat) == state(first),
            f"the same snapshot: {describe(first)}",
            describe(repeat),
            "a freeze with no write in between mints nothing new",
            clause="FREEZE-2",
        )
    empty = freeze(kit, source, kit.rollout_id("never"), clause="FREEZE-4")
    _expect(
        kit,
        not empty.entries and not empty.incomplete,
        "a rollout never written to freeze empty and clean",
        describe(empty),
        "an unknown rollout is empty and clean, not an error",
        clause="FREEZE-4",
    )
    again = kit.rollout_id("reput")
    twice = kit.entries.entry(again)
    put(kit, sink, twice, clause="PUT-3")
    put(kit, kit.sink(), twice, clause="PUT-3")
    frozen = freeze(kit, source, again, clause="PUT-3")
    _expect(
        kit,
        len(frozen.entries) == 1 and not frozen.incomplete,
        "one clean entry after an identical re-put",
        describe(frozen),
        "an identical re-put is a no-op",
        clause="PUT-3",
    )
    raises(kit.sink().put, twice)
    _expect(
        kit,
        state(freeze(kit, kit.source(), again, clause="PUT-3")) == state(frozen),
        "an identical re-put after freeze to change nothing",
        describe(frozen),
        "after freeze an identical re-put may raise, but never moves the version",
        clause="PUT-3",
    )


def _round_trip_findings(kit: Kit, frozen: SnapshotView, entry: Any) -> tuple[str, str]:
    """Say how a plain entry came back changed, and what to do about it.

    A store on a record class of its own (NeMo Gym's ``TokenEntry`` has fields tokcap's lacks)
    hands back every field it was given plus its class's defaults. Judged with tokcap's record
    class, that is no transport bug: the run is told which ``--tokcap-entry-class`` to pass.
    """
    plain = describe(frozen)
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


def _isolation(kit: Kit) -> None:
    """PUT-5 and PUT-6: look-alike rollouts stay apart; odd ASCII call ids come back exactly."""
    sink, source = kit.sink(), kit.source()
    base = kit.rollout_id("Iso")
    ids = [f"{base}.a", f"{base}_a", f"{base}.A"]
    entries = [kit.entries.entry(rollout) for rollout in ids]
    for entry in entries:
        put(kit, sink, entry, clause="PUT-5")
    first = freeze(kit, source, ids[0], clause="PUT-5")
    put(kit, sink, kit.entries.entry(f"{base}-a"), clause="PUT-5")
    for rollout, entry in zip(ids, entries, strict=True):
        view = freeze(kit, source, rollout, clause="PUT-5")
        _expect(
            kit,
            view.payloads() == sent([entry]),
            f"{rollout!r} to hold only its own entry",
            describe(view),
            "key storage by the exact rollout id",
            clause="PUT-5",
        )
    _expect(
        kit,
        state(freeze(kit, source, ids[0], clause="PUT-5")) == state(first),
        "writes to other rollouts to leave this one's snapshot as it was",
        describe(first),
        "keep one version per rollout",
        clause="PUT-5",
    )
    rollout = kit.rollout_id("calls")
    odd = [
        kit.entries.entry(rollout, call, prompt_len=4, generation_len=2)
        for call in (*ODD_CALL_IDS, "a/b", "a_b", "A/B")
        if call.isascii()
    ]
    for entry in odd:
        put(kit, sink, entry, clause="PUT-6")
    view = freeze(kit, source, rollout, clause="PUT-6")
    _expect(
        kit,
        view.payloads() == sent(odd),
        "odd call ids to come back exactly",
        describe(view),
        "never split, cut or normalize call ids",
        clause="PUT-6",
    )


def _retire(kit: Kit) -> None:
    """DROP-1, DROP-2, DROP-3, FENCE-2, FENCE-1: exact drops retire; others destroy nothing."""
    sink, source = kit.sink(), kit.source()
    exact, other = kit.rollout_id("basic"), kit.rollout_id("basic")
    for rollout in (exact, other):
        put(kit, sink, kit.entries.entry(rollout), clause="PUT-1")
    first = freeze(kit, source, exact, clause="FREEZE-1")
    _expect(
        kit,
        drop(kit, kit.source(), exact, first.snapshot_id, first.version, clause="DROP-1"),
        "drop of the exact current snapshot to return True",
        f"False for {describe(first)}",
        "compare the stored frozen snapshot_id and version, from any instance",
        clause="DROP-1",
    )
    _expect(
        kit,
        raises(kit.sink().put, kit.entries.entry(exact)) is not None,
        "a put after drop to raise",
        "it was acked",
        "keep a tombstone for dropped rollouts",
        clause="FENCE-2",
    )
    try:
        gone = read_snapshot(kit.run(kit.source().raw.freeze(exact)))
    except Exception:
        gone = None  # A retired rollout may refuse to freeze.
    if gone is not None:
        remains = bool(gone.entries)
        _expect(
            kit,
            remains == kit.claims("no-delete"),
            "the records to still freeze after drop (no-delete declared)"
            if kit.claims("no-delete")
            else "the records to be gone after drop",
            describe(gone),
            "delete on drop, or declare --tokcap-capability=no-delete",
            clause="DROP-5",
        )
    kept = freeze(kit, source, other, clause="FREEZE-1")
    for snapshot_id, version in ((kept.snapshot_id, kept.version + 1), ("other", kept.version)):
        _expect(
            kit,
            not drop(kit, source, other, snapshot_id, version, clause="DROP-2"),
            f"drop with ({snapshot_id!r}, {version}) to return False",
            f"True (current {kept.snapshot_id!r}, {kept.version})",
            "retire only the exact current snapshot",
            clause="DROP-2",
        )
    _expect(
        kit,
        state(freeze(kit, kit.source(), other, clause="DROP-3")) == state(kept),
        "a refused drop to destroy nothing",
        describe(kept),
        "a refused drop must not delete, unfreeze or re-version anything",
        clause="DROP-3",
    )
    late = kit.rollout_id("late")
    put(kit, sink, kit.entries.entry(late), clause="PUT-1")
    before = freeze(kit, source, late, clause="FREEZE-1")
    if raises(kit.sink().put, kit.entries.entry(late)) is None:
        _expect(
            kit,
            kit.fence != "strict",
            "a put of a new call after freeze to raise (--tokcap-fence=strict)",
            "it was acked",
            "refuse writes to a frozen rollout",
            clause="FENCE-1",
        )
        after = freeze(kit, kit.source(), late, clause="FENCE-1")
        _expect(
            kit,
            after.version != before.version and len(after.entries) == 2,
            "a put after freeze to raise, or to be kept under a new version",
            f"before: {describe(before)}; after: {describe(after)}",
            "a relaxed fence bumps the version on every accepted write",
            clause="FENCE-1",
        )


def _masking(kit: Kit) -> None:
    """MASK-1, MASK-5, MASK-3, MASK-2: a mark is seen, keeps entries, moves versions, sticks."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id("mask")
    entry = kit.entries.entry(rollout)
    put(kit, sink, entry, clause="PUT-1")
    mark(kit, kit.sink(), rollout, "basic", clause="MASK-1")
    seen = freeze(kit, kit.source(), rollout, clause="MASK-1")
    _expect(
        kit,
        seen.incomplete,
        "a fresh source to see the mark: incomplete=True",
        describe(seen),
        "mark_incomplete must be durable and visible before it returns",
        clause="MASK-1",
    )
    _expect(
        kit,
        seen.payloads() == sent([entry]),
        "the masked rollout to keep its entry",
        describe(seen),
        "masking keeps the evidence",
        clause="MASK-5",
    )
    fresh = kit.rollout_id("mask-frozen")
    put(kit, sink, kit.entries.entry(fresh), clause="PUT-1")
    clean = freeze(kit, source, fresh, clause="FREEZE-1")
    mark(kit, kit.sink(), fresh, "after-freeze", clause="MASK-3")
    after = freeze(kit, kit.source(), fresh, clause="MASK-3")
    _expect(
        kit,
        after.incomplete and after.version != clean.version,
        "a mark after freeze to show under a new version",
        f"before: {describe(clean)}; after: {describe(after)}",
        "a mark is a state change: bump the version",
        clause="MASK-3",
    )
    stale = kit.rollout_id("mask-stale")
    put(kit, sink, kit.entries.entry(stale), clause="PUT-1")
    old = freeze(kit, source, stale, clause="FREEZE-1")
    mark(kit, kit.sink(), stale, "after-freeze", clause="DROP-4")
    _expect(
        kit,
        not drop(kit, source, stale, old.snapshot_id, old.version, clause="DROP-4"),
        "drop of the snapshot taken before the mark to return False",
        "True",
        "drop must compare the current version, not the one frozen",
        clause="DROP-4",
    )
    mark(kit, sink, rollout, "again", clause="MASK-2")
    for _ in range(2):
        again = freeze(kit, source, rollout, clause="MASK-2")
        _expect(
            kit,
            again.incomplete,
            "incomplete to stick over re-marks and freezes",
            describe(again),
            "never clear the incomplete flag",
            clause="MASK-2",
        )
    _expect(
        kit,
        drop(kit, source, rollout, again.snapshot_id, again.version, clause="MASK-5"),
        "a masked snapshot to drop with its exact id and version",
        "False",
        "a masked rollout is retired like any other",
        clause="MASK-5",
    )
    later = kit.rollout_id("mask-late")
    put(kit, sink, kit.entries.entry(later), clause="PUT-1")
    mark(kit, sink, later, "first", clause="MASK-2")
    put(kit, sink, kit.entries.entry(later), clause="MASK-2")
    before = freeze(kit, source, later, clause="MASK-2")
    _expect(
        kit,
        before.incomplete,
        "a put after a mark to leave it incomplete",
        describe(before),
        "never clear the incomplete flag on a put",
        clause="MASK-2",
    )


def _closing(kit: Kit) -> None:
    """CLOSE-2: what was acked before close, a mark included, is there after it."""
    sink = kit.sink()
    rollout = kit.rollout_id("close")
    entry = kit.entries.entry(rollout)
    put(kit, sink, entry, clause="PUT-1")
    mark(kit, sink, rollout, "closing", clause="MASK-1")
    kit.run(sink.raw.close())
    after = freeze(kit, kit.source(), rollout)
    _expect(
        kit,
        after.incomplete and after.payloads() == sent([entry]),
        "the entry and the mark acked before close to be there after it",
        describe(after),
        "every ack must already be durable when close runs",
    )


def _spawned(kit: Kit) -> None:
    """SPAWN-1, SPAWN-2, SPAWN-3, MASK-1: workers build, together too, and are seen here."""
    if kit.claims("process-local"):
        return
    settings = kit.settings
    rollout = kit.rollout_id("spawned")
    marked = kit.rollout_id("spawned-mark")
    entry = kit.entries.entry(rollout)
    plan = WorkerPlan(
        settings.sink,
        dict(settings.sink_kwargs),
        (
            Operation("put", entry_view(entry).payload),
            Operation("mark", rollout_id=marked, model_call_id="worker"),
        ),
        entry_class=settings.entry_class,
    )
    (outcome,) = run_workers([plan], together=False)
    _expect(
        kit,
        outcome.stage == "ok",
        "a sink built in a spawned worker to ack a put",
        kit.redact(f"{outcome.stage}: {outcome.error}"),
        "build from the target string and kwargs alone",
        clause="SPAWN-1",
    )
    pair = run_workers(
        [
            WorkerPlan(
                settings.sink,
                dict(settings.sink_kwargs),
                (Operation("put", entry_view(kit.entries.entry(kit.rollout_id("pair"))).payload),),
                entry_class=settings.entry_class,
            )
            for _ in range(4)
        ],
        together=True,
    )
    _expect(
        kit,
        all(o.stage == "ok" for o in pair),
        "four workers constructing at the same moment to succeed",
        kit.redact("; ".join(f"{o.stage}: {o.error}" for o in pair)),
        "construction must not race on first-run setup",
        clause="SPAWN-2",
    )
    view = freeze(kit, kit.source(), rollout, clause="SPAWN-3")
    _expect(
        kit,
        view.payloads() == sent([entry]),
        "the worker's acked entry visible here",
        describe(view),
        "store records where every process reads them",
        clause="SPAWN-3",
    )
    _expect(
        kit,
        freeze(kit, kit.source(), marked, clause="MASK-1").incomplete,
        "the worker's mark visible here",
        "incomplete=False",
        "keep marks where every process reads them",
        clause="MASK-1",
    )


_BASICS: tuple[tuple[Callable[[Kit], None], str | None], ...] = (
    (_shapes, "SHAPE-1"),
    (_builds, "BUILD-1"),
    (_visible_on_return, "PUT-1"),
    (_one_rollout, None),
    (_isolation, None),
    (_retire, None),
    (_masking, None),
    (_closing, "CLOSE-2"),
    (_spawned, None),
)
"""Each basic, in the order they are tried, with the clause it judges throughout (its kit's
clause), or None when it names the clause of every step."""


def freeze_elsewhere(kit: Kit, rollout: str) -> SnapshotView | BaseException:
    """Freeze from a fresh source on another thread's loop while the kit's loop stands still.

    Work the sink left for its own event loop (a task committing after the ack) cannot run
    in between, exactly as for a consumer in another process. Returns the snapshot read
    through the contract, or what went wrong.
    """
    found: list[Any] = []

    async def look() -> Any:
        source = build_endpoint(kit.settings.source, dict(kit.settings.source_kwargs), "source")
        try:
            return await source.freeze(rollout)
        finally:
            await source.close()

    def run() -> None:
        try:
            found.append(read_snapshot(asyncio.run(look())))
        except BaseException as exc:
            found.append(exc)

    worker = threading.Thread(target=run, name="tokcap-fresh-source", daemon=True)
    worker.start()
    worker.join(kit.settings.timeout)
    if found:
        return found[0]  # type: ignore[no-any-return]
    return TimeoutError(
        f"the fresh source's freeze did not return within {kit.settings.timeout:g} s "
        "(--tokcap-timeout)"
    )
