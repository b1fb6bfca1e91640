"""The catalogue of checks: each one a function bound to one contract clause.

Checks are plain functions taking a :class:`conformance.context.Kit`. They do not depend on
pytest; the plugin only drives them. A check is registered with :func:`check` in a module
under ``conformance.checks``; its id, ``<CLAUSE>-<slug>``, is the parameter id a user sees
in the node id (``test_drop[DROP-2-stale-version]``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conformance.context import Kit

__all__ = [
    "CHECK_MODULES",
    "FAMILIES",
    "Check",
    "all_checks",
    "check",
    "checks_by_id",
    "family_of",
]

FAMILIES = ("SHAPE", "BUILD", "SPAWN", "PUT", "FREEZE", "FENCE", "DROP", "MASK", "CLOSE", "EXT")
"""Clause families in the order the catalog lists them; one pytest test function each."""

CHECK_MODULES = (
    "conformance.checks.shape",
    "conformance.checks.build",
    "conformance.checks.spawn",
    "conformance.checks.put",
    "conformance.checks.freeze",
    "conformance.checks.fence",
    "conformance.checks.drop",
    "conformance.checks.mask",
    "conformance.checks.close",
    "conformance.checks.extensions",
    "conformance.checks.concurrency",
    "conformance.checks.model_based",
)

CheckFunction = Callable[["Kit"], None]


@dataclass(frozen=True)
class Check:
    """One check of one clause.

    ``covers`` lists further clauses a passing run of this check also proves (a model-based
    check exercises many); a failure is always reported under the clause it violated.
    """

    clause: str
    slug: str
    function: CheckFunction
    covers: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """The parameter id: ``<CLAUSE>-<slug>``."""
        return f"{self.clause}-{self.slug}"

    @property
    def family(self) -> str:
        """The clause family, ``PUT`` for ``PUT-3``."""
        return family_of(self.clause)

    @property
    def summary(self) -> str:
        """The first line of the check's docstring."""
        doc = self.function.__doc__ or ""
        return doc.strip().splitlines()[0] if doc.strip() else self.id


_checks: dict[str, Check] = {}


def family_of(clause: str) -> str:
    """Return the family of a clause id: the part before the first ``-``."""
    return clause.split("-", 1)[0]


def check(
    clause: str, slug: str, *, covers: tuple[str, ...] = ()
) -> Callable[[CheckFunction], CheckFunction]:
    """Register the decorated function as the check ``<clause>-<slug>``."""

    def register(function: CheckFunction) -> CheckFunction:
        found = Check(clause, slug, function, covers)
        if found.id in _checks:
            raise ValueError(f"check id {found.id} is registered twice")
        if found.family not in FAMILIES:
            raise ValueError(f"check {found.id} names unknown family {found.family}")
        _checks[found.id] = found
        return function

    return register


def all_checks() -> list[Check]:
    """Import every check module and return all checks, by family then clause order."""
    for module in CHECK_MODULES:
        importlib.import_module(module)
    return sorted(_checks.values(), key=_order)


def checks_by_id() -> dict[str, Check]:
    """Return every registered check keyed by its id."""
    return {found.id: found for found in all_checks()}


def _order(found: Check) -> tuple[int, str, int, str]:
    family, _, rest = found.clause.partition("-")
    number = rest.rsplit("-", 1)[-1]
    return (
        FAMILIES.index(family),
        rest.rsplit("-", 1)[0] if "-" in rest else "",
        int(number) if number.isdigit() else 0,
        found.slug,
    )
