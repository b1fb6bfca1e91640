"""The conformance kit: a pytest plugin that judges any TokenSink / TokenSource, clause by clause.

Run it with ``pytest -p tokcap_pytest --tokcap-sink=module:Class``. What this package promises
to keep stable is the names below and the public modules :mod:`conformance.catalog` (the
clauses), :mod:`conformance.strategies` (Hypothesis strategies for records),
:mod:`conformance.clauses` (``python -m conformance.clauses <ID>`` prints a clause),
:mod:`conformance.clauses_doc` and :mod:`conformance.revision` (the commands that keep the
clause doc and the contract revision in step). Modules and packages whose names start with
``_`` are internal.

The names are resolved on first use, so importing this package imports nothing else: a
pytest run that never asks for the kit pays nothing for it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conformance._registry import Check, all_checks, checks_by_id
    from conformance._runner import CheckBlocked, CheckSkipped, run_check
    from conformance._settings import KitSettings, SettingsError, resolve_settings
    from conformance._violation import ClauseViolation
    from conformance.catalog import CLAUSES, FAMILY_TITLES, KIT, Clause, clause

__all__ = [
    "CLAUSES",
    "FAMILY_TITLES",
    "KIT",
    "Check",
    "CheckBlocked",
    "CheckSkipped",
    "Clause",
    "ClauseViolation",
    "KitSettings",
    "SettingsError",
    "all_checks",
    "checks_by_id",
    "clause",
    "resolve_settings",
    "run_check",
]

_HOMES = {
    "CLAUSES": "conformance.catalog",
    "FAMILY_TITLES": "conformance.catalog",
    "KIT": "conformance.catalog",
    "Clause": "conformance.catalog",
    "clause": "conformance.catalog",
    "Check": "conformance._registry",
    "all_checks": "conformance._registry",
    "checks_by_id": "conformance._registry",
    "CheckBlocked": "conformance._runner",
    "CheckSkipped": "conformance._runner",
    "run_check": "conformance._runner",
    "KitSettings": "conformance._settings",
    "SettingsError": "conformance._settings",
    "resolve_settings": "conformance._settings",
    "ClauseViolation": "conformance._violation",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'conformance' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
