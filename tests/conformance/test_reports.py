"""Every way a run ends leaves reports that say how far it got, what was judged, and why each
failure is one."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tokcap_spec import SPEC_REVISION

MEMORY = "--tokcap-sink=reference.memory_store:MemoryTokenStore"
LOCAL = "--tokcap-capability=process-local"

FORGETFUL = '''
from tokcap_spec import TokenCaptureSnapshot

class Forgetful:
    """Acks every put and forgets it."""

    async def put(self, entry):
        return None

    async def mark_incomplete(self, rollout_id, model_call_id=""):
        return None

    async def freeze(self, rollout_id):
        return TokenCaptureSnapshot(rollout_id, (), False, "s", 0)

    async def drop(self, rollout_id, *, snapshot_id, version):
        return False

    async def close(self):
        return None


class Interrupts(Forgetful):
    async def put(self, entry):
        raise KeyboardInterrupt


class Hangs(Forgetful):
    async def put(self, entry):
        import threading
        threading.Event().wait()
'''


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    pytester.makepyfile(targets=FORGETFUL)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--tokcap-report=r.json",
        "--tokcap-report-md=r.md",
        "--junitxml=junit.xml",
        *args,
    )
    return result, json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))


class TestRunStatus:
    def test_a_whole_run_is_complete_and_says_what_judged_what(
        self, pytester: pytest.Pytester
    ) -> None:
        """A full run reports complete, with times, profile, seed, versions and format."""
        _, report = run(pytester, MEMORY, LOCAL, "--tokcap-seed=7", "--tokcap-profile=quick")
        run_ = report["run"]
        assert run_["status"] == "complete"
        assert run_["started"] <= run_["finished"]
        assert run_["duration_seconds"] > 0
        assert (report["profile"], report["seed"], report["spec"]) == ("quick", 7, SPEC_REVISION)
        assert report["report_format"] == 2
        assert report["kit_version"] == report["target"]["distributions"]["sink"]["version"]
        assert report["target"]["distributions"]["sink"]["name"] == "tokcap"
        assert "tokcap_status" in (pytester.path / "junit.xml").read_text()

    def test_a_keyword_selection_is_partial(self, pytester: pytest.Pytester) -> None:
        """-k runs a part of the kit, and the reports say so."""
        _, report = run(pytester, MEMORY, LOCAL, "-k", "PUT-3")
        assert report["run"]["status"] == "partial"
        assert "run partial" in (pytester.path / "r.md").read_text()

    def test_stopping_at_the_first_failure_is_partial(self, pytester: pytest.Pytester) -> None:
        """-x stops early; the report is partial and names why."""
        _, report = run(pytester, "--tokcap-sink=targets:Forgetful", "-x")
        assert report["run"]["status"] == "partial"
        assert "stopping after 1 failures" in report["run"]["reason"]

    def test_an_interrupted_run_says_so(self, pytester: pytest.Pytester) -> None:
        """A run stopped by KeyboardInterrupt writes reports that say interrupted."""
        result, report = run(pytester, "--tokcap-sink=targets:Interrupts")
        assert result.ret == pytest.ExitCode.INTERRUPTED
        assert report["run"]["status"] == "interrupted"
        assert (pytester.path / "junit.xml").exists()
        assert "run interrupted" in (pytester.path / "r.md").read_text()


class TestFailuresInFull:
    def test_markdown_carries_expected_observed_hint_and_link(
        self, pytester: pytest.Pytester
    ) -> None:
        """Each failed clause is explained in the markdown report, not just its first line."""
        run(pytester, "--tokcap-sink=targets:Forgetful", "-k", "PUT-1")
        markdown = (pytester.path / "r.md").read_text()
        section = markdown.split("#### Failures", 1)[1]
        assert "**PUT-1**" in section
        for part in ("expected:", "observed:", "hint:", "see:      docs/clauses.md#put-1"):
            assert part in section

    def test_blocked_clauses_everywhere(self, pytester: pytest.Pytester) -> None:
        """Checks stopped by an earlier clause's breakage read as blocked in every report."""
        result, report = run(
            pytester, "--tokcap-sink=targets:Hangs", "--tokcap-timeout=1", "-k", "SHAPE-3 or PUT"
        )
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        put = report["clauses"]["PUT-1"]
        assert (put["outcome"], put["blocked_by"]) == ("blocked", "SHAPE-3")
        assert report["clauses"]["SHAPE-3"]["outcome"] == "failed"
        assert report["summary"]["blocked"] >= 1
        assert "| PUT-1 | blocked |" in (pytester.path / "r.md").read_text()
        result.stdout.fnmatch_lines(
            [
                "family * passed * failed * blocked *",
                "PUT * 0 * 0 * 6 *",
                "clauses: 0 passed, 1 failed, 0 skipped, 0 not claimed, * blocked (failed: *",
            ]
        )
        junit = (pytester.path / "junit.xml").read_text()
        assert re.search(r'<skipped [^>]*message="blocked by SHAPE-3: ', junit)
