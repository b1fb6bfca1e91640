"""The staging checks' spawned stagers and fetchers are the capture contract's children: one
that dies or hangs is named with the call it was in, within the deadline, and its siblings are
stopped rather than waited for."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

STORES = '''
import multiprocessing, os, time
from reference import FileStagingStore


def spawned():
    return multiprocessing.parent_process() is not None


class DiesStaging(FileStagingStore):
    """Ends its process in stage, in spawned interpreters only."""

    def stage(self, record, *, attachments=None):
        if spawned():
            os._exit(3)
        return super().stage(record, attachments=attachments)


class HangsStaging(FileStagingStore):
    """Never returns from stage, in spawned interpreters only."""

    def stage(self, record, *, attachments=None):
        if spawned():
            while True:
                time.sleep(1)
        return super().stage(record, attachments=attachments)


class DiesFetching(FileStagingStore):
    """Ends its process in fetch, in spawned interpreters only."""

    def fetch(self, staging_keys):
        if spawned():
            os._exit(4)
        return super().fetch(staging_keys)
'''

QUICKLY = 120.0
"""Seconds within which each run here ends on a loaded machine, spawned interpreters and all."""


def run(pytester: pytest.Pytester, sink: str) -> tuple[dict[str, Any], float]:
    pytester.makepyfile(stores=STORES)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--tokcap-contract=staging-v2",
        f"--tokcap-staging-sink=stores:{sink}",
        '--tokcap-staging-sink-kwargs={"root": "{tmp_path}"}',
        "--tokcap-timeout=3",
        "--tokcap-report=r.json",
    )
    elapsed = time.monotonic() - started
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    return json.loads((pytester.path / "r.json").read_text(encoding="utf-8")), elapsed


def failed(report: dict[str, Any]) -> dict[str, str]:
    """Each failed clause with its message."""
    return {
        clause: entry["message"]
        for clause, entry in report["clauses"].items()
        if entry["outcome"] == "failed"
    }


CASES = [
    pytest.param(
        "DiesStaging",
        "STAGE-6",
        ["spawned stager", "died during `stage` (stage 1 of 12): exit code 3"],
        id="a stager dying in stage",
    ),
    pytest.param(
        "HangsStaging",
        "STAGE-6",
        ["spawned stager", "`stage` did not return within 3 s (stage 1 of 12)"],
        id="a stager hanging in stage",
    ),
    pytest.param(
        "DiesFetching",
        "STAGE-3",
        ["spawned fetcher died during `fetch`", "exit code 4"],
        id="a fetcher dying in fetch",
    ),
]


@pytest.mark.parametrize(("sink", "clause", "said"), CASES)
def test_a_spawned_call_that_dies_or_hangs_fails_its_check_naming_the_call(
    pytester: pytest.Pytester, sink: str, clause: str, said: list[str]
) -> None:
    """The check that spawned the child fails its clause alone, naming the child, the call it
    was in and how it ended, within the deadline: a hung child is killed, its siblings stopped.
    """
    report, elapsed = run(pytester, sink)
    found = failed(report)
    assert list(found) == [clause]
    for words in said:
        assert words in found[clause]
    assert elapsed < QUICKLY
