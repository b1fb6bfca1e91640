"""CLOSE: close is idempotent and loses nothing."""

from __future__ import annotations

from conformance._checks._operations import (
    call_of,
    describe,
    freeze,
    mark,
    payloads,
    put,
    raises,
    sent,
)
from conformance._kit import Kit
from conformance._registry import check


@check("CLOSE-1", "idempotent")
def idempotent(kit: Kit) -> None:
    """Closing a sink and a source twice raises nothing."""
    for endpoint in (kit.sink(), kit.source()):
        for attempt in ("first", "second"):
            error = raises(endpoint.close)
            if error is not None:
                kit.fail(
                    expected=f"the {attempt} {endpoint.role}.close() to succeed",
                    observed=kit.redact(f"{type(error).__name__}: {error}"),
                    hint="make close() a no-op once closed",
                )


@check("CLOSE-2", "loses-nothing")
def loses_nothing(kit: Kit) -> None:
    """Everything acked before close is visible to a fresh source after it."""
    sink = kit.sink()
    rollout = kit.rollout_id()
    entries = [kit.entries.entry(rollout) for _ in range(5)]
    for entry in entries:
        put(kit, sink, entry)
    mark(kit, sink, rollout, call_of(entries[0]))
    error = raises(sink.close)
    if error is not None:
        kit.fail(
            expected="close() to succeed",
            observed=f"{type(error).__name__}",
            hint="see CLOSE-1",
        )
    snapshot = freeze(kit, kit.source(), rollout)
    expected = sent(entries)
    if payloads(snapshot) != expected or not snapshot.incomplete:
        kit.fail(
            expected=f"all {len(entries)} entries and the mark after close",
            observed=describe(snapshot),
            hint="every ack must already be durable when close runs",
        )
