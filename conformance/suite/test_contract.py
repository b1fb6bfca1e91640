"""The contract, as pytest tests: ``test_<family>[<CLAUSE>-<slug>]`` for every registered check.

Collected only when a ``--tokcap-*`` target is given. Each test runs one check through the
``tokcap_run`` fixture the plugin provides.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conformance.registry import Check, all_checks

_CHECKS = all_checks()


def _family(family: str) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(
        "tokcap_check",
        [pytest.param(found, id=found.id) for found in _CHECKS if found.family == family],
    )


Run = Callable[[Check], None]


@_family("SHAPE")
def test_shape(tokcap_check: Check, tokcap_run: Run) -> None:
    tokcap_run(tokcap_check)


@_family("BUILD")
def test_build(tokcap_check: Check, tokcap_run: Run) -> None:
    tokcap_run(tokcap_check)


@_family("SPAWN")
def test_spawn(tokcap_check: Check, tokcap_run: Run) -> None:
    tokcap_run(tokcap_check)


@_family("PUT")
def test_put(tokcap_check: Check, tokcap_run: Run) -> None:
    tokcap_run(tokcap_check)


@_family("FREEZE")
def test_freeze(tokcap_check: Check, tokcap_run: Run) -> None:
    tokcap_run(tokcap_check)


@_family("FENCE")
def test_fence(tokcap_check: Check, tokcap_run: Run) -> None:
    tokcap_run(tokcap_check)


@_family("DROP")
def test_drop(tokcap_check: Check, tokcap_run: Run) -> None:
    tokcap_run(tokcap_check)


@_family("MASK")
def test_mask(tokcap_check: Check, tokcap_run: Run) -> None:
    tokcap_run(tokcap_check)


@_family("CLOSE")
def test_close(tokcap_check: Check, tokcap_run: Run) -> None:
    tokcap_run(tokcap_check)


@_family("EXT")
def test_ext(tokcap_check: Check, tokcap_run: Run) -> None:
    tokcap_run(tokcap_check)
