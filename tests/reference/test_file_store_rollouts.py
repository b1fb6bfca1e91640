"""Contract semantics over a directory of logs, as blocking calls (reference._file_rollouts)."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference import _file_log, _file_rollouts
from reference._file_log import log_name, temporary_name
from reference._file_records import entry_record
from reference._file_rollouts import LogDirectory
from tokcap_spec.errors import (
    ConflictingEntryError,
    CorruptStoreError,
    RolloutFrozenError,
    RolloutRetiredError,
    StoreWriteError,
)
from tokcap_spec.records import TokenEntry


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def payload(rollout_id: str, call: str, seed: int = 0) -> bytes:
    return TokenEntry(
        rollout_id=rollout_id, model_call_id=call, prompt_token_ids=[seed], created_at=1.0
    ).to_json_bytes()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def logs(tmp_path: Path, clock: Clock) -> Iterator[LogDirectory]:
    opened = LogDirectory(str(tmp_path), clock)
    yield opened
    opened.close()


class TestPut:
    def test_a_batch_reports_each_outcome_in_order(self, logs: LogDirectory) -> None:
        """Within one batch, duplicates are no-ops and a reused call id conflicts."""
        outcomes = logs.put(
            "r",
            [
                ("a", payload("r", "a")),
                ("a", payload("r", "a")),
                ("a", payload("r", "a", seed=1)),
                ("b", payload("r", "b")),
            ],
        )
        assert outcomes[0] is None
        assert outcomes[1] is None
        assert isinstance(outcomes[2], ConflictingEntryError)
        assert outcomes[3] is None
        snapshot = logs.freeze("r")
        assert [e.model_call_id for e in snapshot.entries] == ["a", "b"]
        assert snapshot.incomplete
        assert snapshot.version == 3

    def test_a_batch_after_freeze_refuses_only_new_calls(self, logs: LogDirectory) -> None:
        """After freeze a batch refuses new calls and still accepts identical re-puts."""
        logs.put("r", [("a", payload("r", "a"))])
        logs.freeze("r")
        outcomes = logs.put("r", [("a", payload("r", "a")), ("b", payload("r", "b"))])
        assert outcomes[0] is None
        assert isinstance(outcomes[1], RolloutFrozenError)

    def test_a_batch_into_a_retired_rollout_is_refused_whole(self, logs: LogDirectory) -> None:
        """Every put of a batch into a retired rollout reports RolloutRetiredError."""
        logs.retire("r")
        outcomes = logs.put("r", [("a", payload("r", "a")), ("b", payload("r", "b"))])
        assert all(isinstance(outcome, RolloutRetiredError) for outcome in outcomes)

    def test_a_batch_with_nothing_new_writes_nothing(
        self, logs: LogDirectory, tmp_path: Path
    ) -> None:
        """A batch of identical re-puts leaves the log byte for byte as it was."""
        logs.put("r", [("a", payload("r", "a"))])
        before = (tmp_path / log_name("r")).read_bytes()
        assert logs.put("r", [("a", payload("r", "a"))]) == [None]
        assert (tmp_path / log_name("r")).read_bytes() == before


class TestSyncOutsideTheLock:
    def test_a_put_syncs_after_releasing_the_rollout_lock(
        self, logs: LogDirectory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """While a put waits for its sync, another process could lock the log and append."""
        logs.put("r", [("a", payload("r", "a"))])
        real_sync = _file_log._sync_data
        free_during_sync: list[bool] = []

        def sync(fd: int) -> None:
            other = os.open(tmp_path / log_name("r"), os.O_RDONLY)
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                free_during_sync.append(True)
            except BlockingIOError:
                free_during_sync.append(False)
            finally:
                os.close(other)
            real_sync(fd)

        monkeypatch.setattr(_file_log, "_sync_data", sync)
        logs.put("r", [("b", payload("r", "b")), ("c", payload("r", "c"))])
        assert free_during_sync == [True]

    def test_a_failed_sync_marks_nothing_once_the_rollout_is_gone(
        self, logs: LogDirectory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """If the rollout was deleted before the sync failed, no new incarnation is made."""
        logs.put("r", [("a", payload("r", "a"))])

        def sync(fd: int) -> None:
            os.unlink(tmp_path / log_name("r"))  # another process deletes the rollout
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        monkeypatch.setattr(_file_log, "_sync_data", sync)
        with pytest.raises(StoreWriteError, match="could not sync"):
            logs.put("r", [("b", payload("r", "b"))])
        assert not (tmp_path / log_name("r")).exists()


class TestOpenLogs:
    def test_more_rollouts_than_open_logs_all_stay_correct(
        self, logs: LogDirectory, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Logs closed to stay under the open-file limit reopen with their full state."""
        monkeypatch.setattr(_file_rollouts, "OPEN_LOG_LIMIT", 2)
        ids = [f"r{i}" for i in range(5)]
        for rollout_id in ids:
            logs.put(rollout_id, [("a", payload(rollout_id, "a"))])
        for rollout_id in ids:
            assert logs.put(rollout_id, [("a", payload(rollout_id, "a", seed=1))]) != [None]
        assert all(logs.freeze(rollout_id).incomplete for rollout_id in ids)
        assert len(os.listdir(f"/proc/{os.getpid()}/fd")) < 1000

    def test_close_then_use_reopens(self, logs: LogDirectory) -> None:
        """A closed directory is opened again by the next call."""
        logs.put("r", [("a", payload("r", "a"))])
        logs.close()
        assert len(logs.freeze("r").entries) == 1


