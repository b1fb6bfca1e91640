"""Steps many checks share: acting on an endpoint while naming the clause that step serves.

Each step turns an error the contract does not allow into a :class:`ClauseViolation` of the
clause being checked, so every failure names a clause, whatever broke.
"""

from __future__ import annotations

from typing import Any

from conformance.context import Endpoint, Kit, unexpected_error
from conformance.violation import ClauseViolation, fail
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry

__all__ = [
    "describe",
    "drop",
    "expect_equal_snapshots",
    "freeze",
    "mark",
    "payloads",
    "put",
    "raises",
    "state",
]


def put(kit: Kit, clause: str, sink: Endpoint, entry: TokenEntry) -> None:
    """Put ``entry``; any error is a violation of ``clause``."""
    __tracebackhide__ = True
    _step(
        kit, clause, f"put of call {entry.model_call_id!r} into {entry.rollout_id}", sink.put, entry
    )


def mark(kit: Kit, clause: str, sink: Endpoint, rollout_id: str, model_call_id: str = "") -> None:
    """Mark ``rollout_id`` incomplete; any error is a violation of ``clause``."""
    __tracebackhide__ = True
    _step(
        kit,
        clause,
        f"mark_incomplete({rollout_id!r}, {model_call_id!r})",
        sink.mark_incomplete,
        rollout_id,
        model_call_id,
    )


def freeze(kit: Kit, clause: str, source: Endpoint, rollout_id: str) -> TokenCaptureSnapshot:
    """Freeze ``rollout_id`` and check the snapshot's shape; errors violate ``clause``."""
    __tracebackhide__ = True
    snapshot = _step(kit, clause, f"freeze({rollout_id!r})", source.freeze, rollout_id)
    for name in ("rollout_id", "entries", "incomplete", "snapshot_id", "version"):
        if not hasattr(snapshot, name):
            fail(
                "SHAPE-1",
                expected=f"the snapshot to expose {name!r}",
                observed=f"{type(snapshot).__name__} has no attribute {name!r}",
                hint="return tokcap_spec.protocols.TokenCaptureSnapshot",
            )
    return snapshot  # type: ignore[no-any-return]


def drop(
    kit: Kit, clause: str, source: Endpoint, rollout_id: str, snapshot_id: str, version: int
) -> bool:
    """Drop with keyword arguments; anything but a bool (or an error) violates ``clause``."""
    __tracebackhide__ = True
    result = _step(
        kit,
        clause,
        f"drop({rollout_id!r}, snapshot_id=..., version={version})",
        source.drop,
        rollout_id,
        snapshot_id=snapshot_id,
        version=version,
    )
    if not isinstance(result, bool):
        fail(
            clause,
            expected="drop() to return a bool",
            observed=f"{result!r}",
            hint="return True only when the exact snapshot was retired, else False",
        )
    return result


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


def payloads(snapshot: TokenCaptureSnapshot) -> dict[str, bytes]:
    """Return the snapshot's canonical payload per call id."""
    return {entry.model_call_id: entry.to_json_bytes() for entry in snapshot.entries}


def state(snapshot: TokenCaptureSnapshot) -> tuple[Any, ...]:
    """Return everything a snapshot asserts, in a comparable form."""
    return (
        snapshot.snapshot_id,
        snapshot.version,
        bool(snapshot.incomplete),
        tuple(sorted(entry.to_json_bytes() for entry in snapshot.entries)),
    )


def describe(snapshot: TokenCaptureSnapshot) -> str:
    """Return a one-line account of a snapshot for failure messages."""
    calls = sorted(entry.model_call_id for entry in snapshot.entries)
    shown = ", ".join(repr(call[:40]) for call in calls[:6]) + (" ..." if len(calls) > 6 else "")
    return (
        f"snapshot_id={snapshot.snapshot_id!r} version={snapshot.version!r} "
        f"incomplete={snapshot.incomplete!r} entries={len(calls)} [{shown}]"
    )


def expect_equal_snapshots(
    clause: str, before: TokenCaptureSnapshot, after: TokenCaptureSnapshot, *, hint: str
) -> None:
    """Fail ``clause`` unless two snapshots assert exactly the same state."""
    __tracebackhide__ = True
    if state(before) != state(after):
        fail(
            clause,
            expected=f"the same snapshot: {describe(before)}",
            observed=describe(after),
            hint=hint,
        )
