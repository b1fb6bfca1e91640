"""The kit leaves nothing behind outside pytest's own temporary directories and the reports
it was asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

MEMORY = "--tokcap-sink=reference.memory_store:MemoryTokenStore"
FILE_STORE = "--tokcap-sink=reference:FileTokenStore"
SCRATCH_KWARGS = '--tokcap-sink-kwargs={"root": "{tmp_path}"}'


def run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[pytest.RunResult, Path]:
    """Run the kit with TMPDIR pointing at an empty folder; return the result and the folder."""
    tmp = pytester.mkdir("system-tmp")
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(pytester.mkdir("user-cache")))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    return result, tmp


def test_a_run_leaves_nothing_in_the_system_temp_or_the_project(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scratch, timelines and Hypothesis' files stay out of TMPDIR and the working directory."""
    result, tmp = run(
        pytester, monkeypatch, FILE_STORE, SCRATCH_KWARGS, "-k", "FREEZE-5 or PUT-2 or SPAWN-1"
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert list(tmp.iterdir()) == []
    assert not (pytester.path / ".hypothesis").exists()
    assert (pytester.path / "user-cache" / "tokcap" / "hypothesis").is_dir()


def test_collect_only_makes_no_directory(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--co with kwargs that use no '{tmp_path}' makes no scratch directory anywhere."""
    result, tmp = run(pytester, monkeypatch, MEMORY, "--co", "-q")
    assert result.ret == pytest.ExitCode.OK
    assert list(tmp.iterdir()) == []
    assert list(pytester.path.rglob("tokcap*")) == []
    assert not (pytester.path / ".hypothesis").exists()


def test_gym_dir_is_judged_in_a_folder_removed_afterwards(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config with only a dir writes no test rollout among the real captures."""
    captures = pytester.mkdir("captures")
    (captures / "real-rollout.jsonl").write_text("kept\n")
    config = pytester.makefile(
        ".yaml", gym=f"token_id_capture:\n  enabled: true\n  dir: {captures}\n"
    )
    result, _ = run(pytester, monkeypatch, f"--tokcap-config={config}", "-k", "PUT-1 or DROP-1")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert [path.name for path in captures.iterdir()] == ["real-rollout.jsonl"]
    assert (captures / "real-rollout.jsonl").read_text() == "kept\n"
