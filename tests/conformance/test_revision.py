"""The contract revision: locked beside the catalog, equal to SPEC_REVISION, and only ever added."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import tokcap_spec
from conformance import revision
from conformance.catalog import CLAUSES, Clause, clause
from conformance.revision import LOCK, WRITE_COMMAND, RevisionError, digest, drift, record

REPOSITORY = Path(__file__).resolve().parents[2]
NEWEST = tokcap_spec.SPEC_REVISION
"""The newest recorded revision, which the catalog is."""
NEXT = revision._next(NEWEST)
"""The revision a change of the catalog would be recorded as."""


@pytest.fixture
def lock(tmp_path: Path) -> Path:
    copy = tmp_path / "contract.lock.json"
    shutil.copyfile(LOCK, copy)
    return copy


@pytest.fixture
def spec_init(tmp_path: Path) -> Path:
    copy = tmp_path / "__init__.py"
    shutil.copyfile(tokcap_spec.__file__, copy)
    return copy


def changed_put_1() -> list[Clause]:
    found = clause("PUT-1")
    edited = replace(found, promise=found.promise.replace("stored", "kept"))
    return [edited if each is found else each for each in CLAUSES]


class TestTheLock:
    def test_the_catalog_is_the_newest_revision(self) -> None:
        """No promise, clause or order changed since the newest locked revision."""
        assert drift() == [], revision.advice()

    def test_spec_revision_is_the_newest_revision(self) -> None:
        """tokcap_spec.SPEC_REVISION names the newest revision the lock records."""
        assert revision.latest() == tokcap_spec.SPEC_REVISION, (
            f"set SPEC_REVISION in tokcap_spec/__init__.py to {revision.latest()}, or record "
            f"the revision with `{WRITE_COMMAND} {tokcap_spec.SPEC_REVISION}`"
        )

    def test_every_revision_locks_unique_ids_with_short_digests(self) -> None:
        """Each revision lists each clause id once with a 16-hex-digit digest."""
        data = json.loads(LOCK.read_text(encoding="utf-8"))
        assert data["lock_format"] == revision.LOCK_FORMAT
        for entry in data["revisions"]:
            ids = [each for each, _ in entry["clauses"]]
            assert len(ids) == len(set(ids)), entry["revision"]
            for _, sha in entry["clauses"]:
                assert len(sha) == 16
                int(sha, 16)

    def test_the_lock_is_shipped_with_the_package(self) -> None:
        """pyproject lists the lock as package data of conformance, so installs can read it."""
        import tomllib

        project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text(encoding="utf-8"))
        data = project["tool"]["setuptools"]["package-data"]
        assert LOCK.name in data["conformance"]


class TestDigest:
    def test_wrapping_and_spacing_keep_the_digest(self) -> None:
        """Only the words of a promise count, not how its lines break."""
        assert digest("a  put\n returns. ") == digest("a put returns.")

    def test_a_changed_word_changes_the_digest(self) -> None:
        """Any change of wording is a change of the promise."""
        assert digest("a put returns.") != digest("a put returned.")


class TestDrift:
    def test_a_changed_promise_is_named_with_what_to_do(self) -> None:
        """Changing PUT-1's promise is reported, and the advice names the command to run."""
        assert drift(changed_put_1()) == [f"the promise of PUT-1 changed since {NEWEST}"]
        advice = revision.advice()
        assert f"`{WRITE_COMMAND} <REVISION>`" in advice
        assert f"a revision after {NEWEST} (such as {NEXT})" in advice
        assert "tokcap_spec/__init__.py" in advice
        assert "CHANGELOG.md" in advice

    def test_added_removed_and_reordered_clauses_are_named(self) -> None:
        """A new clause, a removed one and a new order each read as a change."""
        extra = replace(clause("PUT-6"), id="PUT-7")
        assert drift([*CLAUSES, extra]) == [f"PUT-7 is new since {NEWEST}"]
        assert drift(CLAUSES[1:]) == [f"REC-1 was removed since {NEWEST}"]
        swapped = [CLAUSES[1], CLAUSES[0], *CLAUSES[2:]]
        assert drift(swapped) == [f"the clauses are in another order than in {NEWEST}"]

    def test_check_exits_one_naming_the_change(
        self, lock: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """--check fails on a drifted catalog and says what to run."""
        monkeypatch.setattr(revision, "CLAUSES", changed_put_1())
        assert revision.main(["--check", "--lock", str(lock)]) == 1
        err = capsys.readouterr().err
        assert f"the promise of PUT-1 changed since {NEWEST}" in err
        assert WRITE_COMMAND in err

    def test_check_passes_as_a_module(self) -> None:
        """`python -m conformance.revision --check` passes on the committed catalog."""
        done = subprocess.run(
            [sys.executable, "-m", "conformance.revision", "--check"],
            cwd=REPOSITORY,
            capture_output=True,
            text=True,
        )
        assert (done.returncode, done.stdout.strip()) == (
            0,
            f"the clause catalog is contract revision {revision.latest()}",
        )


class TestRecord:
    def test_records_a_new_revision_and_sets_spec_revision(
        self, lock: Path, spec_init: Path
    ) -> None:
        """A changed catalog is recorded as a new revision, and SPEC_REVISION follows it."""
        changed = changed_put_1()
        assert record(NEXT, changed, lock, spec_init) is True
        locked = revision.read(lock)
        assert list(locked) == [*revision.read(LOCK), NEXT]
        assert locked[NEWEST] == revision.read(LOCK)[NEWEST]
        assert drift(changed, lock) == []
        assert f'SPEC_REVISION = "{NEXT}"' in spec_init.read_text(encoding="utf-8")

    def test_refuses_to_rewrite_an_existing_revision(self, lock: Path, spec_init: Path) -> None:
        """An existing revision is never recorded with other promises; nothing is written."""
        before = lock.read_text(encoding="utf-8")
        with pytest.raises(RevisionError, match="never rewritten"):
            record(NEWEST, changed_put_1(), lock, spec_init)
        assert lock.read_text(encoding="utf-8") == before

    def test_an_existing_revision_with_its_own_promises_is_already_there(self, lock: Path) -> None:
        """Recording the newest revision again, unchanged, writes nothing."""
        assert record(NEWEST, CLAUSES, lock) is False

    def test_refuses_a_revision_before_the_newest(self, lock: Path) -> None:
        """A new revision must come after the newest one."""
        with pytest.raises(RevisionError, match=f"not after the newest one, {re.escape(NEWEST)}"):
            record("2026.10", changed_put_1(), lock)

    def test_refuses_a_revision_that_changes_nothing(self, lock: Path) -> None:
        """A revision equal to the newest one records nothing new."""
        with pytest.raises(RevisionError, match="nothing to record"):
            record(NEXT, CLAUSES, lock)

    def test_write_refuses_with_exit_one(
        self, lock: Path, spec_init: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--write of an unchanged catalog under a new name exits 1 saying why."""
        argv = ["--write", NEXT, "--lock", str(lock), "--spec-init", str(spec_init)]
        assert revision.main(argv) == 1
        assert f"refused: the catalog is revision {NEWEST} exactly" in capsys.readouterr().err
