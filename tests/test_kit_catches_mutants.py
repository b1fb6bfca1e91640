"""The kit finds the bugs it claims to find, and only those: each mutant fails exactly its clauses.

Each run is the whole kit as a framework author runs it (``pytest --tokcap-sink=...`` in a
fresh interpreter and directory), not narrowed to where the bug is; the verdict is read from
the JSON report. A mutant must fail exactly the clauses it declares, so a framework author
reading a report is pointed at the one thing to fix; clauses a more basic failure kept from
being judged are reported blocked and count neither way. The correct stores, ours and one
written against the contract alone, pass with nothing failed and nothing blocked.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

MUTANTS = Path(__file__).parent / "mutants"
if str(MUTANTS) not in sys.path:
    sys.path.insert(0, str(MUTANTS))

from zoo import CORRECT, JudgedStore, KitRun, Mutant, mutants, run_kit  # noqa: E402

from conformance._registry import all_checks  # noqa: E402
from conformance.catalog import CLAUSES, KIT  # noqa: E402

pytestmark = pytest.mark.slow

ZOO = mutants()
CHECKED = {found.clause for found in all_checks() if found.clause is not None}


def _messages(run: KitRun) -> str:
    shown = [
        f"{c}: {e['message'][:600]}" for c, e in run.clauses.items() if e["outcome"] != "passed"
    ]
    return "\n".join(shown) or run.problem or run.output[-2000:]


class TestZoo:
    def test_every_checked_clause_has_a_mutant(self) -> None:
        """Every clause the kit has a check for is the one a mutant in the zoo breaks."""
        assert sorted(CHECKED - {mutant.clause for mutant in ZOO}) == []

    def test_every_kit_clause_is_declared_by_a_mutant(self) -> None:
        """Every catalog clause checked by the kit is some mutant's ``breaks`` or ``also``."""
        declared = {clause for mutant in ZOO for clause in mutant.expected}
        missing = [
            f"{clause.id} is checked by the kit but no mutant declares it; add a BaseStore "
            f"subclass with breaks = {clause.id!r} to tests/mutants/zoo_{clause.family.lower()}.py"
            for clause in CLAUSES
            if clause.checked_by == KIT and clause.id not in declared
        ]
        assert missing == [], "\n".join(missing)

    def test_every_mutant_declares_checked_clauses(self) -> None:
        """Every mutant declares only clauses the kit checks, none twice, and says how it breaks."""
        strays = [
            mutant.name
            for mutant in ZOO
            if not set(mutant.expected) <= CHECKED
            or len(set(mutant.expected)) != len(mutant.expected)
            or not mutant.story
        ]
        assert strays == []

    def test_declared_sets_are_precise(self) -> None:
        """At least 80% of mutants declare one clause, and none more than three."""
        single = sum(len(mutant.expected) == 1 for mutant in ZOO)
        assert single >= 0.8 * len(ZOO)
        assert max(len(mutant.expected) for mutant in ZOO) <= 3


class TestKitCatchesMutants:
    @pytest.mark.parametrize("mutant", [pytest.param(m, id=m.name) for m in ZOO])
    def test_fails_exactly_the_declared_clauses(self, mutant: Mutant) -> None:
        """The kit run fails, and the failed clauses are exactly those the mutant declares."""
        run = run_kit(mutant)
        assert run.exit_code == 1, _messages(run)
        assert sorted(run.failed) == sorted(mutant.expected), _messages(run)
        assert run.unreported_failures() == []
        message = run.clauses[mutant.clause]["message"]
        assert f"[{mutant.clause}]" in message
        if mutant.anomaly:
            assert mutant.anomaly in message
        for picture in re.findall(r"timeline: (\S+)", message):
            assert Path(picture).name in run.timelines


class TestKitPassesCorrectStores:
    @pytest.mark.parametrize("store", [pytest.param(t, id=t.name) for t in CORRECT])
    def test_passes_every_clause(self, store: JudgedStore) -> None:
        """The kit run passes a correct store with no failed and no blocked clause."""
        run = run_kit(store)
        assert (run.failed, run.blocked) == ((), ()), _messages(run)
        assert run.exit_code == 0
        assert run.junit_failures == ()
