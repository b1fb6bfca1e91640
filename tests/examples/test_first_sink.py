"""The first sink of docs/first-sink.md passes the whole kit, run as the page says, also from
nothing but the wheel."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "first-sink.md"
EXAMPLE = ROOT / "examples" / "first_sink" / "mysink.py"
OPTIONAL = {"EXT-BEGIN-1", "EXT-RETIRE-1"}
"""The clauses of the extensions the first sink leaves out: skipped, never failed."""
LINEAGE = {"LINEAGE-1", "LINEAGE-2", "LINEAGE-3"}
"""The clauses of a lineage resolver, which the first sink's run names none for: not claimed."""
COST = {"COST-1", "COST-2", "COST-3"}
"""The clauses of a cost budget, which the first sink's run names none of: not claimed."""


def documented_command() -> list[str]:
    """The one command the page runs the kit with, as arguments."""
    commands = [
        line.strip() for line in DOC.read_text().splitlines() if "--tokcap-sink=mysink:" in line
    ]
    assert len(commands) == 1, commands
    return shlex.split(commands[0])


def run_documented(python: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run the page's command with ``python`` in ``folder``, which holds only ``mysink.py``."""
    command = documented_command()
    assert command[:3] == ["python", "-m", "pytest"]
    return subprocess.run(
        [python, *command[1:]],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def assert_green(done: subprocess.CompletedProcess[str], folder: Path) -> None:
    """The run passed: every clause passed but the left-out extensions, skipped, and lineage
    and cost, not claimed."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((folder / "report.json").read_text())
    outcomes = {clause: entry["outcome"] for clause, entry in report["clauses"].items()}
    assert {clause for clause, outcome in outcomes.items() if outcome != "passed"} == (
        OPTIONAL | LINEAGE | COST
    )
    assert {outcomes[clause] for clause in OPTIONAL} == {"skipped"}
    assert {outcomes[clause] for clause in LINEAGE | COST} == {"not-claimed"}
    assert report["run"]["status"] == "complete"
    assert "| PUT-2 | passed |" in (folder / "report.md").read_text()


def empty_folder_with_the_sink(tmp_path: Path) -> Path:
    folder = tmp_path / "newcomer"
    folder.mkdir()
    shutil.copy(EXAMPLE, folder / "mysink.py")
    return folder


def test_the_page_shows_the_examples_signatures() -> None:
    """Every signature the page's skeleton shows is the example's, word for word."""
    skeleton = DOC.read_text().split("```python", 1)[1].split("```", 1)[0]
    signatures = re.findall(r"^\s*(?:async )?(?:def|class) .*:$", skeleton, re.MULTILINE)
    source = EXAMPLE.read_text()
    assert len(signatures) == 7
    for signature in signatures:
        assert signature in source


def test_the_example_passes_the_whole_kit(tmp_path: Path) -> None:
    """The example store, alone in a folder, passes the kit run exactly as the page says."""
    folder = empty_folder_with_the_sink(tmp_path)
    assert_green(run_documented(sys.executable, folder), folder)


def test_the_pages_python_call_gets_the_example_green(tmp_path: Path) -> None:
    """The page's script, next to the example store, runs the kit through run_conformance
    and says the store conforms."""
    blocks = DOC.read_text().split("```python")[1:]
    (script,) = [block.split("```", 1)[0] for block in blocks if "run_conformance" in block]
    folder = empty_folder_with_the_sink(tmp_path)
    (folder / "judge.py").write_text(script)
    done = subprocess.run(
        [sys.executable, "judge.py"], cwd=folder, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "conformant"
    assert "| PUT-2 | passed |" in (folder / "report.md").read_text()


@pytest.mark.slow
def test_a_wheel_user_gets_the_example_green(tmp_path: Path) -> None:
    """Installed from its wheel alone, the kit passes the example run as the page says."""
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".*"),
    )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("tokcap-*.whl")
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=False)
    python = environment / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # tokcap's dependencies come from this interpreter's site-packages, listed after the
    # venv's own, so the install needs no network; tokcap itself is only the wheel's.
    dependencies = [
        entry for entry in sys.path if entry.endswith(("site-packages", "dist-packages"))
    ]
    (Path(purelib) / "tokcap-test-dependencies.pth").write_text("\n".join(dependencies) + "\n")
    install = ["install", "-q", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), *install],
        check=True,
        capture_output=True,
    )
    folder = empty_folder_with_the_sink(tmp_path)
    imported = subprocess.run(
        [python, "-c", "import conformance, tokcap_pytest; print(conformance.__file__)"],
        cwd=folder,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert Path(imported).is_relative_to(environment)
    assert_green(run_documented(str(python), folder), folder)
