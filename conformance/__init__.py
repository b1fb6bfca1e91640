"""The conformance kit: judges any TokenSink / TokenSource, clause by clause.

Run it with ``pytest -p tokcap_pytest --tokcap-sink=module:Class``, or from Python with
:func:`run_conformance` (``await run_conformance_async(...)`` in a coroutine), which returns
the report the plugin writes as JSON. What this package promises
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
    from conformance._engine import Outcome, evaluate
    from conformance._library import TargetError, run_conformance, run_conformance_async
    from conformance._registry import Check, all_checks, checks_by_id
    from conformance._report import Verdicts
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
    "Outcome",
    "SettingsError",
    "TargetError",
    "Verdicts",
    "all_checks",
    "checks_by_id",
    "clause",
    "evaluate",
    "resolve_settings",
    "run_check",
    "run_conformance",
    "run_conformance_async",
]

_EXPORTED_FROM = {
    "conformance.catalog": ("CLAUSES", "FAMILY_TITLES", "KIT", "Clause", "clause"),
    "conformance._engine": ("Outcome", "evaluate"),
    "conformance._library": ("TargetError", "run_conformance", "run_conformance_async"),
    "conformance._registry": ("Check", "all_checks", "checks_by_id"),
    "conformance._report": ("Verdicts",),
    "conformance._runner": ("CheckBlocked", "CheckSkipped", "run_check"),
    "conformance._settings": ("KitSettings", "SettingsError", "resolve_settings"),
    "conformance._violation": ("ClauseViolation",),
}
"""Each module the exported names live in, with its names."""


def __getattr__(name: str) -> Any:
    for module, names in _EXPORTED_FROM.items():
        if name in names:
            value = getattr(importlib.import_module(module), name)
            globals()[name] = value
            return value
    raise AttributeError(f"module 'conformance' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
