"""Spawned FileTokenStore writers killed with SIGKILL lose no acked entry (tools/crash_runs.py).

The harness lives in ``crash_harness.py`` beside this file and its 200-run command in
``tools/crash_runs.py``; these tests run a few of its trials, one deterministic trial of each
way to die, and check that its verification does report the damage it is there to find.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
from pathlib import Path
from types import ModuleType

import pytest

from reference._file_log import log_name
from reference.file_store import FileTokenStore

HERE = Path(__file__).resolve().parent


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # Spawned writers import the harness by name, so its folder must be on their sys.path too.
    monkeypatch.syspath_prepend(str(HERE))
    return importlib.import_module("crash_harness")


def put_planned(harness: ModuleType, root: Path, rollout_id: str, calls: list[str]) -> None:
    async def put_all() -> None:
        store = FileTokenStore(root)
        for call in calls:
            await store.put(harness.planned_entry(rollout_id, call, 7))
        await store.close()

    asyncio.run(put_all())


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 12, 13, 14, 15])
def test_random_kills_lose_no_acked_entry(harness: ModuleType, tmp_path: Path, seed: int) -> None:
    """A seeded trial of SIGKILLed writers leaves every acked entry, once, and nothing torn."""
    result = harness.crash_run(seed, str(tmp_path / "store"))
    assert result.lost == []
    assert result.problems == []
    assert result.acked > 0
    assert result.killed_writers + result.torn_writers > 0


@pytest.mark.slow
def test_a_writer_killed_mid_record_leaves_a_tail_that_is_cut(
    harness: ModuleType, tmp_path: Path
) -> None:
    """A writer that dies after writing part of its third record leaves a torn tail, which the
    next freeze cuts off while keeping the two acked entries."""
    root = str(tmp_path / "store")
    plan = harness.WriterPlan(
        worker=0, generation=1, rollouts=("solo",), puts=10, seed=7, tear_at=3
    )
    ended = harness.run_writers(multiprocessing.get_context("spawn"), root, [plan], 7)
    assert (ended.problems, ended.torn, ended.killed) == ([], 1, 0)
    assert ended.acked == set(harness.planned_puts(plan)[:2])
    assert not (Path(root) / log_name("solo")).read_bytes().endswith(b"\n")
    assert harness.verify_store(root, 7, {"solo"}, ended.acked) == ([], [])


@pytest.mark.slow
def test_a_writer_killed_by_its_parent_keeps_what_it_acked(
    harness: ModuleType, tmp_path: Path
) -> None:
    """A writer the parent SIGKILLs right after its third ack keeps at least those three."""
    root = str(tmp_path / "store")
    plan = harness.WriterPlan(
        worker=0, generation=1, rollouts=("solo", "other"), puts=2000, seed=7, kill_after_acks=3
    )
    ended = harness.run_writers(multiprocessing.get_context("spawn"), root, [plan], 7)
    assert (ended.problems, ended.torn, ended.killed) == ([], 0, 1)
    assert 3 <= len(ended.acked) < 2001
    assert harness.verify_store(root, 7, {"solo", "other"}, ended.acked) == ([], [])


class TestVerification:
    def test_reports_an_acked_entry_that_is_missing(
        self, harness: ModuleType, tmp_path: Path
    ) -> None:
        """An acked entry that no freeze shows is reported as lost."""
        put_planned(harness, tmp_path, "r", ["a"])
        lost, problems = harness.verify_store(str(tmp_path), 7, {"r"}, {("r", "a"), ("r", "b")})
        assert (lost, problems) == (["r/b"], [])

    def test_reports_an_entry_that_differs_from_what_was_put(
        self, harness: ModuleType, tmp_path: Path
    ) -> None:
        """A stored entry whose bytes differ from the planned entry is a problem."""
        put_planned(harness, tmp_path, "r", ["a"])

        async def put_other() -> None:
            store = FileTokenStore(tmp_path)
            await store.put(harness.planned_entry("r", "b", 8))
            await store.close()

        asyncio.run(put_other())
        lost, problems = harness.verify_store(str(tmp_path), 7, {"r"}, {("r", "a")})
        assert lost == []
        assert problems == ["r/b: stored bytes differ from those put"]

    def test_reports_damage_before_the_tail(self, harness: ModuleType, tmp_path: Path) -> None:
        """A log damaged before its last line is a problem naming the store's error."""
        put_planned(harness, tmp_path, "r", ["a", "b"])
        log = tmp_path / log_name("r")
        lines = log.read_bytes().split(b"\n")
        lines[1] = lines[1][:40]
        log.write_bytes(b"\n".join(lines))
        _, problems = harness.verify_store(str(tmp_path), 7, {"r"}, {("r", "a")})
        assert len(problems) == 1
        assert problems[0].startswith("r: CorruptStoreError: ")
