"""``conformance.run_conformance`` judges a target as the plugin does, from any kind of script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import conformance
from conformance import SettingsError

MUTANTS = Path(__file__).resolve().parents[1] / "mutants"
ROOT = {"root": "{tmp_path}"}
FILE_STORE = ("reference:FileTokenStore", ROOT, "--tokcap-fence=strict")
ZOO = [
    ("zoo_drop:RetiresCurrentState", "DROP-2"),
    ("zoo_put:ConflictComparesTokensOnly", "PUT-4"),
    ("zoo_mask:MarksOnlyKnownCalls", "MASK-6"),
]

HANGS = '''
import asyncio
from reference import MemoryTokenStore

class HangsOnPut(MemoryTokenStore):
    """Never returns from put."""

    async def put(self, entry):
        await asyncio.Event().wait()
'''


def _environment(tmp_path: Path) -> dict[str, str]:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(tmp_path), str(MUTANTS), environment.get("PYTHONPATH")])
    )
    environment.pop("TOKCAP_SEED", None)
    return environment


def _plugin(tmp_path: Path, sink: str, *flags: str, kwargs: dict[str, Any] | None = None) -> Any:
    report = tmp_path / "plugin.json"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tokcap_pytest"]
    command += [f"--tokcap-sink={sink}", f"--tokcap-report={report}", "-q", *flags]
    if kwargs is not None:
        command.append(f"--tokcap-sink-kwargs={json.dumps(kwargs)}")
    subprocess.run(command, cwd=tmp_path, env=_environment(tmp_path), capture_output=True)
    return json.loads(report.read_text())


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` as the script ``judge.py`` in a process of its own; it must succeed."""
    (tmp_path / "judge.py").write_text(textwrap.dedent(body))
    done = subprocess.run(
        [sys.executable, "judge.py"],
        cwd=tmp_path,
        env=_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _script(tmp_path: Path, body: str) -> Any:
    """Run ``body``; return the report it wrote and what it printed."""
    done = _run(tmp_path, body)
    return json.loads((tmp_path / "library.json").read_text()), done.stdout


def _outcomes(report: Any) -> dict[str, str]:
    return {clause: entry["outcome"] for clause, entry in report["clauses"].items()}


CALL = """
conformance.run_conformance(
    {sink!r}, sink_kwargs={kwargs!r}, {extra} profile="quick", seed=11,
    report="library.json", junit="library.xml",
)
"""

UNGUARDED = (
    """
import conformance
with open("runs.log", "a") as log:  # the script's top level, run again by every re-import
    log.write("ran\\n")
"""
    + CALL
)

GUARDED = (
    """
import conformance

def main():
"""
    + textwrap.indent(CALL, "    ")
    + """

if __name__ == "__main__":
    main()
"""
)

IN_A_LOOP = (
    """
import asyncio
import conformance

async def main():
    ticks = []

    async def tick():
        while True:
            ticks.append(1)
            await asyncio.sleep(0.05)

    ticker = asyncio.ensure_future(tick())
"""
    + textwrap.indent(CALL, "    ")
    + """
    report = await conformance.run_conformance_async(
        {sink!r}, sink_kwargs={kwargs!r}, {extra} profile="quick", seed=11,
    )
    ticker.cancel()
    print("ticks", len(ticks), "async", sorted(report.failed))

asyncio.run(main())
"""
)


def _fill(body: str, sink: str, kwargs: dict[str, Any], extra: str) -> str:
    return (
        body.replace("{sink!r}", repr(sink))
        .replace("{kwargs!r}", repr(kwargs))
        .replace("{extra}", extra)
    )


@pytest.fixture(scope="module")
def plugin_on_file_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The plugin's clause outcomes on the file store, quick profile, seed 11."""
    sink, kwargs, flag = FILE_STORE
    folder = tmp_path_factory.mktemp("plugin")
    report = _plugin(
        folder, sink, flag, "--tokcap-profile=quick", "--tokcap-seed=11", kwargs=kwargs
    )
    return _outcomes(report)


class TestSameVerdictAsThePlugin:
    def test_a_script_without_a_main_guard_runs_the_kit_once(
        self, tmp_path: Path, plugin_on_file_store: dict[str, str]
    ) -> None:
        """A script with no ``__main__`` guard runs once, spawned workers and all, and its
        report holds the plugin's verdict on the file store."""
        sink, kwargs, _ = FILE_STORE
        body = _fill(UNGUARDED, sink, kwargs, 'fence="strict",')
        report, _ = _script(tmp_path, body)
        assert (tmp_path / "runs.log").read_text() == "ran\n"
        assert _outcomes(report) == plugin_on_file_store
        assert report["run"]["status"] == "complete"
        assert report["summary"]["failed"] == 0
        assert report["summary"]["passed"] > 30

    def test_a_guarded_script_gets_the_same_verdict(
        self, tmp_path: Path, plugin_on_file_store: dict[str, str]
    ) -> None:
        """A script with a ``__main__`` guard gets the plugin's verdict on the file store."""
        sink, kwargs, _ = FILE_STORE
        report, _ = _script(tmp_path, _fill(GUARDED, sink, kwargs, 'fence="strict",'))
        assert _outcomes(report) == plugin_on_file_store

    def test_inside_a_running_event_loop(
        self, tmp_path: Path, plugin_on_file_store: dict[str, str]
    ) -> None:
        """Called from a coroutine, the sync call and the awaitable one both judge the file
        store as the plugin does, and the awaitable one lets the caller's loop run."""
        sink, kwargs, _ = FILE_STORE
        report, printed = _script(tmp_path, _fill(IN_A_LOOP, sink, kwargs, 'fence="strict",'))
        assert _outcomes(report) == plugin_on_file_store
        ticks, failed = printed.split(" async ")
        assert int(ticks.split()[1]) > 10
        assert failed.strip() == "[]"

    @pytest.mark.parametrize(("sink", "clause"), ZOO, ids=[clause for _, clause in ZOO])
    def test_a_mutant_fails_as_under_the_plugin(
        self, tmp_path: Path, sink: str, clause: str
    ) -> None:
        """A zoo mutant gets the same clause outcomes from the call as from the plugin (both
        running the checks of its clause's family), and its junit report fails exactly the
        tests the report fails."""
        family = clause.split("-")[0]
        report, _ = _script(tmp_path, _fill(GUARDED, sink, ROOT, f"select=[{family!r}],"))
        expected = _plugin(
            tmp_path,
            sink,
            "--tokcap-profile=quick",
            "--tokcap-seed=11",
            f"-k test_{family.lower()}",
            kwargs=ROOT,
        )
        assert _outcomes(report) == _outcomes(expected)
        assert report["clauses"][clause]["outcome"] == "failed"
        junit = (tmp_path / "library.xml").read_text()
        failing = {
            t
            for entry in report["clauses"].values()
            if entry["outcome"] == "failed"
            for t in entry["tests"]
        }
        assert junit.count("<failure ") >= 1
        assert f'failures="{junit.count("<failure ")}"' in junit
        assert all(name.split("::")[1] in junit for name in failing)


def _printed(tmp_path: Path, script: str) -> tuple[Any, str]:
    """Run ``script``; return the JSON it printed last, and its stderr."""
    done = _run(tmp_path, script)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


HANG_SCRIPT = """
import json, time
import conformance

started = time.monotonic()
report = conformance.run_conformance(
    "hangs:HangsOnPut", capabilities=["process-local"], timeout=1, seed=3, select=["PUT"]
)
print(json.dumps({
    "took": time.monotonic() - started,
    "failed": report.failed,
    "message": report.clauses["PUT-1"].message,
    "succeeded": report.succeeded,
}))
"""


def test_a_hanging_target_ends_within_its_deadline(tmp_path: Path) -> None:
    """A put that never returns fails its clause on the deadline, and the run ends soon after
    instead of hanging (in a process of its own: the abandoned calls' threads stay in it)."""
    (tmp_path / "hangs.py").write_text(HANGS)
    result, _ = _printed(tmp_path, HANG_SCRIPT)
    assert "PUT-1" in result["failed"]
    assert "within 1 s" in result["message"]
    assert result["took"] < 60, result["took"]
    assert not result["succeeded"]


SELECTION_SCRIPT = """
import json
import conformance

report = conformance.run_conformance(
    "reference:MemoryTokenStore", capabilities=["process-local"], select=["DROP-2", "SHAPE"]
)
try:
    conformance.run_conformance(
        "reference:MemoryTokenStore", sink_kwargs={"namespace": 7, "password": "hunter2-x"}
    )
    refused = ""
except conformance.TargetError as error:
    refused = str(error)
print(json.dumps({
    "status": report.run.status,
    "clauses": sorted(report.clauses),
    "failed": report.failed,
    "succeeded": report.succeeded,
    "refused": refused,
}))
"""


def test_a_selection_is_partial_and_kwarg_values_stay_secret(tmp_path: Path) -> None:
    """Selecting checks by clause and family runs only those (with the clauses they judge
    besides) and the run says partial; a constructor refusing its kwargs is refused by their
    names, never their values."""
    result, stderr = _printed(tmp_path, SELECTION_SCRIPT)
    assert result["status"] == "partial"
    assert {"DROP-2", "SHAPE-1", "SHAPE-3"} <= set(result["clauses"])
    assert not [c for c in result["clauses"] if c.startswith(("SPAWN", "CLOSE"))]
    assert result["failed"] == []
    assert not result["succeeded"]
    assert "password" in result["refused"]
    assert "hunter2-x" not in result["refused"] + stderr


@pytest.mark.parametrize(
    ("arguments", "names"),
    [
        ({"sink": "no_colon"}, "module.path:ClassName"),
        ({"sink": "reference:MemoryTokenStore", "profile": "fast"}, "quick, ci, thorough"),
        ({"sink": "reference:MemoryTokenStore", "select": ["NOPE-9"]}, "NOPE-9"),
        ({"sink": "reference:MemoryTokenStore", "sink_kwargs": {"k": object()}}, "keys: k"),
    ],
)
def test_bad_arguments_are_refused_by_name(arguments: dict[str, Any], names: str) -> None:
    """An unusable argument raises a SettingsError that says what would be accepted."""
    with pytest.raises(SettingsError, match=names.replace(".", r"\.")):
        conformance.run_conformance(**arguments)


class TestStagingContract:
    def test_the_library_judges_a_staging_store_by_the_stage_family(self) -> None:
        """contract="staging-v2" judges the named staging store by STAGE alone, completely."""
        verdicts = conformance.run_conformance(
            "reference:MemoryStagingStore",
            sink_kwargs={"namespace": "library"},
            capabilities=["process-local"],
            contract="staging-v2",
        )
        report = verdicts.as_json()
        assert report["contract"] == "staging-v2"
        assert report["run"]["status"] == "complete"
        assert report["clauses"]
        assert all(clause.startswith("STAGE-") for clause in report["clauses"])
        assert verdicts.failed == []

    def test_capture_settings_are_refused_with_the_staging_contract(self) -> None:
        """A lineage resolver or a strict fence belongs to the capture contract: refused."""
        with pytest.raises(SettingsError, match="capture contract"):
            conformance.run_conformance(
                "reference:MemoryStagingStore",
                fence="strict",
                contract="staging-v2",
            )

    def test_a_script_without_a_main_guard_judges_a_staging_store_once(
        self, tmp_path: Path
    ) -> None:
        """The staging checks' spawned stagers and fetchers leave the script's top level
        behind too: it runs once, and the file staging store passes every STAGE clause."""
        body = _fill(
            UNGUARDED,
            "reference:FileStagingStore",
            {"root": "{tmp_path}"},
            'contract="staging-v2", capabilities=["read-back"],',
        )
        report, _ = _script(tmp_path, body)
        assert (tmp_path / "runs.log").read_text() == "ran\n"
        assert report["contract"] == "staging-v2"
        assert report["run"]["status"] == "complete"
        assert set(_outcomes(report).values()) == {"passed"}
        assert {f"STAGE-{number}" for number in range(1, 12)} <= set(report["clauses"])
