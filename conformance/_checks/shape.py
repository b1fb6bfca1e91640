"""SHAPE: the methods exist, are coroutines, take keywords, and snapshots are immutable."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from conformance import _steps as step
from conformance._kit import Endpoint, Kit
from conformance._reading import Unreadable, read_snapshot
from conformance._registry import basic, check
from tokcap_spec.protocols import TokenSink, TokenSource, protocol_methods, protocol_problems
from tokcap_spec.records import TokenEntry


def _expect_protocol(
    kit: Kit, target: str, kwargs: dict[str, Any], protocol: type, role: str
) -> None:
    built = step.construct(kit, target, kwargs)
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
        if inspect.iscoroutinefunction(getattr(built, "close", None)):
            step.close(kit, built)


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
    step.put(kit, kit.sink(), kit.entries.entry(rollout))
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
    step.expect_drop_shape(source)
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
    step.expect_bool(answer)


_RECORD_FIELDS = tuple(TokenEntry.model_fields)


def _tamper(entry: Any) -> None:
    """Edit, in place, every list and mapping the entry hands out, however it hands them out:
    as attributes (the record's fields and any extra field the entry keeps), or as the values
    of any mapping (a read-only view included)."""
    if isinstance(entry, Mapping):
        handed = dict(entry.items())
    else:
        extra = getattr(entry, "__pydantic_extra__", None) or {}
        names = [*_RECORD_FIELDS, *(name for name in extra if isinstance(name, str))]
        handed = {name: getattr(entry, name, None) for name in names}
    for name, value in handed.items():
        if isinstance(value, list):
            value.append({"tampered": True} if name == "output_items" else 1)
        elif isinstance(value, dict):
            value["tampered"] = True
            for inner in value.values():
                if isinstance(inner, list):
                    inner.append("tampered")


def _with_mutable_extra(kit: Kit, rollout: str) -> Any:
    """A plain entry with an extra field holding a mapping and a list, where the entry class
    keeps extras (a store that copies only the record's own fields shares this one)."""
    try:
        return kit.entries.entry(rollout, x_caller_notes={"tags": ["kept"], "turn": 1})
    except (TypeError, ValueError):
        return kit.entries.entry(rollout)  # The entry class keeps no extra fields.


@check("SHAPE-3", "caller-mutation")
def caller_mutation(kit: Kit) -> None:
    """Mutating a returned snapshot's entries, an extra field's values included, never changes
    what a later freeze returns."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    step.put(kit, sink, kit.entries.entry(rollout))
    step.put(kit, sink, _with_mutable_extra(kit, rollout))
    first = step.freeze(kit, source, rollout)
    expected = step.state(first)
    entries = first.raw.entries
    for entry in entries:
        _tamper(entry)
    if isinstance(entries, list):
        entries.clear()
    for label, endpoint in (("the same source", source), ("a fresh source", kit.source())):
        again = step.freeze(kit, endpoint, rollout)
        if step.state(again) != expected:
            kit.fail(
                expected=f"freeze from {label} to ignore the caller's edits",
                observed="after editing the returned snapshot, freeze returned "
                + step.describe(again),
                hint="hand out copies: never share stored lists or entries with a snapshot",
            )


@check("SHAPE-3", "later-writes")
def later_writes(kit: Kit) -> None:
    """A snapshot already returned does not change when the rollout is written afterwards."""
    sink, source = kit.sink(), kit.source()
    rollout = kit.rollout_id()
    entry = kit.entries.entry(rollout)
    step.put(kit, sink, entry)
    first = step.freeze(kit, source, rollout)
    expected = step.state(first)
    step.mark(kit, sink, rollout, step.call_of(entry))
    step.raises(sink.put, kit.entries.entry(rollout))
    for when in ("after later writes", "after freezing again", "after a fresh source froze"):
        if when == "after freezing again":
            step.freeze(kit, source, rollout)
        elif when == "after a fresh source froze":
            step.freeze(kit, kit.source(), rollout)
        now = step.reread(first)
        if step.state(now) != expected:
            kit.fail(
                expected=f"the returned snapshot to stay as it was {when}",
                observed=f"it now reads {step.describe(now)}",
                hint="build each snapshot from copies, never from lists the store keeps and "
                "extends at the next freeze; make it a frozen TokenCaptureSnapshot",
            )


@basic("SHAPE-1", "shapes")
def basic_shapes(kit: Kit) -> None:
    """SHAPE-1 and SHAPE-2: the protocol methods are coroutine functions; drop takes keywords."""
    settings = kit.settings
    for target, kwargs, protocol in (
        (settings.sink, settings.sink_kwargs, TokenSink),
        (settings.source, settings.source_kwargs, TokenSource),
    ):
        try:
            built = step.construct(kit, target, dict(kwargs))
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
                step.expect_drop_shape(Endpoint(kit, built, "source"))
        finally:
            if inspect.iscoroutinefunction(getattr(built, "close", None)):
                step.close(kit, built)
