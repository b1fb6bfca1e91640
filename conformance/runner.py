"""Running one check: build its context, attribute every failure to a clause, always clean up."""

from __future__ import annotations

import warnings

from conformance.context import Kit, unexpected_error
from conformance.registry import Check
from conformance.settings import KitSettings
from conformance.violation import ClauseViolation, ExtensionMissing, NotClaimed

__all__ = ["CheckSkipped", "run_check"]


class CheckSkipped(Exception):
    """The check does not apply; ``reason`` starts with ``not claimed:`` or ``extension``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def run_check(settings: KitSettings, check: Check) -> dict[str, str]:
    """Run ``check`` against the target; return what it observed about the target.

    Raises :class:`ClauseViolation` (always naming a clause) when the target breaks the
    contract, and :class:`CheckSkipped` when the check does not apply.
    """
    __tracebackhide__ = True
    kit = Kit(settings, check.id)
    try:
        check.function(kit)
    except ClauseViolation:
        raise
    except NotClaimed as exc:
        raise CheckSkipped(f"not claimed: {exc}") from None
    except ExtensionMissing as exc:
        raise CheckSkipped(str(exc)) from None
    except Exception as exc:
        raise unexpected_error(check.clause, f"check {check.id}", exc, kit) from None
    finally:
        for error in kit.close():
            warnings.warn(f"tokcap: {check.id}: {error}", stacklevel=1)
    return kit.observations
