"""Steps many checks share: acting on an endpoint on behalf of the clause that step serves.

Each step turns an error the contract does not allow into a :class:`ClauseViolation` of the
clause it serves, so every failure names a clause, whatever broke; the runner then tells
whether a more basic clause explains it (:mod:`conformance._basics`). That clause is the
check's own (``kit.clause``) unless the step is told another with ``clause=``.

Snapshots are read only through the contract (:mod:`conformance._reading`): a step hands back
a :class:`SnapshotView`, never the implementation's object.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

import hypothesis
from hypothesis.errors import Flaky

from conformance._kit import Endpoint, Kit, unexpected_error
from conformance._reading import (
    SnapshotView,
    Unreadable,
    entry_view,
    read_snapshot,
    record_fields,
)
from conformance._violation import ClauseViolation, fail

T = TypeVar("T")

__all__ = [
    "call_of",
    "describe",
    "drop",
    "expect",
    "expect_bool",
    "expect_masked",
    "expect_drop_shape",
    "expect_equal_snapshots",
    "freeze",
    "mark",
    "payloads",
    "put",
    "put_held",
    "raises",
    "reread",
    "run_property",
    "sent",
    "state",
    "unreadable",
]


def call_of(entry: Any) -> str:
    """Return the call id of an entry the kit built."""
    return entry_view(entry).model_call_id


def sent(entries: Iterable[Any]) -> dict[str, bytes]:
    """Return the kit's canonical payload per call id of entries the kit built."""
    views = [entry_view(entry) for entry in entries]
    return {view.model_call_id: view.payload for view in views}


def put(kit: Kit, sink: Endpoint, entry: Any, *, clause: str | None = None) -> None:
    """Put ``entry``; any error is a violation of ``clause`` (by default the check's own)."""
    __tracebackhide__ = True
    blamed = kit.blame(clause)
    view = entry_view(entry)
    doing = f"put of call {view.model_call_id!r} into {view.rollout_id}"
    _step(kit, blamed, doing, sink.put, entry)


def put_held(
    kit: Kit,
    sink: Endpoint,
    entry: Any,
    release: Callable[[], None],
    *,
    clause: str | None = None,
) -> None:
    """Put ``entry`` and call ``release()`` the instant put returns, before the event loop
    runs anything else; ``release`` may block, holding the loop still. Errors as :func:`put`.
    """
    __tracebackhide__ = True
    blamed = kit.blame(clause)
    view = entry_view(entry)
    doing = f"put of call {view.model_call_id!r} into {view.rollout_id}"

    async def put() -> None:  # named so the deadline's breaker knows the operation
        await sink.raw.put(entry)
        release()

    _step(kit, blamed, doing, kit.run, put())


def mark(
    kit: Kit,
    sink: Endpoint,
    rollout_id: str,
    model_call_id: str = "",
    *,
    clause: str | None = None,
) -> None:
    """Mark ``rollout_id`` incomplete; any error is a violation of ``clause`` (or the check's)."""
    __tracebackhide__ = True
    blamed = kit.blame(clause)
    doing = f"mark_incomplete({rollout_id!r}, {model_call_id!r})"
    _step(kit, blamed, doing, sink.mark_incomplete, rollout_id, model_call_id)


def close(kit: Kit, endpoint: Any, *, judged: bool = False) -> None:
    """Close ``endpoint`` (an implementation object) that a check built for another purpose.

    Whether close raises is CLOSE-1's to judge, and its check closes sinks and sources, unused
    and used, twice each: an error is ignored here, or with ``judged`` (a close the check's
    own program makes, between its steps) a violation of CLOSE-1. A close that overruns the
    deadline stops the check either way.
    """
    __tracebackhide__ = True
    try:
        kit.run(endpoint.close())
    except ClauseViolation:
        if judged:
            raise
    except Exception as exc:
        if judged:
            fail(
                "CLOSE-1",
                expected=f"{type(endpoint).__name__}.close() to succeed",
                observed=kit.redact(f"{type(exc).__name__}: {exc}")[:300],
                hint="close() must succeed whatever the instance did: unused, after any "
                "operation, and again once closed",
            )


def freeze(
    kit: Kit, source: Endpoint, rollout_id: str, *, clause: str | None = None
) -> SnapshotView:
    """Freeze ``rollout_id`` and read the snapshot through the contract.

    An error violates ``clause`` (by default the check's own); a snapshot of the wrong shape
    violates SHAPE-1 or FREEZE-1, whatever the check.
    """
    __tracebackhide__ = True
    blamed = kit.blame(clause)
    raw = _step(kit, blamed, f"freeze({rollout_id!r})", source.freeze, rollout_id)
    view = _read(raw)
    if view.rollout_id != rollout_id:
        fail(
            "FREEZE-1",
            expected=f"a snapshot of rollout_id {rollout_id!r}",
            observed=f"rollout_id {view.rollout_id!r}",
            hint="the snapshot names the rollout it was frozen from, exactly as given",
        )
    return view


