"""The kit's engine: one check to one outcome, and outcomes into the verdict. No pytest here.

:func:`evaluate` runs a check under the run's deadline and says what it came to, as an
:class:`Outcome`; it never raises for anything the target did. :func:`tally` adds an outcome
to a :class:`~conformance._report.Verdicts`. The pytest plugin and
:func:`conformance.run_conformance` both go through these two, so a verdict means the same
thing whichever of them ran the kit.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from conformance._deadline import Overrun, Refused, Watch, watched
from conformance._runner import CheckBlocked, CheckSkipped, run_check
from conformance._settings import KitSettings
from conformance._violation import ClauseViolation

if TYPE_CHECKING:
    from conformance._registry import Check
    from conformance._report import Verdicts

__all__ = [
    "STATUSES",
    "Outcome",
    "evaluate",
    "keep_hypothesis_out_of_the_project",
    "tally",
    "test_name",
]

Status = Literal["passed", "failed", "skipped", "not-claimed"]
STATUSES: tuple[Status, ...] = ("passed", "failed", "skipped", "not-claimed")

_HANG_HINT = (
    "a call that never returns stalls every caller: look for a lock never released, a wait "
    "without a timeout, or blocking I/O inside a coroutine; raise --tokcap-timeout only if "
    "the store is known to be this slow"
)


@dataclass(frozen=True)
class Outcome:
    """What one check came to.

    ``status`` is ``passed``, ``failed``, ``skipped`` or ``not-claimed`` (skipped because the
    target declared a capability under which the check does not apply). A failure names the
    ``clause`` it violates and its ``message``. A failure with ``blocked_by`` is a check a more
    basic clause kept from judging its own: ``clause`` is then that basic clause and ``message``
    its evidence. A skip's ``message`` is its reason; a skip with ``blocked_by`` is a check that
    needed an operation the kit stopped calling after it overran, and ``blocker_message`` is
    that overrun.
    """

    check: str
    status: Status
    clause: str = ""
    message: str = ""
    blocked_by: str = ""
    blocker_message: str = ""
    observations: Mapping[str, str] = field(default_factory=dict)
    violation: ClauseViolation | None = field(default=None, compare=False, repr=False)
    """The violation the check raised, for a runner that shows its traceback."""


def test_name(check: Check) -> str:
    """The name :func:`conformance.run_conformance` gives the check's test in its reports.

    It is the pytest node id without the folder: ``test_contract.py::test_put[PUT-1-...]``.
    """
    return f"test_contract.py::test_{check.group.lower()}[{check.id}]"


def evaluate(settings: KitSettings, check: Check) -> Outcome:
    """Run ``check`` against the target, every call under the run's deadline.

    A call that overran fails the clause being checked (for a check with no primary clause,
    the covered clause about the operation that overran); the check's thread is left to
    itself, and every later call it makes raises at once.
    """
    __tracebackhide__ = True
    watch = Watch(settings.timeout, check.clause_for(), check.clause_for)
    try:
        observations = watched(lambda: run_check(settings, check), watch)
    except CheckSkipped as skipped:
        status: Status = "not-claimed" if skipped.not_claimed else "skipped"
        return Outcome(check.id, status, message=skipped.reason)
    except CheckBlocked as blocked:
        evidence = str(blocked.violation)
        return Outcome(
            check.id,
            "failed",
            clause=blocked.blocked_by,
            message=evidence,
            blocked_by=blocked.blocked_by,
            blocker_message=evidence,
            violation=blocked.violation,
        )
    except ClauseViolation as violation:
        return Outcome(
            check.id, "failed", clause=violation.clause, message=str(violation), violation=violation
        )
    except Refused as refused:
        return Outcome(
            check.id,
            "skipped",
            message=f"blocked by {refused.clause}: {refused}",
            blocked_by=refused.clause,
            blocker_message=refused.first,
        )
    except Overrun as overrun:
        clause = check.clause_for(overrun.what)
        hang = ClauseViolation(
            clause,
            expected=f"{overrun.what} to return within {overrun.seconds:g} s (--tokcap-timeout)",
            observed=f"{overrun}; the call was abandoned",
            hint=_HANG_HINT,
        )
        return Outcome(check.id, "failed", clause=clause, message=str(hang))
    return Outcome(check.id, "passed", observations=observations)


def tally(verdicts: Verdicts, check: Check, name: str, outcome: Outcome) -> None:
    """Add ``outcome`` of ``check``, whose test is ``name``, to every clause it answers for.

    The clauses a check answers for are its primary clause, or every clause a check with none
    covers. A failure fails the clause it names, and leaves the check's own clauses blocked
    when that was another one. A check proving many clauses that stops on one of them leaves
    the others unproven, which must not outweigh a check of those clauses that passed: its
    blocks are soft.
    """
    answering = check.judges if check.clause is None else (check.clause,)
    soft = bool(check.covers)
    verdicts.observations.update(outcome.observations)
    if verdicts.tests.get(name, ("",))[0] != "failed":  # a test's worst phase stands
        verdicts.tests[name] = (outcome.status, outcome.message)
    if outcome.status == "failed":
        violated = outcome.clause or check.clause_for()
        verdicts.record(violated, name, "failed", outcome.message)
        blocked = f"blocked by {violated}: {outcome.message}"
        if outcome.blocked_by:
            for clause in answering:
                if clause != violated:
                    verdicts.record(clause, name, "blocked", blocked, violated, soft=soft)
        elif check.clause is not None and violated != check.clause:
            verdicts.record(check.clause, name, "blocked", blocked, violated, soft=soft)
    elif outcome.status == "skipped" and outcome.blocked_by:
        evidence = outcome.blocker_message or outcome.message
        verdicts.record(outcome.blocked_by, name, "failed", evidence)
        for clause in answering:
            verdicts.record(clause, name, "blocked", outcome.message, outcome.blocked_by, soft=soft)
    elif outcome.status in ("skipped", "not-claimed"):
        for clause in answering:
            verdicts.record(clause, name, outcome.status, outcome.message)
    else:
        for proven in check.judges:
            verdicts.record(proven, name, "passed")


def keep_hypothesis_out_of_the_project() -> None:
    """Hypothesis writes into ``.hypothesis/`` of the working directory unless told otherwise.

    The kit's checks use no example database; what Hypothesis still keeps there are caches
    (constants of the modules it reads, unicode tables) that take seconds to rebuild, so they
    go to the user's cache directory rather than into a fresh scratch folder every run.
    """
    if "HYPOTHESIS_STORAGE_DIRECTORY" in os.environ:
        return
    from hypothesis.configuration import set_hypothesis_home_dir

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    set_hypothesis_home_dir(str(cache / "tokcap" / "hypothesis"))
