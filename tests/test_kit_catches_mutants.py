"""The kit finds the bugs it claims to find: every mutant in the zoo fails the clause it breaks.

Each run is the whole kit as a framework author runs it (``pytest --tokcap-sink=...`` in a
fresh interpreter and directory), not narrowed to where the bug is; the verdict is read from
the JSON report. The correct stores run through the same kit and must pass every clause.
Counterexamples are not shrunk (``-p zoo_fast``): a verdict needs the bug found, not minimized.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

MUTANTS = Path(__file__).parent / "mutants"
if str(MUTANTS) not in sys.path:
    sys.path.insert(0, str(MUTANTS))

from zoo import CORRECT, Mutant, Target, mutants  # noqa: E402

from conformance.registry import all_checks  # noqa: E402

pytestmark = pytest.mark.slow

RUN_TIMEOUT = 600.0
ZOO = mutants()


def run_kit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, target: Target
) -> tuple[int, dict[str, Any]]:
    """Run the whole kit against ``target``; return the exit code and the report's clauses."""
    path = os.pathsep.join(filter(None, [str(MUTANTS), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("TMPDIR", str(pytester.mkdir("scratch")))
    report = pytester.path / "report.json"
    result = pytester.runpytest_subprocess(*target.arguments(str(report)), timeout=RUN_TIMEOUT)
    assert report.exists(), f"the kit wrote no report:\n{result.stdout.str()[-3000:]}"
    clauses: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))["clauses"]
    return int(result.ret), clauses


def failed(clauses: dict[str, Any]) -> dict[str, str]:
    return {c: e["message"] for c, e in clauses.items() if e["outcome"] == "failed"}


def _case(mutant: Mutant) -> Any:
    marks = []
    if mutant.kit_gap:
        marks.append(pytest.mark.xfail(strict=True, reason=f"kit gap: {mutant.kit_gap}"))
    return pytest.param(mutant, id=mutant.name, marks=marks)


class TestZoo:
    def test_every_checked_clause_has_a_mutant(self) -> None:
        """Every clause the kit has a check for is broken by at least one mutant in the zoo."""
        checked = {found.clause for found in all_checks()}
        broken = {mutant.clause for mutant in ZOO}
        assert sorted(checked - broken) == []

    def test_every_mutant_breaks_a_checked_clause(self) -> None:
        """Every mutant names a clause the kit has a check for, and says how it breaks it."""
        checked = {found.clause for found in all_checks()}
        strays = [m.name for m in ZOO if m.clause not in checked or not m.story]
        assert strays == []


class TestKitCatchesMutants:
    @pytest.mark.parametrize("mutant", [_case(mutant) for mutant in ZOO])
    def test_fails_the_broken_clause(
        self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, mutant: Mutant
    ) -> None:
        """The kit run fails and reports the clause the mutant breaks among its failures."""
        exit_code, clauses = run_kit(pytester, monkeypatch, mutant)
        assert exit_code == 1
        assert mutant.clause in failed(clauses), (
            f"{mutant.name} breaks {mutant.clause}, but the kit failed only "
            f"{sorted(failed(clauses))}"
        )


class TestKitPassesCorrectStores:
    @pytest.mark.parametrize("store", [pytest.param(t, id=t.name) for t in CORRECT])
    def test_passes_every_clause(
        self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, store: Target
    ) -> None:
        """The kit run passes a correct store with no failed clause."""
        exit_code, clauses = run_kit(pytester, monkeypatch, store)
        assert failed(clauses) == {}
        assert exit_code == 0
