"""The CI job and script of examples/ci/ run the README's kit command and keep its reports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "examples" / "ci"
TARGET = "my_pkg.sinks:MySink"
KIT = "python -m pytest -p tokcap_pytest"


def readme_command() -> str:
    """The README's kit command for a CI job, with the placeholder target."""
    section = (ROOT / "README.md").read_text().split("## Running the kit in CI", 1)[1]
    (command,) = [line.strip() for line in section.splitlines() if line.strip().startswith(KIT)]
    assert f"--tokcap-sink={TARGET} " in command
    return command


def run_script(folder: Path, target: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the script on ``target`` in ``folder`` as a CI job does, ``python`` being this
    interpreter, with ``folder/summary.md`` as the summary file."""
    script = (CI / "run-kit.sh").read_text()
    (folder / "run-kit.sh").write_text(script.replace(TARGET, target))
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    summary = str(folder / "summary.md")
    return subprocess.run(
        ["sh", "run-kit.sh", *args],
        cwd=folder,
        env={**os.environ, "PATH": path, "TOKCAP_SUMMARY": summary},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def kit_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(KIT)]


def workflow_steps() -> list[dict[str, Any]]:
    workflow = yaml.safe_load((CI / "tokcap.yml").read_text())
    (job,) = workflow["jobs"].values()
    steps: list[dict[str, Any]] = job["steps"]
    return steps


def test_the_workflow_runs_the_readmes_command() -> None:
    """The workflow parses as YAML and its one kit step runs the README's command."""
    runs = [line for step in workflow_steps() for line in kit_lines(step.get("run", ""))]
    assert runs == [readme_command()]


def test_the_workflow_keeps_the_reports_whatever_the_outcome() -> None:
    """After the kit, the summary and upload steps run always, on the folder the kit writes."""
    steps = workflow_steps()
    kit = next(i for i, step in enumerate(steps) if kit_lines(step.get("run", "")))
    later = steps[kit + 1 :]
    summary = [step for step in later if '>> "$GITHUB_STEP_SUMMARY"' in step.get("run", "")]
    upload = [step for step in later if step.get("uses", "").startswith("actions/upload-artifact")]
    assert len(summary) == len(upload) == 1
    assert "cat tokcap-reports/report.md" in summary[0]["run"]
    assert upload[0]["with"]["path"] == "tokcap-reports/"
    assert {step["if"] for step in summary + upload} == {"always()"}


def test_the_script_runs_the_readmes_command_and_fills_the_summary(tmp_path: Path) -> None:
    """The script runs the README's command on the user's target, keeps its reports and
    appends the markdown report to the summary file."""
    script = (CI / "run-kit.sh").read_text()
    (line,) = kit_lines(script)
    assert line == f'{readme_command()} "$@" || status=$?'
    shutil.copy(ROOT / "examples" / "first_sink" / "mysink.py", tmp_path / "mysink.py")
    summary = tmp_path / "summary.md"
    summary.write_text("earlier steps\n")
    done = run_script(
        tmp_path, "mysink:SqliteSink", "-k", "PUT-1 or DROP-2", "--tokcap-fence=strict"
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    reports = tmp_path / "tokcap-reports"
    report = json.loads((reports / "report.json").read_text())
    assert {report["clauses"][c]["outcome"] for c in ("PUT-1", "DROP-2")} == {"passed"}
    assert (reports / "junit.xml").exists()
    markdown = (reports / "report.md").read_text()
    assert summary.read_text() == "earlier steps\n" + markdown


def test_the_script_fails_with_the_kits_exit_code(tmp_path: Path) -> None:
    """A run the kit refuses makes the script exit with pytest's code, the summary written."""
    done = run_script(tmp_path, "no_such_module:Sink")
    assert done.returncode == 4, done.stderr[-2000:]
    assert "interrupted" in (tmp_path / "summary.md").read_text()
