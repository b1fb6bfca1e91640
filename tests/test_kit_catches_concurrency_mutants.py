"""The kit catches stores that break only under concurrency, and passes correct ones.

Each run is the kit as a framework author runs it (``pytest --tokcap-sink=...`` in a fresh
interpreter, ``ci`` profile), restricted to the concurrency and model-based checks; the verdict
is read from the JSON report.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

MUTANTS = Path(__file__).parent / "mutants"
CHECKS = "FREEZE-5 or SPAWN-4 or model-based"

pytestmark = pytest.mark.slow


def run_kit(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, sink: str) -> dict:
    """Run the concurrency and model-based checks against ``sink``; return the report's clauses."""
    path = os.pathsep.join(filter(None, [str(MUTANTS), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    report = pytester.path / "report.json"
    pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        f"--tokcap-sink={sink}",
        '--tokcap-sink-kwargs={"root": "{tmp_path}"}',
        "--tokcap-profile=ci",
        f"--tokcap-report={report}",
        "-k",
        CHECKS,
    )
    clauses: dict = json.loads(report.read_text(encoding="utf-8"))["clauses"]
    return clauses


@pytest.mark.parametrize(
    ("mutant", "clause", "anomaly", "pictured"),
    [
        ("TwoStepFreeze", "FREEZE-5", "lost-ack", True),
        ("CountedVersion", "DROP-4", "version-stuck", False),
        ("DropRacesMark", "FREEZE-5", "lost-ack", True),
        ("LaggingVisibility", "FREEZE-5", "lost-ack", False),
        ("UnlockedReadModifyWrite", "SPAWN-4", "lost-ack", True),
    ],
)
def test_mutant_fails_its_clause(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    mutant: str,
    clause: str,
    anomaly: str,
    pictured: bool,
) -> None:
    """A store broken under concurrency fails the clause it breaks, naming the anomaly.

    Where only a concurrent history shows the bug, the message points to its timeline, written
    next to the report.
    """
    clauses = run_kit(pytester, monkeypatch, f"concurrency:{mutant}")
    message = clauses[clause]["message"]
    assert clauses[clause]["outcome"] == "failed"
    assert anomaly in message
    if pictured:
        picture = Path(re.findall(r"timeline: (\S+)", message)[0])
        assert picture.parent == pytester.path
        assert "<svg" in picture.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "store", ["reference.file_store:FileTokenStore", "relaxed:RelaxedFileStore"]
)
def test_correct_store_passes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    """A correct store, strict or relaxed, passes every concurrency and model-based check."""
    clauses = run_kit(pytester, monkeypatch, store)
    failed = {
        name: entry["message"] for name, entry in clauses.items() if entry["outcome"] != "passed"
    }
    assert failed == {}
    assert clauses["FREEZE-5"]["outcome"] == "passed"
    assert clauses["SPAWN-4"]["outcome"] == "passed"
