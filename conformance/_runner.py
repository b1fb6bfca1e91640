"""Running one check: build its context, attribute every failure to a clause, always clean up."""

from __future__ import annotations

import warnings

from conformance import _steps as step
from conformance._basics import first_broken
from conformance._kit import Kit, unexpected_error
from conformance._reading import Unreadable
from conformance._registry import Check
from conformance._settings import KitSettings
from conformance._violation import BlockedBy, ClauseViolation, ExtensionMissing, NotClaimed

__all__ = ["CheckBlocked", "CheckSkipped", "run_check"]


class CheckSkipped(Exception):
    """The check does not apply; ``reason`` starts with ``not claimed:`` or ``extension``.

    ``not_claimed`` says whether the target declared a capability under which it does not.
    """

    def __init__(self, reason: str, *, not_claimed: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.not_claimed = not_claimed


class CheckBlocked(Exception):
    """A more basic clause broke, so the check could not judge its own clause.

    ``clause`` is the clause the check judges (None for a check with no primary clause),
    ``blocked_by`` the clause that broke first and ``violation`` the evidence against
    ``blocked_by`` (itself a failure of that clause). Blocked never counts as passed.
    """

    def __init__(self, clause: str | None, violation: ClauseViolation) -> None:
        self.clause = clause
        self.blocked_by = violation.clause
        self.violation = violation
        self.reason = (
            f"blocked by {violation.clause}: expected {violation.expected}; "
            f"observed {violation.observed}"
        )
        super().__init__(self.reason)


def run_check(settings: KitSettings, check: Check) -> dict[str, str]:
    """Run ``check`` against the target; return what it observed about the target.

    Raises :class:`ClauseViolation` (always naming a clause the check judges) when the target
    breaks the contract, :class:`CheckBlocked` when a more basic clause broke first, and
    :class:`CheckSkipped` when the check does not apply.
    """
    __tracebackhide__ = True
    kit = Kit(settings, check.id, check.clause)
    violation: ClauseViolation | None = None
    try:
        check.function(kit)
    except NotClaimed as exc:
        raise CheckSkipped(f"not claimed: {exc}", not_claimed=True) from None
    except ExtensionMissing as exc:
        raise CheckSkipped(str(exc)) from None
    except BlockedBy as exc:
        raise CheckBlocked(check.clause, exc.violation) from None
    except ClauseViolation as exc:
        violation = exc
    except Unreadable as problem:
        violation = step.unreadable(problem, kit)
    except Exception as exc:
        violation = unexpected_error(check.clause_for(), f"check {check.id}", exc, kit)
    finally:
        for error in kit.close():
            warnings.warn(f"tokcap: {check.id}: {error}", stacklevel=1)
    if violation is not None:
        # Judged once the check's endpoints are closed, so that they hinder no basic.
        raise _judged(settings, check, violation)
    return kit.observations


def _judged(settings: KitSettings, check: Check, violation: ClauseViolation) -> Exception:
    """Return what a check's violation means: its failure, or blocked by a more basic clause.

    A violation of any clause the check judges is its own failure. Which basics count is
    decided by the check's primary clause or, for a check with none, by the violated clause.
    """
    basic = first_broken(settings, check.clause or violation.clause)
    if basic is not None and basic.clause != violation.clause:
        return CheckBlocked(check.clause, basic)
    if violation.clause not in check.judges:
        return CheckBlocked(check.clause, violation)
    return violation
