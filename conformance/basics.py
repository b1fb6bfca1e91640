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

from conformance.checks._steps import (
    describe,
    drop,
    expect_drop_shape,
    freeze,
    mark,
    put,
    sent,
    state,
)
from conformance.context import Endpoint, Kit, build_endpoint, unexpected_error
from conformance.reading import SnapshotView, Unreadable, read_snapshot
from conformance.settings import KitSettings
from conformance.violation import ClauseViolation, fail
from tokcap_spec.errors import EndpointError
from tokcap_spec.protocols import TokenSink, TokenSource, protocol_problems

__all__ = ["construct", "first_broken", "freeze_elsewhere"]

_ELSEWHERE_SECONDS = 60.0
_VISIBILITY_ATTEMPTS = 3

_outcomes: dict[int, tuple[KitSettings, ClauseViolation | None]] = {}


def first_broken(settings: KitSettings) -> ClauseViolation | None:
    """Return the violation of the first basic that breaks for the target, or None."""
    known = _outcomes.get(id(settings))
    if known is not None and known[0] is settings:
        return known[1]
    kit = Kit(settings, "basics")
    try:
        found = _first_broken(kit)
    finally:
        kit.close()
    _outcomes[id(settings)] = (settings, found)
    return found


def _first_broken(kit: Kit) -> ClauseViolation | None:
    for basic in _BASICS:
        try:
            basic(kit)
        except ClauseViolation as violation:
            return violation
        except Unreadable as problem:
            return ClauseViolation(
                problem.clause,
                expected="a snapshot readable through the contract's five attributes",
                observed=kit.redact(str(problem)),
                hint="return a snapshot exposing rollout_id, entries, incomplete, snapshot_id "
                "and version",
            )
        except EndpointError as exc:
            return unexpected_error("BUILD-1", "building the target", exc, kit)
        except Exception as exc:
            return unexpected_error("BUILD-1", "a plain use of the target", exc, kit)
    return None


def construct(target: str, kwargs: dict[str, Any]) -> Any:
    """Build ``module:Class`` with ``kwargs`` and nothing else: no check of the protocol."""
    module, _, name = target.partition(":")
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
            built = construct(target, dict(kwargs))
        except Exception:
            return  # Construction is BUILD-1's to judge, next.
        try:
            problems = protocol_problems(built, protocol)
            if problems:
                fail(
                    "SHAPE-1",
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
            raise unexpected_error("BUILD-1", "building the target", exc, kit) from None


def _plain_cycle(kit: Kit) -> None:
    """PUT-1, FREEZE-1, PUT-2, FREEZE-3, FREEZE-2, DROP-1, MASK-1 on plain entries, in order."""
    sink = kit.sink()
    rollouts = [kit.rollout_id("basic") for _ in range(_VISIBILITY_ATTEMPTS)]
    entries = [kit.entries.entry(rollout) for rollout in rollouts]
    for rollout, entry in zip(rollouts, entries, strict=True):
        put(kit, "PUT-1", sink, entry)
        seen = freeze_elsewhere(kit, rollout)
        if isinstance(seen, Unreadable):
            raise seen
        if not isinstance(seen, SnapshotView) or not seen.entries:
            fail(
                "PUT-1",
                expected="a plain entry visible to a fresh source as soon as put returned",
                observed=describe(seen)
                if isinstance(seen, SnapshotView)
                else kit.redact(f"the fresh source's freeze raised {type(seen).__name__}: {seen}"),
                hint="ack a put only once the write is durable and visible",
            )
    rollout, entry = rollouts[0], entries[0]
    source = kit.source()
    first = freeze(kit, "FREEZE-1", source, rollout)
    if len(first.entries) != 1:
        fail(
            "FREEZE-3",
            expected="one entry for one put",
            observed=describe(first),
            hint="key entries by model_call_id",
        )
    if first.payloads() != sent([entry]):
        fail(
            "PUT-2",
            expected="a plain entry (ASCII, float32-exact log probs) to freeze back unchanged",
            observed=describe(first),
            hint="store every field of the record as given",
        )
    for again in (
        freeze(kit, "FREEZE-2", source, rollout),
        freeze(kit, "FREEZE-2", kit.source(), rollout),
    ):
        if state(again) != state(first):
            fail(
                "FREEZE-2",
                expected=f"the same snapshot again: {describe(first)}",
                observed=describe(again),
                hint="a freeze with no write in between returns the same snapshot_id and version",
            )
    if not drop(kit, "DROP-1", kit.source(), rollout, first.snapshot_id, first.version):
        fail(
            "DROP-1",
            expected="drop of the exact current snapshot to return True",
            observed=f"False for {describe(first)}",
            hint="compare the stored frozen snapshot_id and version, from any instance",
        )
    marked = kit.rollout_id("basic-mark")
    put(kit, "PUT-1", sink, kit.entries.entry(marked))
    mark(kit, "MASK-1", kit.sink(), marked, "basic")
    after = freeze(kit, "MASK-1", kit.source(), marked)
    if not after.incomplete:
        fail(
            "MASK-1",
            expected="a fresh source to see the mark: incomplete=True",
            observed=describe(after),
            hint="mark_incomplete must be durable and visible before it returns",
        )


_BASICS: tuple[Callable[[Kit], None], ...] = (_shapes, _builds, _plain_cycle)


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
    worker.join(_ELSEWHERE_SECONDS)
    if found:
        return found[0]  # type: ignore[no-any-return]
    return TimeoutError(f"the fresh source's freeze did not return within {_ELSEWHERE_SECONDS} s")