class TestSweepTombstones:
    def test_only_tombstones_older_than_the_limit_go(
        self, logs: LogDirectory, clock: Clock
    ) -> None:
        """Tombstones older than the limit are removed and counted; younger ones stay."""
        logs.retire("old")
        clock.now += 100
        logs.retire("young")
        logs.put("open", [("a", payload("open", "a"))])
        clock.now += 10
        assert logs.sweep_tombstones(50) == 1
        assert logs.put("old", [("a", payload("old", "a"))]) == [None]
        assert isinstance(logs.put("young", [("a", payload("young", "a"))])[0], Exception)
        assert len(logs.freeze("open").entries) == 1

    def test_a_repeated_retire_keeps_the_first_date(self, logs: LogDirectory, clock: Clock) -> None:
        """Retiring again is a no-op: the tombstone keeps the age of the first retire."""
        logs.retire("r")
        clock.now += 100
        logs.retire("r")
        assert logs.sweep_tombstones(50) == 1

    def test_a_dropped_rollout_is_swept_too(self, logs: LogDirectory, clock: Clock) -> None:
        """The tombstone a drop leaves is dated and swept like a retire's."""
        snapshot = logs.freeze("r")
        assert logs.drop("r", snapshot.snapshot_id, snapshot.version)
        clock.now += 1
        assert logs.sweep_tombstones(0) == 1

    def test_foreign_files_and_symlinks_are_left_alone(
        self, logs: LogDirectory, tmp_path: Path, clock: Clock
    ) -> None:
        """Sweeping ignores files it did not write and never follows a symlink."""
        (tmp_path / "notes.txt").write_text("keep")
        victim = tmp_path.parent / f"{tmp_path.name}-victim"
        victim.write_text("keep")
        (tmp_path / log_name("linked")).symlink_to(victim)
        clock.now += 10
        assert logs.sweep_tombstones(0) == 0
        assert (tmp_path / "notes.txt").read_text() == "keep"
        assert victim.read_text() == "keep"

    def test_old_temporary_files_are_removed_uncounted(
        self, logs: LogDirectory, tmp_path: Path, clock: Clock
    ) -> None:
        """A temporary file left by an interrupted drop is removed once old enough."""
        leftover = tmp_path / temporary_name("r")
        leftover.write_text("x")
        os.utime(leftover, (clock.now - 100, clock.now - 100))
        assert logs.sweep_tombstones(10) == 0
        assert not leftover.exists()

    @pytest.mark.parametrize(
        "name",
        [
            ".notes.tmp",
            ".cache.1.abc.tmp",
            f".{log_name('r')}.tmp",
            ".x.abcdef.log.7.0123456789ab.tmp",
        ],
    )
    def test_temporary_names_the_store_never_makes_are_left_alone(
        self, logs: LogDirectory, tmp_path: Path, clock: Clock, name: str
    ) -> None:
        """An old dot file ending in .tmp that the store would not have named stays."""
        foreign = tmp_path / name
        foreign.write_text("keep")
        os.utime(foreign, (clock.now - 100, clock.now - 100))
        logs.sweep_tombstones(10)
        assert foreign.read_text() == "keep"

    def test_a_bad_file_is_reported_and_the_sweep_goes_on(
        self, logs: LogDirectory, tmp_path: Path, clock: Clock, reported: pytest.LogCaptureFixture
    ) -> None:
        """A damaged tombstone is named in a warning; the tombstones after it are still swept."""
        for rollout_id in ("a", "b", "c"):
            logs.retire(rollout_id)
        logs.close()
        (tmp_path / log_name("b")).write_bytes(b"not a record\n")
        clock.now += 10
        assert logs.sweep_tombstones(0) == 2
        assert log_name("b") in reported.text
        assert sorted(os.listdir(tmp_path)) == [log_name("b")]

    def test_a_hard_linked_tombstone_is_reported_and_its_other_name_kept(
        self, logs: LogDirectory, tmp_path: Path, clock: Clock, reported: pytest.LogCaptureFixture
    ) -> None:
        """A tombstone with a second link is not trusted: reported, left, and the sweep goes on."""
        logs.retire("linked")
        logs.retire("plain")
        logs.close()
        outside = tmp_path.parent / f"{tmp_path.name}-outside"
        os.link(tmp_path / log_name("linked"), outside)
        before = outside.read_bytes()
        clock.now += 10
        assert logs.sweep_tombstones(0) == 1
        assert "2 links" in reported.text
        assert outside.read_bytes() == before


@pytest.fixture
def reported(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The warnings the store reports, captured."""
    caplog.set_level(logging.WARNING, logger="reference.file_store")
    return caplog


class TestForeignRecords:
    def test_a_foreign_conflicting_entry_fails_closed(
        self, logs: LogDirectory, tmp_path: Path
    ) -> None:
        """A second entry for one call, written by another writer, marks it; the first wins."""
        logs.put("r", [("a", payload("r", "a"))])
        with (tmp_path / log_name("r")).open("ab") as handle:
            handle.write(entry_record("a", payload("r", "a", seed=9)).encode(sealed=True))
        snapshot = LogDirectory(str(tmp_path)).freeze("r")
        assert snapshot.incomplete
        assert [e.prompt_token_ids for e in snapshot.entries] == [[0]]


class TestCorruption:
    def test_a_log_of_another_rollout_is_refused(self, logs: LogDirectory, tmp_path: Path) -> None:
        """A log moved under another rollout's name raises CorruptStoreError."""
        logs.put("a", [("c", payload("a", "c"))])
        logs.close()
        os.rename(tmp_path / log_name("a"), tmp_path / log_name("b"))
        with pytest.raises(CorruptStoreError, match="belongs to rollout 'a', expected 'b'"):
            logs.freeze("b")