def reread(view: SnapshotView) -> SnapshotView:
    """Read the implementation's snapshot object again, as it reads now."""
    __tracebackhide__ = True
    return _read(view.raw)


def _read(raw: Any) -> SnapshotView:
    __tracebackhide__ = True
    try:
        return read_snapshot(raw)
    except Unreadable as problem:
        fail(
            problem.clause,
            expected="a snapshot exposing rollout_id, entries (each with the record's fields), "
            "incomplete (bool), snapshot_id (non-empty str) and version (int)",
            observed=str(problem),
            hint="return a TokenCaptureSnapshot, or any object with those five attributes",
        )


def drop(
    kit: Kit,
    source: Endpoint,
    rollout_id: str,
    snapshot_id: str,
    version: int,
    *,
    clause: str | None = None,
) -> bool:
    """Drop with keyword arguments; an error violates ``clause`` (by default the check's own).

    The ids and the version are handed over as equal copies, never the very objects a freeze
    returned, as a consumer in another process reads them back from a queue: a store that
    compares them by identity is caught. A drop that cannot take the keywords, or returns no
    bool, is SHAPE-2.
    """
    __tracebackhide__ = True
    blamed = kit.blame(clause)
    expect_drop_shape(source)
    result = _step(
        kit,
        blamed,
        f"drop({rollout_id!r}, snapshot_id=..., version={version})",
        source.drop,
        _copy(rollout_id),
        snapshot_id=_copy(snapshot_id),
        version=_copy(version),
    )
    expect_bool(result)
    return bool(result)


def _copy(value: T) -> T:
    """An equal object that is not ``value`` itself, for a str or an int (else ``value``)."""
    if type(value) is str:
        return cast(T, "".join(list(cast(str, value))))
    if type(value) is int:
        return cast(T, int(str(value)))
    return value


def expect(
    kit: Kit, holds: bool, expected: str, observed: str, hint: str, *, clause: str | None = None
) -> None:
    """Fail ``clause`` (by default the check's own) unless ``holds``."""
    __tracebackhide__ = True
    if not holds:
        kit.fail(expected=expected, observed=observed, hint=hint, clause=clause)


def expect_masked(
    kit: Kit, rollout_id: str, expected: str, hint: str, *, clause: str | None = None
) -> None:
    """Fail ``clause`` (by default the check's own) unless the freeze of ``rollout_id`` by a
    source with no memory of it (:meth:`Kit.source_for`) is incomplete."""
    __tracebackhide__ = True
    snapshot = freeze(kit, kit.source_for(rollout_id), rollout_id, clause=clause)
    expect(kit, snapshot.incomplete, expected, "incomplete=False", hint, clause=clause)


def expect_bool(answer: object) -> None:
    """Fail SHAPE-2 unless a drop answered a bool."""
    __tracebackhide__ = True
    if not isinstance(answer, bool):
        fail(
            "SHAPE-2",
            expected="drop() to return a bool",
            observed=f"{type(answer).__name__} {answer!r}"[:200],
            hint="return True only when the exact snapshot was retired, else False",
        )


def unreadable(problem: Unreadable, kit: Kit) -> ClauseViolation:
    """The violation a snapshot or entry the contract's names cannot read is."""
    return ClauseViolation(
        problem.clause,
        expected="a snapshot and entries readable through the contract's names",
        observed=kit.redact(str(problem)),
        hint="return a snapshot exposing rollout_id, entries, incomplete, snapshot_id and "
        "version, with entries that carry the record's fields",
    )


def expect_drop_shape(source: Endpoint) -> None:
    """Fail SHAPE-2 unless ``drop(rollout_id, snapshot_id=..., version=...)`` binds."""
    __tracebackhide__ = True
    method = getattr(source.raw, "drop", None)
    if not callable(method):
        return  # SHAPE-1 judges a missing method.
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):
        return
    try:
        signature.bind("rollout", snapshot_id="s", version=0)
    except TypeError:
        fail(
            "SHAPE-2",
            expected="drop(rollout_id, snapshot_id=..., version=...) to accept those keywords",
            observed=f"drop{signature}",
            hint="define drop(self, rollout_id, *, snapshot_id, version)",
        )


def raises(call: Any, *args: Any, **kwargs: Any) -> BaseException | None:
    """Run an endpoint call and return the exception it raised, or None."""
    try:
        call(*args, **kwargs)
    except ClauseViolation:
        raise
    except Exception as exc:
        return exc
    return None


