"""The registry: checks found by discovery, ids and groups, checks with no primary clause, and a
collected kit suite that is exactly the registered checks."""

from __future__ import annotations

import asyncio
import pkgutil
from collections.abc import Iterator

import pytest

import conformance._checks
from conformance import _runner as runner
from conformance._deadline import breaker
from conformance._kit import Kit
from conformance._pytest_wing import outcomes
from conformance._pytest_wing.verdict import VerdictHooks
from conformance._registry import (
    FAMILIES,
    GROUPS,
    MODEL_GROUP,
    Check,
    all_checks,
    check,
    check_modules,
    checks_by_id,
)
from conformance._report import Verdicts
from conformance._runner import CheckBlocked
from conformance._settings import KitSettings
from conformance._violation import ClauseViolation
from conformance.catalog import FAMILY_TITLES

MEMORY = "--tokcap-sink=reference.memory_store:MemoryTokenStore"
LOCAL = "--tokcap-capability=process-local"
SUITE = "conformance/_pytest_wing/suite/test_contract.py"


def nothing(kit: Kit) -> None:
    """Does nothing."""


def violation(clause: str) -> ClauseViolation:
    return ClauseViolation(clause, expected="e", observed="o", hint="h")


MANY = Check(None, "many", nothing, covers=("PUT-3", "FREEZE-2", "FREEZE-3", "DROP-1"))


class TestDiscovery:
    def test_every_public_check_module_is_imported(self) -> None:
        """The registry reads every module of conformance._checks not starting with '_'."""
        names = [m.name for m in pkgutil.iter_modules(conformance._checks.__path__)]
        expected = sorted(f"conformance._checks.{n}" for n in names if not n.startswith("_"))
        assert check_modules() == expected
        assert "conformance._checks._operations" not in check_modules()
        modules = {found.function.__module__ for found in all_checks()}
        assert modules == set(expected)

    def test_families_are_the_catalogs_kit_families(self) -> None:
        """FAMILIES is the catalog's families with kit clauses, in catalog order."""
        assert list(FAMILIES) == [f for f in FAMILY_TITLES if f not in ("REC", "CFG", "CONS")]
        assert (*FAMILIES, MODEL_GROUP) == GROUPS

    def test_checks_come_in_group_then_catalog_order(self) -> None:
        """Checks of primary clauses come family by family; those with none come last."""
        groups = [found.group for found in all_checks()]
        assert groups == sorted(groups, key=GROUPS.index)
        assert groups[-1] == MODEL_GROUP


class TestNoPrimaryClause:
    def test_id_is_the_slug_and_group_is_the_model(self) -> None:
        """A check with no primary clause has its slug as id and runs under test_model."""
        assert (MANY.id, MANY.family, MANY.group) == ("many", None, MODEL_GROUP)
        assert MANY.judges == MANY.covers

    def test_a_check_of_a_clause_keeps_its_id(self) -> None:
        """A check of a primary clause reads <CLAUSE>-<slug>, judges it first and blames it."""
        one = Check("DROP-2", "stale", nothing, covers=("DROP-3",))
        assert (one.id, one.family, one.group) == ("DROP-2-stale", "DROP", "DROP")
        assert one.judges == ("DROP-2", "DROP-3")
        assert one.clause_for("`freeze`") == "DROP-2"

    def test_model_based_check_has_no_primary_clause(self) -> None:
        """The model-based check judges FENCE-1 and sixteen more clauses alike."""
        found = checks_by_id()["model-based"]
        assert found.clause is None
        assert len(found.covers) == 17
        assert "FENCE-1" in found.covers

    def test_refuses_one_that_covers_nothing(self) -> None:
        """Without a primary clause a check must cover at least one."""
        with pytest.raises(ValueError, match="covers none"):
            Check(None, "empty", nothing)

    def test_refuses_a_slug_that_reads_as_a_clause_id(self) -> None:
        """Its id, the slug, must not be mistaken for a <CLAUSE>-<slug> id."""
        with pytest.raises(ValueError, match="must not start with a clause id"):
            Check(None, "PUT-1-x", nothing, covers=("PUT-1",))

    def test_registration_refuses_an_unknown_family_among_covers(self) -> None:
        """Every clause it covers must be of a kit family."""
        with pytest.raises(ValueError, match="unknown family REC"):
            check(None, "records", covers=("REC-1",))(nothing)

    def test_blames_the_covered_clause_of_the_operation(self) -> None:
        """A failure of an operation fails the first covered clause about it."""
        assert MANY.clause_for("freeze") == "FREEZE-2"
        assert MANY.clause_for("`drop`") == "DROP-1"
        assert MANY.clause_for("put") == "PUT-3"

    def test_blames_the_first_covered_clause_otherwise(self) -> None:
        """An operation it covers no clause of, or an unknown one, fails its first clause."""
        assert MANY.clause_for("`mark_incomplete`") == "PUT-3"
        assert MANY.clause_for("the call") == "PUT-3"
        assert MANY.clause_for() == "PUT-3"


