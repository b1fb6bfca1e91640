"""The verdict names the one clause to fix: failed, blocked by a more basic one, never Flaky."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

FORGETS_ONE = '''
from independent import SqliteStore

class ForgetsOnePut(SqliteStore):
    """Acks every put but silently drops the fifth one made in this process into a rollout the
    kit drew for a generated example (its id carries the label "gen")."""

    count = 0

    async def put(self, entry):
        if "-gen-" in entry.rollout_id:
            type(self).count += 1
            if type(self).count == 5:
                return
        await super().put(entry)
'''

NOT_A_SINK = """
class NotASink:
    def __init__(self, root):
        pass

    def put(self, entry):
        return None

    async def mark_incomplete(self, rollout_id, model_call_id=""):
        return None

    async def freeze(self, rollout_id):
        return None

    async def drop(self, rollout_id, *, snapshot_id, version):
        return False

    async def close(self):
        return None
"""


def kit(pytester: pytest.Pytester, sink: str, *args: str) -> tuple[int, dict[str, Any], str]:
    """Run the kit against ``sink``; return the exit code, the report's clauses and the output."""
    report = pytester.path / "r.json"
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        f"--tokcap-sink={sink}",
        '--tokcap-sink-kwargs={"root": "{tmp_path}"}',
        f"--tokcap-report={report}",
        "-rs",
        *args,
    )
    clauses = json.loads(report.read_text(encoding="utf-8"))["clauses"]
    return int(result.ret), clauses, result.stdout.str()


@pytest.fixture
def zoo_path(monkeypatch: pytest.MonkeyPatch, pytestconfig: pytest.Config) -> None:
    """Put the zoo's stores on the kit run's import path."""
    zoo = pytestconfig.rootpath / "tests" / "mutants"
    monkeypatch.setenv("PYTHONPATH", str(zoo))


@pytest.mark.usefixtures("zoo_path")
class TestBlocked:
    def test_a_broken_shape_blocks_the_checks_that_need_it(self, pytester: pytest.Pytester) -> None:
        """A sink whose put is no coroutine fails SHAPE-1; the checks that put are blocked by it."""
        pytester.makepyfile(notasink=NOT_A_SINK)
        code, clauses, output = kit(pytester, "notasink:NotASink", "-k", "SHAPE or PUT")
        assert code == 1
        failed = sorted(c for c, e in clauses.items() if e["outcome"] == "failed")
        assert failed == ["SHAPE-1"]
        assert clauses["PUT-1"]["outcome"] == "blocked"
        assert clauses["PUT-1"]["blocked_by"] == "SHAPE-1"
        assert "SKIPPED" not in output
        assert re.search(r"=+ [1-9][0-9]* failed", output)
        assert "blocked by SHAPE-1" in output


@pytest.mark.usefixtures("zoo_path")
class TestOneVerdict:
    def test_a_clause_found_broken_by_another_check_has_a_failing_test(
        self, pytester: pytest.Pytester
    ) -> None:
        """A clause whose own check did not run fails in junit, the report and the exit code."""
        code, clauses, _ = kit(
            pytester, "zoo_put:BuffersUntilClose", "-k", "PUT-3", "--junitxml=junit.xml"
        )
        assert code == 1
        assert clauses["PUT-1"]["outcome"] == "failed"
        assert clauses["PUT-3"]["outcome"] == "blocked"
        junit = (pytester.path / "junit.xml").read_text(encoding="utf-8")
        assert re.search(r'<testsuite [^>]*failures="[1-9]', junit)
        assert re.search(r'<failure message="Failed: blocked by PUT-1:', junit)
        assert "[PUT-1] contract violated" in junit

    def test_a_run_stopped_by_x_fails_in_junit_what_it_fails_in_the_report(
        self, pytester: pytest.Pytester
    ) -> None:
        """Stopped at its first failure, the run's junit carries each clause the report fails."""
        code, clauses, _ = kit(pytester, "zoo_mask:IgnoresMark", "-x", "--junitxml=junit.xml")
        assert code == 1
        failed = [clause for clause, entry in clauses.items() if entry["outcome"] == "failed"]
        assert failed
        junit = (pytester.path / "junit.xml").read_text(encoding="utf-8")
        assert re.search(r'<testsuite [^>]*failures="[1-9]', junit)
        for clause in failed:
            assert f"[{clause}] contract violated" in junit


@pytest.mark.usefixtures("zoo_path")
class TestFlakiness:
    def test_a_store_changing_under_the_kit_fails_the_clause_not_hypothesis(
        self, pytester: pytest.Pytester
    ) -> None:
        """An example that fails once and passes on replay is the clause's failure, with a hint."""
        pytester.makepyfile(forgets=FORGETS_ONE)
        code, clauses, output = kit(pytester, "forgets:ForgetsOnePut", "-k", "PUT-6")
        assert code == 1
        message = clauses["PUT-6"]["message"]
        assert clauses["PUT-6"]["outcome"] == "failed"
        assert message.startswith("[PUT-6] contract violated")
        assert "changed under the kit" in message
        assert "Flaky" not in output
