"""A failure carries its clause's promise, and the installed kit prints any clause itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conformance._violation import READ_COMMAND, ClauseViolation
from conformance.catalog import CLAUSES, clause
from conformance.clauses import main, section
from conformance.clauses_doc import render

REPOSITORY = Path(__file__).resolve().parents[2]


class TestFailureText:
    def test_every_clause_failure_states_its_title_and_promise(self) -> None:
        """The message of a violation of any clause carries the catalog's title and promise."""
        for found in CLAUSES:
            text = str(ClauseViolation(found.id, expected="e", observed="o", hint="h"))
            assert f"\n  promise:  {found.title}: {found.promise}\n" in text, found.id

    def test_names_the_doc_and_the_command_that_prints_the_clause(self) -> None:
        """The last lines link the doc and name the command for an installed kit."""
        text = str(ClauseViolation("PUT-1", expected="e", observed="o", hint="h"))
        assert text.splitlines()[-2:] == [
            "  see:      docs/clauses.md#put-1",
            f"  read:     {READ_COMMAND} PUT-1",
        ]

    def test_an_id_the_catalog_does_not_hold_has_no_promise_line(self) -> None:
        """A violation of an id outside the catalog still reads, without a promise."""
        assert "promise:" not in str(ClauseViolation("X-1", expected="e", observed="o", hint="h"))


class TestReadingAClause:
    def test_prints_the_clauses_section_of_the_doc(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An id, in any letter case, prints the clause's section exactly as the doc has it."""
        assert main(["put-1"]) == 0
        printed = capsys.readouterr().out
        assert printed == section("PUT-1") + "\n"
        assert section("PUT-1") in render()
        assert clause("PUT-1").promise in printed

    def test_lists_every_clause_without_an_id(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Without an id, every clause id and title is listed in catalog order."""
        assert main([]) == 0
        assert capsys.readouterr().out.splitlines() == [f"{c.id}: {c.title}" for c in CLAUSES]

    def test_all_prints_the_whole_doc(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--all prints the document docs/clauses.md holds."""
        assert main(["--all"]) == 0
        assert capsys.readouterr().out == render()

    def test_an_unknown_id_exits_two_suggesting_the_real_one(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An unknown id exits 2 and names close ids."""
        assert main(["PUT-99"]) == 2
        assert "PUT-99" in capsys.readouterr().err

    @pytest.mark.parametrize(
        "name",
        [
            "DROP-2-stale-version",
            "test_drop[DROP-2-stale-version]",
            "test_contract.py::test_drop[DROP-2-stale-version]",
            "drop-2",
        ],
    )
    def test_a_check_or_test_id_prints_its_clause(
        self, name: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A check id or test id, as a failure prints it, prints the section of its clause."""
        assert main([name]) == 0
        assert capsys.readouterr().out == section("DROP-2") + "\n"

    def test_a_family_prints_each_of_its_clauses(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A family name prints the section of every clause of the family, in catalog order."""
        assert main(["DROP"]) == 0
        drops = [found.id for found in CLAUSES if found.family == "DROP"]
        assert len(drops) == 5
        assert capsys.readouterr().out == "\n\n".join(map(section, drops)) + "\n"

    def test_a_check_of_many_clauses_prints_those_it_covers(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The test id of a check with no clause of its own prints each clause it covers."""
        from conformance._registry import checks_by_id

        assert main(["test_model[model-based]"]) == 0
        covered = set(checks_by_id()["model-based"].judges)
        printed = capsys.readouterr().out
        assert covered
        assert {found.id for found in CLAUSES if section(found.id) in printed} == covered

    def test_a_refusal_lists_the_known_names_and_needs_no_checkout(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An unknown name lists every clause id and family, and the forms a name may take."""
        assert main(["DORP-2"]) == 2
        refusal = capsys.readouterr().err
        assert "did you mean DROP-2" in refusal
        for found in CLAUSES:
            assert found.id in refusal
        assert "families: REC, SHAPE" in refusal
        assert "test_drop[DROP-2-stale-version]" in refusal
        assert "docs/" not in refusal


@pytest.mark.slow
def test_the_wheel_ships_the_clause_reader_and_the_lock(tmp_path: Path) -> None:
    """A wheel built from the project holds the clause reader and the lock, and the reader runs."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "tokcap_pytest.py"):
        shutil.copy2(REPOSITORY / name, source / name)
    for package in ("tokcap_spec", "reference", "conformance"):
        shutil.copytree(
            REPOSITORY / package,
            source / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    built = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(built), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = built.glob("tokcap-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"conformance/clauses.py", "conformance/contract.lock.json"} <= names
    installed = tmp_path / "installed"
    zipfile.ZipFile(wheel).extractall(installed)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    printed = subprocess.run(
        [sys.executable, "-m", "conformance.clauses", "DROP-2"],
        cwd=elsewhere,
        env={**os.environ, "PYTHONPATH": str(installed)},
        check=True,
        capture_output=True,
        text=True,
    )
    assert printed.stdout.rstrip("\n") == section("DROP-2").rstrip("\n")
