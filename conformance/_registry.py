"""The catalogue of checks: each one a function that judges contract clauses.

Checks are plain functions taking a :class:`conformance._kit.Kit`. They do not depend on
pytest; the plugin only drives them. A check is registered with :func:`check` in a module
under ``conformance._checks`` (every module there whose name does not start with ``_``).

Most checks judge one primary clause; their id, ``<CLAUSE>-<slug>``, is the parameter id a
user sees in the node id (``test_drop[DROP-2-stale-version]``), under the test function of the
clause's family. A check with no primary clause judges every clause it ``covers`` alike; its id
is its slug and it runs under the test function of :data:`MODEL_GROUP`
(``test_model[model-based]``).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from conformance.catalog import CAPTURE, KIT_FAMILIES, contract_of, family_of, position

if TYPE_CHECKING:
    from conformance._kit import Kit

__all__ = [
    "FAMILIES",
    "GROUPS",
    "MODEL_GROUP",
    "Basic",
    "Check",
    "all_checks",
    "basic",
    "basics_by_name",
    "check",
    "check_modules",
    "checks_by_id",
    "family_of",
]

FAMILIES = KIT_FAMILIES
"""The catalog's families that have kit clauses, in catalog order; one pytest test function
each."""

MODEL_GROUP = "MODEL"
"""The group of the checks with no primary clause; their test function is ``test_model``."""

GROUPS = (*FAMILIES, MODEL_GROUP)
"""Every group a check can fall in, in the order the suite's test functions come."""

_CHECKS_PACKAGE = "conformance._checks"
_CLAUSE_ID = re.compile(r"^(?:EXT-[A-Z]+|[A-Z]+)-\d+")

_OPERATION_CLAUSES = {
    "put": "PUT-",
    "freeze": "FREEZE-",
    "drop": "DROP-",
    "mark_incomplete": "MASK-",
    "begin_call": "EXT-BEGIN-",
    "retire": "EXT-RETIRE-",
    "delete": "EXT-RETIRE-",
    "close": "CLOSE-",
    "resolve": "LINEAGE-",
}
"""The clause-id prefix of the clauses about each protocol operation."""

CheckFunction = Callable[["Kit"], None]


@dataclass(frozen=True)
class Check:
    """One check, of one primary clause or (``clause`` None) of every clause it covers.

    ``covers`` lists further clauses the check judges: a passing run proves each of them, and
    a failure is always reported under the clause it violated. A check with no primary clause
    covers at least one clause.
    """

    clause: str | None
    slug: str
    function: CheckFunction
    covers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.clause is None:
            if not self.covers:
                raise ValueError(f"check {self.slug} has no primary clause and covers none")
            if _CLAUSE_ID.match(self.slug):
                raise ValueError(
                    f"check {self.slug} has no primary clause, so its slug must not start "
                    "with a clause id"
                )

    @property
    def id(self) -> str:
        """The parameter id: ``<CLAUSE>-<slug>``, or the slug alone without a primary clause."""
        return self.slug if self.clause is None else f"{self.clause}-{self.slug}"

    @property
    def family(self) -> str | None:
        """The family of the primary clause, ``PUT`` for ``PUT-3``; None without one."""
        return None if self.clause is None else family_of(self.clause)

    @property
    def contract(self) -> str:
        """The contract the check judges: its family's, or the capture contract's for the
        checks of :data:`MODEL_GROUP`."""
        return CAPTURE if self.family is None else contract_of(self.family)

    @property
    def group(self) -> str:
        """The suite's test function the check runs under: its family, else :data:`MODEL_GROUP`."""
        return self.family or MODEL_GROUP

    @property
    def judges(self) -> tuple[str, ...]:
        """Every clause the check judges: the primary clause, if any, then those it covers."""
        return self.covers if self.clause is None else (self.clause, *self.covers)

    def clause_for(self, operation: str = "") -> str:
        """Return the clause a failure that names no clause of its own fails, such as a call to
        ``operation`` (``put``, or a label like ``\\`put\\```) outliving the deadline.

        That is the primary clause. Without one it is the first covered clause about the
        operation (``drop`` fails the first DROP clause covered), and for an operation the
        check covers no clause of, or an unknown one, the first covered clause in catalog
        order: the check blames the earliest promise it judges rather than one it does not.
        """
        if self.clause is not None:
            return self.clause
        ordered = sorted(self.covers, key=position)
        prefix = _OPERATION_CLAUSES.get(operation.strip("`"))
        if prefix is not None:
            about = [found for found in ordered if found.startswith(prefix)]
            if about:
                return about[0]
        return ordered[0]

    @property
    def summary(self) -> str:
        """The first line of the check's docstring."""
        doc = self.function.__doc__ or ""
        return doc.strip().splitlines()[0] if doc.strip() else self.id


_checks: dict[str, Check] = {}


def check(
    clause: str | None, slug: str, *, covers: tuple[str, ...] = ()
) -> Callable[[CheckFunction], CheckFunction]:
    """Register the decorated function as the check ``<clause>-<slug>``.

    With ``clause`` None the check has no primary clause: it judges the clauses it ``covers``
    alike and its id is ``slug``.
    """

    def register(function: CheckFunction) -> CheckFunction:
        found = Check(clause, slug, function, covers)
        if found.id in _checks:
            raise ValueError(f"check id {found.id} is registered twice")
        for judged in found.judges:
            if family_of(judged) not in FAMILIES:
                raise ValueError(f"check {found.id} names unknown family {family_of(judged)}")
        _checks[found.id] = found
        return function

    return register


@dataclass(frozen=True)
class Basic:
    """The plainest use of some operations, tried when a check fails (:mod:`conformance._basics`).

    ``clause`` is the clause it judges throughout, or None when each step names its own.
    """

    clause: str | None
    name: str
    function: CheckFunction


_basics: dict[str, Basic] = {}


def basic(clause: str | None, name: str) -> Callable[[CheckFunction], CheckFunction]:
    """Register the decorated function as the basic ``name``, beside its family's checks."""

    def register(function: CheckFunction) -> CheckFunction:
        if name in _basics:
            raise ValueError(f"basic {name} is registered twice")
        _basics[name] = Basic(clause, name, function)
        return function

    return register


def basics_by_name() -> dict[str, Basic]:
    """Import every check module and return every registered basic keyed by its name."""
    all_checks()
    return dict(_basics)


def check_modules() -> list[str]:
    """Name every module of ``conformance._checks`` whose name does not start with ``_``."""
    package = importlib.import_module(_CHECKS_PACKAGE)
    return sorted(
        f"{_CHECKS_PACKAGE}.{module.name}"
        for module in pkgutil.iter_modules(package.__path__)
        if not module.name.startswith("_")
    )


def all_checks() -> list[Check]:
    """Import every check module and return all checks, in catalog order of their primary
    clauses, then those with none; by slug within one clause."""
    for module in check_modules():
        importlib.import_module(module)
    return sorted(_checks.values(), key=_order)


def runs_early(found: Check, *, budgeted: bool) -> bool:
    """Whether a run makes ``found`` before the catalog's order would: under a budget, the
    COST checks go first, so a store slow enough to exhaust a CI job's time, the store COST
    most likely fails, still reports its cost verdict before the job is cut short."""
    return budgeted and found.family == "COST"


def checks_by_id() -> dict[str, Check]:
    """Return every registered check keyed by its id."""
    return {found.id: found for found in all_checks()}


def _order(found: Check) -> tuple[int, int, str]:
    if found.clause is None:
        return (len(GROUPS), 0, found.slug)
    return (GROUPS.index(found.group), position(found.clause), found.slug)