def _step(kit: Kit, clause: str, doing: str, call: Any, *args: Any, **kwargs: Any) -> Any:
    __tracebackhide__ = True
    try:
        return call(*args, **kwargs)
    except ClauseViolation:
        raise
    except Exception as exc:
        raise unexpected_error(clause, doing, exc, kit) from None


def payloads(snapshot: SnapshotView) -> dict[str, bytes]:
    """Return the snapshot's canonical payload per call id."""
    return snapshot.payloads()


def state(snapshot: SnapshotView) -> tuple[Any, ...]:
    """Return everything a snapshot asserts, in a comparable form."""
    return (
        snapshot.snapshot_id,
        snapshot.version,
        snapshot.incomplete,
        tuple(sorted(entry.payload for entry in snapshot.entries)),
    )


def describe(snapshot: SnapshotView) -> str:
    """Return a one-line account of a snapshot for failure messages."""
    calls = sorted(entry.model_call_id for entry in snapshot.entries)
    shown = ", ".join(repr(call[:40]) for call in calls[:6]) + (" ..." if len(calls) > 6 else "")
    return (
        f"snapshot_id={snapshot.snapshot_id!r} version={snapshot.version!r} "
        f"incomplete={snapshot.incomplete!r} entries={len(calls)} [{shown}]"
    )


def expect_equal_snapshots(
    kit: Kit,
    before: SnapshotView,
    after: SnapshotView,
    *,
    hint: str,
    clause: str | None = None,
) -> None:
    """Fail ``clause`` (by default the check's own) unless two snapshots assert the same state."""
    __tracebackhide__ = True
    blamed = kit.blame(clause)
    if state(before) != state(after):
        fail(
            blamed,
            expected=f"the same snapshot: {describe(before)}",
            observed=describe(after),
            hint=hint,
        )


def run_property(kit: Kit, test: Callable[[], None], *, clause: str | None = None) -> None:
    """Run a Hypothesis property of ``clause`` (by default the check's own) with the run's seed.

    An implementation that answers the same example two ways (it changed under the kit) makes
    Hypothesis report flakiness; that is the implementation's failure of ``clause``, never a
    fault of data generation.
    """
    __tracebackhide__ = True
    blamed = kit.blame(clause)
    try:
        hypothesis.seed(kit.settings.seed)(test)()
    except Flaky as flaky:
        inner = [e for e in getattr(flaky, "exceptions", ()) if isinstance(e, ClauseViolation)]
        seen = inner[0].observed if inner else f"{type(flaky).__name__}"
        fail(
            inner[0].clause if inner else blamed,
            expected="the same outcome every time an example ran against the implementation",
            observed=f"an example failed once and passed when replayed: {seen}",
            hint="the implementation changed under the kit: ack a put only once the write is "
            "visible to a fresh source (a background commit landing late does this)",
        )


def _in_rollout(entry: Any, rollout: str) -> dict[str, Any]:
    fields = record_fields(entry)
    fields["rollout_id"] = rollout
    return fields


def round_trips(kit: Kit, *entries: Any) -> bool:
    """Whether each entry, put alone into a rollout of its own, freezes back exactly.

    A put or freeze that fails on it is a no as well: that is PUT-2's to judge.
    """
    for entry in entries:
        alone = kit.entries.build(**_in_rollout(entry, kit.rollout_id("alone")))
        rollout = entry_view(alone).rollout_id
        try:
            put(kit, kit.sink_for(rollout), alone)
            frozen = freeze(kit, kit.source_for(rollout), rollout)
        except ClauseViolation:
            return False
        if payloads(frozen) != sent([alone]):
            return False
    return True


def late_put_moves_version(
    kit: Kit,
    sink: Endpoint,
    late_sink: Endpoint | None,
    source: Endpoint,
    *,
    clause: str | None = None,
) -> bool:
    """Whether a new call after a freeze, put by ``late_sink`` (None: a fresh sink), is frozen
    by a fresh source under a new version; tried on a rollout of its own.

    Tells a relaxed fence that did its part (the old snapshot still dropping is then DROP-4's)
    from one that took the call without a state change (FENCE-1's).
    """
    rollout = kit.rollout_id("late-twin")
    put(kit, sink, kit.entries.entry(rollout), clause=clause)
    before = freeze(kit, source, rollout, clause=clause)
    late = kit.entries.entry(rollout)
    if raises((late_sink or kit.sink()).put, late) is not None:
        return False
    after = freeze(kit, kit.source(), rollout, clause=clause)
    return after.version != before.version and call_of(late) in payloads(after)
