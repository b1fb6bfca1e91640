"""The contract, as pytest tests: one test function per group of registered checks.

A check of a primary clause runs as ``test_<family>[<CLAUSE>-<slug>]`` (``test_put[PUT-1-...]``),
one with no primary clause as ``test_model[<slug>]``. The functions are made from the registry,
one for each group that has checks, in catalog order. Collected only when a ``--tokcap-*``
target is given. Each test runs one check through the ``tokcap_run`` fixture the plugin
provides.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conformance._registry import FAMILIES, GROUPS, Check, all_checks
from conformance.catalog import CAPTURE, contract_of

Run = Callable[[Check], None]
Test = Callable[[Check, Run], None]

_CHECKS = all_checks()


def _test_function(group: str, members: list[Check]) -> Test:
    """Return the test function ``test_<group>``, parametrized with ``members`` by id."""

    @pytest.mark.parametrize(
        "tokcap_check", [pytest.param(found, id=found.id) for found in members]
    )
    def test(tokcap_check: Check, tokcap_run: Run) -> None:
        tokcap_run(tokcap_check)

    test.__name__ = test.__qualname__ = f"test_{group.lower()}"
    # The plugin collects only the functions of the contract the run judges.
    test.tokcap_contract = CAPTURE if group not in FAMILIES else contract_of(group)  # type: ignore[attr-defined]
    test.__doc__ = f"Every registered check of the {group} group passes against the target."
    return test


for _group in GROUPS:
    _members = [found for found in _CHECKS if found.group == _group]
    if _members:
        globals()[f"test_{_group.lower()}"] = _test_function(_group, _members)