class TestJudged:
    @pytest.fixture
    def asked(self, monkeypatch: pytest.MonkeyPatch) -> list[str]:
        asked: list[str] = []

        def first_broken(settings: KitSettings, clause: str = "") -> ClauseViolation | None:
            asked.append(clause)
            return None

        monkeypatch.setattr(runner, "first_broken", first_broken)
        return asked

    def test_a_violation_of_any_covered_clause_is_its_own_failure(self, asked: list[str]) -> None:
        """Each covered clause's violation fails that clause; basics are looked up for it."""
        settings = KitSettings(sink="m:C")
        for clause in MANY.covers:
            broken = violation(clause)
            assert runner._judged(settings, MANY, broken) is broken
        assert asked == list(MANY.covers)

    def test_a_violation_of_another_clause_blocks_it(self, asked: list[str]) -> None:
        """A clause it does not cover, broken, blocks the check instead of failing it."""
        judged = runner._judged(KitSettings(sink="m:C"), MANY, violation("SHAPE-1"))
        assert isinstance(judged, CheckBlocked)
        assert (judged.clause, judged.blocked_by) == (None, "SHAPE-1")

    def test_a_broken_basic_blocks_it(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A broken basic other than the violated clause blocks the check."""
        monkeypatch.setattr(runner, "first_broken", lambda settings, clause="": violation("PUT-1"))
        judged = runner._judged(KitSettings(sink="m:C"), MANY, violation("DROP-1"))
        assert isinstance(judged, CheckBlocked)
        assert judged.blocked_by == "PUT-1"


class Hanging:
    """Awaits forever in ``freeze``."""

    async def freeze(self, rollout_id: str) -> None:
        await asyncio.Event().wait()


@pytest.fixture
def _fresh_breaker() -> Iterator[None]:
    breaker.reset()
    yield
    breaker.reset()


@pytest.mark.usefixtures("_fresh_breaker")
def test_an_overrun_fails_the_covered_clause_of_the_operation() -> None:
    """A freeze that never returns in a check with no primary clause fails its FREEZE clause,
    and the breaker remembers that clause."""

    def hangs(kit: Kit) -> None:
        kit.run(Hanging().freeze("r"))

    hanging = Check(None, "hangs", hangs, covers=MANY.covers)
    properties: list[tuple[str, object]] = []
    with pytest.raises(pytest.fail.Exception, match=r"\[FREEZE-2\]"):
        outcomes.judge(KitSettings(sink="m:C", timeout=0.5), hanging, properties)
    assert dict(properties)[outcomes.CLAUSE] == "FREEZE-2"
    assert breaker.overruns["freeze"][0][0] == "FREEZE-2"


class TestVerdict:
    NODE = f"{SUITE}::test_model[model-based]"

    @pytest.fixture
    def hooks(self, pytestconfig: pytest.Config) -> VerdictHooks:
        return VerdictHooks(pytestconfig, Verdicts(KitSettings(sink="m:C"), "0", "0"))

    def report(self, outcome: str, *properties: tuple[str, object]) -> pytest.TestReport:
        longrepr = (SUITE, 1, "Skipped: blocked by SHAPE-1: x") if outcome == "skipped" else None
        return pytest.TestReport(
            self.NODE,
            (SUITE, 1, "x"),
            {},
            outcome,
            longrepr,
            "call",
            user_properties=[(outcomes.CHECK, "model-based"), *properties],
        )

    def test_a_pass_proves_every_covered_clause(self, hooks: VerdictHooks) -> None:
        """Passing, the model-based test proves each of its clauses."""
        hooks.pytest_runtest_logreport(self.report("passed"))
        covers = checks_by_id()["model-based"].covers
        outcome = {c: e.outcome for c, e in hooks.verdicts.clauses.items()}
        assert outcome == dict.fromkeys(covers, "passed")

    def test_a_failure_fails_the_violated_clause_only(self, hooks: VerdictHooks) -> None:
        """Failing on DROP-2, it fails DROP-2 and judges no other clause."""
        hooks.pytest_runtest_logreport(
            self.report("failed", (outcomes.MESSAGE, "[DROP-2] m"), (outcomes.CLAUSE, "DROP-2"))
        )
        outcome = {c: e.outcome for c, e in hooks.verdicts.clauses.items()}
        assert outcome == {"DROP-2": "failed"}

    def test_blocked_blocks_every_covered_clause_softly(self, hooks: VerdictHooks) -> None:
        """Blocked, it fails the blocker and leaves each covered clause blocked, unless a pass
        elsewhere proves it."""
        hooks.pytest_runtest_logreport(
            self.report(
                "skipped",
                (outcomes.BLOCKED_BY, "SHAPE-1"),
                (outcomes.BLOCKER_MESSAGE, "[SHAPE-1] m"),
            )
        )
        hooks.pytest_runtest_logreport(
            pytest.TestReport(
                f"{SUITE}::test_drop[DROP-2-stale-version]",
                (SUITE, 1, "x"),
                {},
                "passed",
                None,
                "call",
                user_properties=[(outcomes.CHECK, "DROP-2-stale-version")],
            )
        )
        clauses = hooks.verdicts.clauses
        assert clauses["SHAPE-1"].outcome == "failed"
        assert clauses["DROP-2"].outcome == "passed"
        assert clauses["DROP-1"].outcome == "blocked"
        assert clauses["DROP-1"].blocked_by == ["SHAPE-1"]


class TestSuite:
    def test_collected_kit_tests_are_the_registered_checks(self, pytester: pytest.Pytester) -> None:
        """--co lists one kit test per registered check of the run's contract, as
        test_<group>[<id>], in order; the two contracts' tests together are every check."""
        runs = {
            "capture": (MEMORY, LOCAL),
            "staging-v2": (
                "--tokcap-contract=staging-v2",
                "--tokcap-staging-sink=reference:MemoryStagingStore",
                LOCAL,
            ),
        }
        total = 0
        for contract, arguments in runs.items():
            result = pytester.runpytest_subprocess(
                "-p", "no:cacheprovider", *arguments, "--co", "-q"
            )
            collected = [
                line.split("test_contract.py::", 1)[1]
                for line in result.outlines
                if "test_contract.py::" in line
            ]
            expected = [
                f"test_{found.group.lower()}[{found.id}]"
                for found in all_checks()
                if found.contract == contract
            ]
            assert collected == expected
            total += len(collected)
        assert total == len(checks_by_id())

    def test_node_ids_keep_their_shape(self, pytester: pytest.Pytester) -> None:
        """Clause checks keep test_<family>[<CLAUSE>-<slug>]; the model-based one is
        test_model[model-based]."""
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", MEMORY, LOCAL, "--co", "-q"
        )
        result.stdout.fnmatch_lines(
            [
                "*test_contract.py::test_drop[[]DROP-2-stale-version[]]",
                "*test_contract.py::test_ext[[]EXT-BEGIN-1-intents[]]",
                "*test_contract.py::test_model[[]model-based[]]",
            ]
        )
