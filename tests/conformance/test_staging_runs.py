"""A run under ``--tokcap-contract=staging-v2`` judges the STAGE family alone, and every
report, the terminal, junit and the exit code say the same about it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tokcap_spec import SPEC_REVISION

STAGING = ("--tokcap-contract=staging-v2", "--tokcap-capability=process-local")
MEMORY = "--tokcap-staging-sink=reference.staging_memory:MemoryStagingStore"

BROKEN = '''
from reference.staging_memory import MemoryStagingStore


class SortsRows(MemoryStagingStore):
    """Answers rows in key order."""

    def fetch(self, staging_keys):
        return MemoryStagingStore.fetch(self, sorted(staging_keys))
'''


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    pytester.makepyfile(targets=BROKEN)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--tokcap-report=r.json", "--junitxml=junit.xml", *args
    )
    return result, json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))


def test_a_staging_run_judges_the_staging_family_alone(pytester: pytest.Pytester) -> None:
    """Only STAGE checks are collected, the run is complete, and the report names the contract
    and the catalog revision it judged by."""
    result, report = run(
        pytester, *STAGING, MEMORY, '--tokcap-staging-sink-kwargs={"namespace": "runs"}'
    )
    assert result.ret == pytest.ExitCode.OK
    assert (report["contract"], report["contract_revision"]) == ("staging-v2", SPEC_REVISION)
    assert report["run"]["status"] == "complete"
    assert report["clauses"]
    assert all(clause.startswith("STAGE-") for clause in report["clauses"])
    assert report["target"]["sink"] == "reference.staging_memory:MemoryStagingStore"
    text = result.stdout.str()
    assert "judging staging sink reference.staging_memory:MemoryStagingStore" in text
    assert "test_put[" not in text


def test_a_capture_run_names_its_contract_and_runs_no_staging_check(
    pytester: pytest.Pytester,
) -> None:
    """The default contract is capture; its run collects no STAGE check."""
    result, report = run(
        pytester,
        "--tokcap-sink=reference.memory_store:MemoryTokenStore",
        "--tokcap-capability=process-local",
        "-k",
        "SHAPE",
    )
    assert report["contract"] == "capture"
    assert not any(clause.startswith("STAGE-") for clause in report["clauses"])
    assert "test_stage[" not in result.stdout.str()


def test_a_broken_staging_store_fails_its_clause_everywhere(pytester: pytest.Pytester) -> None:
    """A store that answers rows out of order fails STAGE-8 in the report, the terminal, junit
    and the exit code alike."""
    result, report = run(
        pytester,
        *STAGING,
        "--tokcap-staging-sink=targets:SortsRows",
        '--tokcap-staging-sink-kwargs={"namespace": "sorted"}',
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    failed = [clause for clause, entry in report["clauses"].items() if entry["outcome"] == "failed"]
    assert failed == ["STAGE-8"]
    assert "[STAGE-8] contract violated" in result.stdout.str()
    assert "[STAGE-8] contract violated" in (pytester.path / "junit.xml").read_text()
