"""One operation of a concurrent history: what was asked, when, and what came back."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

__all__ = ["Event", "Kind", "Outcome", "Pair", "digest"]

Kind = Literal["put", "mark", "begin", "freeze", "drop", "retire", "delete"]
Outcome = Literal["ok", "fail", "unknown"]
Pair = tuple[str, int]
"""A snapshot's ``(snapshot_id, version)``."""


def digest(payload: bytes) -> str:
    """Return a short fingerprint of an entry's canonical bytes."""
    return hashlib.sha256(payload).hexdigest()[:16]


@dataclass(frozen=True)
class Event:
    """One operation, invoked at ``invoke`` and completed at ``complete`` (ns, shared clock).

    ``outcome`` is ``ok`` (returned), ``fail`` (raised, so it had no effect unless the contract
    says a refusal may still mark) or ``unknown`` (never completed: it may or may not have taken
    effect, and ``complete`` is None). A put carries its call id and payload digest; a drop its
    ``pair`` argument and ``returned`` bool; a freeze its result: ``entries`` as
    ``(call id, digest)`` in the order returned, ``incomplete`` and ``result`` pair.
    """

    lane: str
    index: int
    kind: Kind
    rollout_id: str
    invoke: int
    complete: int | None
    outcome: Outcome
    call_id: str = ""
    digest: str = ""
    pair: Pair | None = None
    returned: bool | None = None
    entries: tuple[tuple[str, str], ...] = ()
    incomplete: bool = False
    result: Pair | None = None
    error: str = ""

    @property
    def ends(self) -> float:
        """The completion time, or infinity for an operation that never completed."""
        return float("inf") if self.complete is None else float(self.complete)

    def precedes(self, other: Event) -> bool:
        """Return whether this operation completed before ``other`` was invoked."""
        return self.complete is not None and self.complete < other.invoke

    def describe(self) -> str:
        """Return one line naming the operation and what it returned."""
        call = f" call {self.call_id[:40]!r}" if self.call_id else ""
        if self.kind == "put":
            what = f"put{call} [{self.digest[:8]}]"
        elif self.kind == "mark":
            what = f"mark_incomplete{call}"
        elif self.kind == "begin":
            what = f"begin_call{call}"
        elif self.kind == "drop":
            what = f"drop{self.pair}"
        elif self.kind in ("retire", "delete"):
            what = f"{self.kind}([rollout])"
        else:
            what = "freeze"
        if self.outcome == "fail":
            said = f"raised {self.error}"
        elif self.outcome == "unknown":
            said = "never completed"
        elif self.kind == "drop":
            said = f"-> {self.returned}"
        elif self.kind == "freeze":
            calls = ", ".join(repr(call[:24]) for call, _ in self.entries[:5])
            more = " ..." if len(self.entries) > 5 else ""
            said = (
                f"-> {self.result} incomplete={self.incomplete} "
                f"{len(self.entries)} entries [{calls}{more}]"
            )
        else:
            said = "-> ok"
        return f"{self.lane}#{self.index} {what} on {self.rollout_id} {said}"
