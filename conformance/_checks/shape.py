"""SHAPE: the methods exist, are coroutines, take keywords, and snapshots are immutable."""

from __future__ import annotations

import inspect
from typing import Any

from conformance._basics import construct
from conformance._checks._operations import (
    call_of,
    describe,
    expect_bool,
    expect_drop_shape,
    freeze,
    mark,
    put,
    raises,
    reread,
    state,
)
from conformance._kit import Kit
from conformance._reading import Unreadable, read_snapshot
from conformance._registry import check
from tokcap_spec.protocols import TokenSink, TokenSource, protocol_methods, protocol_problems


def _expect_protocol(
    kit: Kit, target: str, kwargs: dict[str, Any], protocol: type, role: str
) -> None:
    built = construct(kit, target, kwargs)
    try:
        methods = protocol_methods(protocol)
        problems = protocol_problems(built, protocol)
        if problems or not isinstance(built, protocol):
            kit.fail(
                expected=f"a {protocol.__name__}: async {', '.join(methods)}",
                observed="; ".join(problems) or f"isinstance({role}, {protocol.__name__}) is False",
                hint=f"declare the three methods with 'async def' on the {role} class",
            )
    finally:
        closing = getattr(built, "close", None)
        if inspect.iscoroutinefunction(closing):
            kit.run(closing())


@check("SHAPE-1", "sink-protocol")
def sink_protocol(kit: Kit) -> None:
    """The sink has put, mark_incomplete and close as coroutine functions."""
    _expect_protocol(kit, kit.settings.sink, dict(kit.settings.sink_kwargs), TokenSink, "sink")


@check("SHAPE-1", "source-protocol")
def source_protocol(kit: Kit) -> None:
    """The source has freeze, drop and close as coroutine functions."""
    settings = kit.settings
    _expect_protocol(kit, settings.source, dict(settings.source_kwargs), TokenSource, "source")


@check("SHAPE-1", "snapshot-attributes")
def snapshot_attributes(kit: Kit) -> None:
    """A snapshot exposes rollout_id, entries, incomplete, snapshot_id and version."""
    rollout = kit.rollout_id()
    put(kit, kit.sink(), kit.entries.entry(rollout))
    try:
        read_snapshot(kit.run(kit.source().raw.freeze(rollout)))
    except Unreadable as problem:
        if problem.clause == kit.clause:
            kit.fail(
                expected="a snapshot with the five attributes, entries carrying the record's "
                "fields",
                observed=kit.redact(str(problem)),
                hint="return a TokenCaptureSnapshot, or any object with those five attributes",
            )


@check("SHAPE-2", "drop-keywords")
def drop_keywords(kit: Kit) -> None:
    """Drop accepts snapshot_id and version as keyword arguments and answers a bool."""
    source = kit.source()
    expect_drop_shape(source)
    try:
        answer = source.drop(kit.rollout_id("unknown"), snapshot_id="none", version=0)
    except TypeError as error:
        kit.fail(
            expected="drop(rollout_id, snapshot_id=..., version=...) to be callable",
            observed=f"TypeError: {kit.redact(str(error))}",
            hint="define drop(self, rollout_id, *, snapshot_id, version)",
        )
    except Exception:
        return  # Refusing an unknown rollout by raising is DROP-2's to judge.
    expect_bool(answer)


@check("SHAPE-3", "caller-mutation")
def caller_mutation(kit: Kit) -> None:
    """Mutating a returned snapshot's entries never changes what a later freeze returns."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    put(kit, sink, kit.entries.entry(rollout))
    first = freeze(kit, source, rollout)
    expected = state(first)
    entries = first.raw.entries
    for entry in entries:
        for name in ("prompt_token_ids", "generation_token_ids", "generation_log_probs"):
            values = entry.get(name) if isinstance(entry, dict) else getattr(entry, name, None)
            if isinstance(values, list):
                values.append(1)
        items = (
            entry.get("output_items")
            if isinstance(entry, dict)
            else getattr(entry, "output_items", None)
        )
        if isinstance(items, list):
            items.append({"tampered": True})
    if isinstance(entries, list):
        entries.clear()
    for label, endpoint in (("the same source", source), ("a fresh source", kit.source())):
        again = freeze(kit, endpoint, rollout)
        if state(again) != expected:
            kit.fail(
                expected=f"freeze from {label} to ignore the caller's edits",
                observed=f"after editing the returned snapshot, freeze returned {describe(again)}",
                hint="hand out copies: never share stored lists or entries with a snapshot",
            )


@check("SHAPE-3", "later-writes")
def later_writes(kit: Kit) -> None:
    """A snapshot already returned does not change when the rollout is written afterwards."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    put(kit, sink, entry)
    first = freeze(kit, source, rollout)
    expected = state(first)
    mark(kit, sink, rollout, call_of(entry))
    raises(sink.put, kit.entries.entry(rollout))
    for when in ("after later writes", "after freezing again", "after a fresh source froze"):
        if when == "after freezing again":
            freeze(kit, source, rollout)
        elif when == "after a fresh source froze":
            freeze(kit, kit.source(), rollout)
        now = reread(first)
        if state(now) != expected:
            kit.fail(
                expected=f"the returned snapshot to stay as it was {when}",
                observed=f"it now reads {describe(now)}",
                hint="build each snapshot from copies, never from lists the store keeps and "
                "extends at the next freeze; make it a frozen TokenCaptureSnapshot",
            )
