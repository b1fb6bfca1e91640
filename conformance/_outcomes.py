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

from typing import TYPE_CHECKING, NoReturn

import pytest

from conformance._deadline import Overrun, Refused, Watch, watched
from conformance._runner import CheckBlocked, CheckSkipped, run_check
from conformance._settings import KitSettings
from conformance._violation import ClauseViolation

if TYPE_CHECKING:
    from conformance._registry import Check

__all__ = ["BLOCKED_BY", "BLOCKER_MESSAGE", "CLAUSE", "COVERS", "MESSAGE", "judge"]

MESSAGE = "tokcap_message"
CLAUSE = "tokcap_clause"
COVERS = "tokcap_covers"
BLOCKED_BY = "tokcap_blocked_by"
BLOCKER_MESSAGE = "tokcap_blocker_message"

_HANG_HINT = (
    "a call that never returns stalls every caller: look for a lock never released, a wait "
    "without a timeout, or blocking I/O inside a coroutine; raise --tokcap-timeout only if "
    "the store is known to be this slow"
)


def judge(settings: KitSettings, check: Check, properties: list[tuple[str, object]]) -> None:
    """Run ``check`` and turn its result into a pass, a failure or a skip of the test."""
    __tracebackhide__ = True
    watch = Watch(settings.timeout, check.clause_for(), check.clause_for)
    overran: Overrun | None = None
    blocked: CheckBlocked | None = None
    if check.covers:
        properties.append((COVERS, " ".join(check.covers)))
    try:
        observations = watched(lambda: run_check(settings, check), watch)
    except CheckSkipped as exc:
        pytest.skip(exc.reason)
    except CheckBlocked as exc:
        blocked = exc
    except ClauseViolation as exc:
        properties += [(MESSAGE, str(exc)), (CLAUSE, exc.clause)]
        raise
    except Refused as refused:
        reason = f"blocked by {refused.clause}: {refused}"
        _blocked(properties, refused.clause, refused.first, reason)
    except Overrun as exc:
        overran = exc
    if blocked is not None:
        evidence = str(blocked.violation)
        properties += [
            (BLOCKED_BY, blocked.blocked_by),
            (BLOCKER_MESSAGE, evidence),
            (MESSAGE, evidence),
            (CLAUSE, blocked.blocked_by),
        ]
        pytest.fail(f"blocked by {blocked.blocked_by}:\n{evidence}", pytrace=False)
    if overran is not None:
        # A check with no primary clause fails the clause it covers of the overrun operation.
        clause = check.clause_for(overran.what)
        violation = ClauseViolation(
            clause,
            expected=f"{overran.what} to return within {overran.seconds:g} s (--tokcap-timeout)",
            observed=f"{overran}; the call was abandoned",
            hint=_HANG_HINT,
        )
        properties += [(MESSAGE, str(violation)), (CLAUSE, clause)]
        pytest.fail(str(violation), pytrace=False)
    for key, value in observations.items():
        properties.append((f"tokcap_{key}", value))


def _blocked(
    properties: list[tuple[str, object]], blocked_by: str, evidence: str, reason: str
) -> NoReturn:
    __tracebackhide__ = True
    properties += [(BLOCKED_BY, blocked_by), (BLOCKER_MESSAGE, evidence)]
    pytest.skip(reason)
