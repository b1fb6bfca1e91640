"""The cost budget a run may hold the target to: ``--tokcap-budget=loop-hold=5ms,put-p99=20ms``.

A budget is a comma-separated list of ``key=value`` limits, each value a number with its unit
(``us``, ``ms`` or ``s``); ``default`` stands for :data:`DEFAULT_BUDGET`, and a limit after it
replaces the default's. The keys:

- ``loop-hold``: the p99, over the calls of the COST workload, of the longest time one call
  held the event loop (COST-1); ``loop-hold-max``: the longest of all.
- ``OPERATION-p50``, ``OPERATION-p99``, ``OPERATION-max``: the latency of ``put``,
  ``mark_incomplete``, ``freeze`` or ``drop`` over the same workload (COST-2).
- ``freeze-mib``: what a freeze of a large rollout costs per MiB of its token payload (COST-3).

Without a budget, or without a limit for a clause, that COST clause is not claimed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "BUDGET_OPERATIONS",
    "DEFAULT_BUDGET",
    "FREEZE_KEY",
    "HOLD_KEYS",
    "LATENCY_KEYS",
    "BudgetError",
    "parse_budget",
    "shown",
]

BUDGET_OPERATIONS = ("put", "mark_incomplete", "freeze", "drop")
"""The operations a latency limit may name."""
HOLD_KEYS = ("loop-hold", "loop-hold-max")
LATENCY_KEYS = tuple(
    f"{operation}-{statistic}"
    for operation in BUDGET_OPERATIONS
    for statistic in ("p50", "p99", "max")
)
FREEZE_KEY = "freeze-mib"
_KEYS = (*HOLD_KEYS, *LATENCY_KEYS, FREEZE_KEY)

DEFAULT_BUDGET: Mapping[str, float] = MappingProxyType(
    {
        "loop-hold": 0.100,
        "put-p99": 0.500,
        "mark_incomplete-p99": 0.500,
        "freeze-p99": 1.0,
        "drop-p99": 0.500,
        "freeze-mib": 0.100,
    }
)
"""What ``default`` stands for (seconds): limits no store that keeps blocking work off the
loop comes near on a loaded two-core CI runner, while a store that blocks the loop for a
remote call, or makes every call wait for one, exceeds them. A store tuned for a serving
loop sets its own, tighter limits."""

_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
_VALUE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|ms|s)\s*$")


class BudgetError(ValueError):
    """A budget that cannot be read; the message says which part and how to write it."""


def parse_budget(text: str) -> dict[str, float]:
    """The limits ``text`` names, in seconds by key; raises :class:`BudgetError`."""
    limits: dict[str, float] = {}
    parts = [part.strip() for part in text.split(",")]
    if not any(parts):
        raise BudgetError("the budget is empty: name a limit such as loop-hold=5ms, or default")
    for part in parts:
        if not part:
            raise BudgetError(f"{text!r} has an empty part: separate limits with one comma")
        if part == "default":
            limits.update(DEFAULT_BUDGET)
            continue
        key, equals, value = part.partition("=")
        key = key.strip()
        if not equals:
            raise BudgetError(f"{part!r} is not key=value: write it as {key or 'put-p99'}=20ms")
        if key not in _KEYS:
            raise BudgetError(f"{key!r} is not a budget key; the keys are {', '.join(_KEYS)}")
        match = _VALUE.match(value)
        if match is None:
            raise BudgetError(
                f"{key}={value.strip()!r} is not a duration: write a number and its unit, "
                "us, ms or s (5ms, 0.5s)"
            )
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
        if not math.isfinite(seconds) or seconds <= 0:
            raise BudgetError(f"{key}={value.strip()!r} must be a positive duration")
        limits[key] = seconds
    return limits


def shown(limits: Mapping[str, float]) -> str:
    """The budget as it would be written, in milliseconds: ``loop-hold=50ms,put-p99=250ms``."""
    return ",".join(f"{key}={seconds * 1e3:g}ms" for key, seconds in limits.items())
