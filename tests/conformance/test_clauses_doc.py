"""docs/clauses.md: rendered from the catalog and the checks, and never stale."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import clauses_doc
from conformance._registry import Check, all_checks
from conformance._violation import CLAUSES_DOC, clause_anchor
from conformance.catalog import CLAUSES, KIT, clause
from conformance.clauses_doc import main, render

REPOSITORY = Path(__file__).resolve().parents[2]


def section(text: str, clause_id: str) -> str:
    """Return the part of the doc from a clause's anchor up to the next anchor."""
    start = text.index(f'<a id="{clause_id.lower()}"></a>')
    end = text.find("<a id=", start + 1)
    return text[start : end if end != -1 else len(text)]


class TestRender:
    def test_committed_doc_is_the_current_render(self) -> None:
        """The committed docs/clauses.md equals a fresh render; regenerate it if this fails."""
        committed = (REPOSITORY / CLAUSES_DOC).read_text(encoding="utf-8")
        assert committed == render(), "run `python -m conformance.clauses_doc`"

    def test_every_clause_has_its_anchor_before_its_heading(self) -> None:
        """Each clause's heading follows the anchor failure messages link to."""
        text = render()
        for found in CLAUSES:
            fragment = clause_anchor(found.id).split("#", 1)[1]
            assert f'<a id="{fragment}"></a>\n### {found.id}: {found.title}\n' in text

    def test_anchors_are_unique(self) -> None:
        """No anchor id appears twice in the doc."""
        anchors = re.findall(r'<a id="([^"]+)"></a>', render())
        assert (
            len(anchors)
            == len(set(anchors))
            == len(CLAUSES) + len({found.family for found in CLAUSES})
        )

    def test_contents_link_every_clause(self) -> None:
        """The table of contents links to every clause's anchor."""
        contents = render().split("## Contents", 1)[1].split("<a id=", 1)[0]
        for found in CLAUSES:
            assert f"[{found.id}](#{found.anchor})" in contents

    def test_every_registered_check_is_listed_under_its_clause(self) -> None:
        """Each registered check's id and summary appear in its clause's section."""
        text = render()
        for registered in all_checks():
            if registered.clause is None:
                continue
            assert f"- `{registered.id}`: {registered.summary}\n" in section(
                text, registered.clause
            )

    def test_check_with_no_primary_clause_is_listed_under_every_clause_it_covers(self) -> None:
        """A check judging many clauses alike is listed, by its slug, under each of them."""
        text = render()
        many = [registered for registered in all_checks() if registered.clause is None]
        assert [registered.id for registered in many] == ["model-based", "model-based-endings"]
        for registered in many:
            line = (
                f"- `{registered.id}` (judges this clause among the {len(registered.covers)} it "
                f"covers): {registered.summary}\n"
            )
            for covered in registered.covers:
                assert line in section(text, covered), covered

    def test_clause_without_a_check_reads_not_yet_checked(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A kit clause no registered check names is marked as not yet checked."""
        remaining = [f for f in all_checks() if f.clause != "DROP-1" and "DROP-1" not in f.covers]
        monkeypatch.setattr(clauses_doc, "all_checks", lambda: remaining)
        text = render()
        assert "Not yet checked" in section(text, "DROP-1")
        assert "Not yet checked" not in section(text, "DROP-2")

    def test_covering_check_is_listed_under_the_clause_it_covers(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A check that covers further clauses is listed under each of them too."""
        first = all_checks()[0]
        model = Check("PUT-1", "model", first.function, covers=("FREEZE-2",))
        monkeypatch.setattr(clauses_doc, "all_checks", lambda: [model])
        text = render()
        assert f"`PUT-1-model` (also proves this clause): {first.summary}" in section(
            text, "FREEZE-2"
        )
        assert "Not yet checked" not in section(text, "FREEZE-2")

    def test_project_tested_clause_names_its_test_module(self) -> None:
        """A clause the kit does not check points to the project test module proving it."""
        text = render()
        for found in CLAUSES:
            if found.checked_by != KIT:
                assert f"`{found.checked_by}`" in section(text, found.id)
                assert "How the kit checks it" not in section(text, found.id)

    def test_intro_explains_the_words_and_modes(self) -> None:
        """The intro defines acked, fresh instance and rollout, the fences and capabilities."""
        intro = render().split("## Contents", 1)[0]
        for term in ("**acked**", "**fresh instance**", "**rollout**", "**strict**"):
            assert term in intro
        for term in ("**relaxed**", "`no-delete`", "`process-local`", "see:      docs/"):
            assert term in intro


class TestMain:
    def test_writes_the_render(self, tmp_path: Path) -> None:
        """Without --check, main writes the rendered doc to the output path."""
        output = tmp_path / "docs" / "clauses.md"
        assert main(["--output", str(output)]) == 0
        assert output.read_text(encoding="utf-8") == render()

    def test_check_accepts_a_current_file(self, tmp_path: Path) -> None:
        """--check exits 0 when the file equals a fresh render."""
        output = tmp_path / "clauses.md"
        output.write_text(render(), encoding="utf-8")
        assert main(["--check", "--output", str(output)]) == 0

    def test_check_rejects_a_stale_file_and_leaves_it(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--check exits 1 on a stale file, names the command to run and writes nothing."""
        output = tmp_path / "clauses.md"
        output.write_text(render().replace(clause("PUT-1").title, "Old title"), encoding="utf-8")
        before = output.read_text(encoding="utf-8")
        assert main(["--check", "--output", str(output)]) == 1
        assert "python -m conformance.clauses_doc" in capsys.readouterr().err
        assert output.read_text(encoding="utf-8") == before

    def test_check_rejects_a_missing_file(self, tmp_path: Path) -> None:
        """--check exits 1 when there is no file at all."""
        assert main(["--check", "--output", str(tmp_path / "absent.md")]) == 1

    def test_runs_as_a_module(self, tmp_path: Path) -> None:
        """`python -m conformance.clauses_doc` writes the doc and its --check then passes."""
        output = tmp_path / "clauses.md"
        command = [sys.executable, "-m", "conformance.clauses_doc", "--output", str(output)]
        subprocess.run(command, check=True, cwd=REPOSITORY)
        checked = subprocess.run([*command, "--check"], cwd=REPOSITORY)
        assert (checked.returncode, output.read_text(encoding="utf-8")) == (0, render())
