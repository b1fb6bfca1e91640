"""A target that never returns costs a few deadlines, never the CI job: the run ends, fails,
names the call that hung, and writes its reports."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

HANGING = '''
import asyncio, multiprocessing, os, signal, threading
from reference import FileTokenStore

def in_worker():
    return multiprocessing.parent_process() is not None

class BlocksInPut(FileTokenStore):
    """put blocks its thread forever, inside the coroutine."""
    async def put(self, entry):
        threading.Event().wait()

class AwaitsForeverInPut(FileTokenStore):
    """put awaits something that never happens."""
    async def put(self, entry):
        await asyncio.Event().wait()

class BlocksInWorkersOnly(FileTokenStore):
    """put works here and blocks forever in spawned workers."""
    async def put(self, entry):
        if in_worker():
            threading.Event().wait()
        await super().put(entry)

class DiesInWorkers(FileTokenStore):
    """A spawned worker's put kills its own process."""
    async def put(self, entry):
        if in_worker():
            os.kill(os.getpid(), signal.SIGKILL)
        await super().put(entry)

class BlocksInConstructor(FileTokenStore):
    def __init__(self, root):
        threading.Event().wait()
'''

TIMEOUT = "2"
CI_BUDGET = 300.0
"""The ci profile must end within five minutes whatever the target does."""


def run_kit(pytester: pytest.Pytester, sink: str, *args: str) -> tuple[Any, dict[str, Any], float]:
    pytester.makepyfile(hanging=HANGING)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        f"--tokcap-sink=hanging:{sink}",
        '--tokcap-sink-kwargs={"root": "{tmp_path}"}',
        "--tokcap-profile=ci",
        f"--tokcap-timeout={TIMEOUT}",
        "--tokcap-report=r.json",
        "--tokcap-report-md=r.md",
        "--junitxml=junit.xml",
        *args,
        timeout=CI_BUDGET,
    )
    elapsed = time.monotonic() - started
    path = pytester.path / "r.json"
    report = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    return result, report, elapsed


def failures(report: dict[str, Any]) -> dict[str, str]:
    return {c: e["message"] for c, e in report["clauses"].items() if e["outcome"] == "failed"}


class TestInProcess:
    @pytest.mark.parametrize("sink", ["BlocksInPut", "AwaitsForeverInPut"])
    def test_a_put_that_never_returns_ends_the_run_failing(
        self, pytester: pytest.Pytester, sink: str
    ) -> None:
        """The ci profile ends within its budget, failing the clause whose put hung."""
        result, report, elapsed = run_kit(pytester, sink)
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        assert elapsed < CI_BUDGET
        assert report["run"]["status"] == "complete"
        failed = failures(report)
        assert failed, report["summary"]
        assert all(f"`put` did not return within {TIMEOUT} s" in m for m in failed.values())
        assert (pytester.path / "r.md").exists()
        assert (pytester.path / "junit.xml").exists()

    def test_checks_after_repeated_overruns_are_blocked_not_waited_for(
        self, pytester: pytest.Pytester
    ) -> None:
        """After two overruns of put, later checks that need it are blocked by the first."""
        _, report, _ = run_kit(pytester, "BlocksInPut")
        (first,) = [c for c, e in report["clauses"].items() if e["outcome"] == "failed"][:1]
        blocked = [e for e in report["clauses"].values() if e["outcome"] == "blocked"]
        assert blocked
        assert {entry["blocked_by"] for entry in blocked} <= set(failures(report))
        assert first in {entry["blocked_by"] for entry in blocked}

    def test_a_constructor_that_never_returns_is_a_usage_error(
        self, pytester: pytest.Pytester
    ) -> None:
        """A constructor that blocks stops the run before any check, exit code 4."""
        result, report, elapsed = run_kit(pytester, "BlocksInConstructor")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(
            [f"*the constructor of hanging:BlocksInConstructor did not return within {TIMEOUT} s*"]
        )
        assert elapsed < CI_BUDGET
        assert report["run"]["status"] == "interrupted"


class TestSpawnedWorkers:
    def test_a_put_that_hangs_only_in_workers_ends_the_run_failing(
        self, pytester: pytest.Pytester
    ) -> None:
        """Workers are given up on after the deadline; in-process clauses still pass."""
        result, report, elapsed = run_kit(pytester, "BlocksInWorkersOnly")
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        assert elapsed < CI_BUDGET
        assert report["run"]["status"] == "complete"
        failed = failures(report)
        assert "SPAWN-1" in failed
        assert f"`put` did not return within {TIMEOUT} s (operation 1 of 1)" in failed["SPAWN-1"]
        assert report["clauses"]["PUT-1"]["outcome"] == "passed"

    def test_a_dead_worker_is_reported_with_its_call_and_signal(
        self, pytester: pytest.Pytester
    ) -> None:
        """A worker killed during put is reported as such, not as a failed construction."""
        _, report, _ = run_kit(pytester, "DiesInWorkers", "-k", "SPAWN-1")
        message = report["clauses"]["SPAWN-1"]["message"]
        assert "spawned worker 0 died during `put` (operation 1 of 1)" in message
        assert "killed by signal SIGKILL" in message
        assert "to build" not in message
