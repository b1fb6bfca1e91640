"""How one check's result becomes a pytest outcome the verdict can read.

A violation fails the test and names its clause. A check a more basic clause blocked fails
too, carrying that clause's violation: every clause the report fails then has a failing test
with its message, whichever check came upon it first, so the terminal, junit, the reports and
the exit code agree. A check that needed an operation the kit stopped calling (after it
overran, which already failed a test) is skipped with ``blocked by <clause>``. A call that
overran fails the clause being checked (for a check with no primary clause, the covered clause
about the operation that overran). What the verdict needs travels in the test's
``user_properties``, so it reaches an xdist controller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from conformance._engine import Outcome, evaluate
from conformance._settings import KitSettings

if TYPE_CHECKING:
    from conformance._registry import Check

__all__ = ["BLOCKED_BY", "BLOCKER_MESSAGE", "CHECK", "CLAUSE", "COVERS", "MESSAGE", "STATUS"]
__all__ += ["judge", "outcome_of"]

MESSAGE = "tokcap_message"
CLAUSE = "tokcap_clause"
COVERS = "tokcap_covers"
BLOCKED_BY = "tokcap_blocked_by"
BLOCKER_MESSAGE = "tokcap_blocker_message"
CHECK = "tokcap_check"
"""The id of the check a kit test runs, on the test from its collection on."""
STATUS = "tokcap_status"
"""The outcome's status, on the test once the check ran."""
_NOT_OBSERVATIONS = (MESSAGE, CLAUSE, COVERS, BLOCKED_BY, BLOCKER_MESSAGE, CHECK, STATUS)


def judge(settings: KitSettings, check: Check, properties: list[tuple[str, object]]) -> None:
    """Run ``check`` and turn its outcome into a pass, a failure or a skip of the test."""
    __tracebackhide__ = True
    if check.covers:
        properties.append((COVERS, " ".join(check.covers)))
    outcome = evaluate(settings, check)
    properties.append((STATUS, outcome.status))
    if outcome.blocked_by:
        properties += [(BLOCKED_BY, outcome.blocked_by)]
        properties += [(BLOCKER_MESSAGE, outcome.blocker_message)]
    if outcome.status == "failed":
        properties += [(MESSAGE, outcome.message), (CLAUSE, outcome.clause)]
        if outcome.blocked_by:
            pytest.fail(f"blocked by {outcome.blocked_by}:\n{outcome.message}", pytrace=False)
        if outcome.violation is not None:
            raise outcome.violation
        pytest.fail(outcome.message, pytrace=False)
    if outcome.status in ("skipped", "not-claimed"):
        pytest.skip(outcome.message)
    for key, value in outcome.observations.items():
        properties.append((f"tokcap_{key}", value))


def outcome_of(report: pytest.TestReport, check: Check, message: str) -> Outcome | None:
    """The outcome a kit test's report stands for; None for a phase that passed but did not
    run the check. ``message`` is the report's own text, for a failure the check did not make
    (an error in a fixture, say)."""
    properties = dict(report.user_properties)
    observations = {
        key.removeprefix("tokcap_"): str(value)
        for key, value in properties.items()
        if key.startswith("tokcap_") and key not in _NOT_OBSERVATIONS
    }
    blocked_by = str(properties.get(BLOCKED_BY) or "")
    blocker_message = str(properties.get(BLOCKER_MESSAGE) or "")
    if report.failed:
        return Outcome(
            check.id,
            "failed",
            clause=str(properties.get(CLAUSE) or check.clause_for()),
            message=str(properties.get(MESSAGE) or message),
            blocked_by=blocked_by,
            blocker_message=blocker_message,
            observations=observations,
        )
    if report.skipped:
        status = properties.get(STATUS)
        return Outcome(
            check.id,
            "not-claimed" if status == "not-claimed" else "skipped",
            message=message,
            blocked_by=blocked_by,
            blocker_message=blocker_message or message,
            observations=observations,
        )
    if report.when != "call":
        return None
    return Outcome(check.id, "passed", observations=observations)
