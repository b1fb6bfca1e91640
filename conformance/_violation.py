"""The failure a check raises: which clause broke, what was expected, what was seen, what to do."""

from __future__ import annotations

from typing import NoReturn

from conformance.catalog import CLAUSES_DOC
from conformance.catalog import clause as catalog_clause

__all__ = [
    "CLAUSES_DOC",
    "READ_COMMAND",
    "BlockedBy",
    "ClauseViolation",
    "ExtensionMissing",
    "NotClaimed",
    "clause_anchor",
    "fail",
]

READ_COMMAND = "python -m conformance.clauses"


def clause_anchor(clause: str) -> str:
    """Return where the clause is explained, as ``docs/clauses.md#put-1``."""
    return f"{CLAUSES_DOC}#{clause.lower()}"


class ClauseViolation(AssertionError):
    """An implementation broke one contract clause.

    The message reads, in one block: the clause id, the expectation, the observation, a hint at
    the usual cause, the clause's title and promise as the catalog states them (for a clause
    the catalog knows), where the clause is explained, and the command that prints that
    explanation from an installed kit.
    """

    def __init__(self, clause: str, expected: str, observed: str, hint: str) -> None:
        self.clause = clause
        self.expected = expected
        self.observed = observed
        self.hint = hint
        super().__init__(
            f"[{clause}] contract violated\n"
            f"  expected: {expected}\n"
            f"  observed: {observed}\n"
            f"  hint:     {hint}\n"
            f"{_promise(clause)}"
            f"  see:      {clause_anchor(clause)}\n"
            f"  read:     {READ_COMMAND} {clause}"
        )


def _promise(clause: str) -> str:
    """The message's ``promise:`` line, or nothing for an id the catalog does not hold."""
    try:
        found = catalog_clause(clause)
    except KeyError:
        return ""
    return f"  promise:  {found.title}: {found.promise}\n"


def fail(clause: str, *, expected: str, observed: str, hint: str) -> NoReturn:
    """Raise :class:`ClauseViolation`; tracebacks end here, not deep in the kit.

    Any exception being handled is not chained: its text may carry a kwarg value.
    """
    __tracebackhide__ = True
    raise ClauseViolation(clause, expected, observed, hint) from None


class BlockedBy(Exception):
    """A check cannot judge its clause because a more basic one broke; ``violation`` says how."""

    def __init__(self, violation: ClauseViolation) -> None:
        super().__init__(str(violation))
        self.violation = violation


class NotClaimed(Exception):
    """The target declared a capability under which this check does not apply."""


class ExtensionMissing(Exception):
    """The target does not implement the optional method this check needs."""
