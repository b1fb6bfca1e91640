"""FileTokenStore when the disk fails: ENOSPC and EIO injected at the store's file layer.

Faults are injected by replacing the ``os`` functions that ``reference._file_log`` calls (and its
``_sync_data``, which is bound to ``os.fdatasync`` when the module is imported). The store's
writer thread runs in this process, so it sees the replacements; ``monkeypatch`` restores them.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest

from reference import _file_log
from reference._file_log import log_name
from reference.file_store import FileTokenStore
from tokcap_spec.errors import StoreWriteError
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry

T = TypeVar("T")

FILE_LAYER_OS: ModuleType = vars(_file_log)["os"]
"""The ``os`` module as the store's file layer sees it: faults are injected into it."""

ERRNOS = [pytest.param(errno.ENOSPC, id="ENOSPC"), pytest.param(errno.EIO, id="EIO")]


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def entry(rollout_id: str, call: str, *, tokens: int = 3) -> TokenEntry:
    return TokenEntry(
        rollout_id=rollout_id,
        model_call_id=call,
        model="m",
        prompt_token_ids=list(range(tokens)),
        generation_token_ids=[7, 8],
        generation_log_probs=[float("-inf"), -0.25],
        created_at=2.5,
    )


def payloads(snapshot: TokenCaptureSnapshot) -> dict[str, bytes]:
    return {e.model_call_id: e.to_json_bytes() for e in snapshot.entries}


def fresh_freeze(root: Path, rollout_id: str) -> TokenCaptureSnapshot:
    async def freeze() -> TokenCaptureSnapshot:
        other = FileTokenStore(root)
        try:
            return await other.freeze(rollout_id)
        finally:
            await other.close()

    return run(freeze())


class Disk:
    """Switches faults on and off at the store's file layer."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self.real_pwrite = os.pwrite
        self.real_sync = _file_log._sync_data
        self.real_fsync = os.fsync
        self.real_open = os.open
        self.calls: list[str] = []

    def fail_writes(self, code: int, *, larger_than: int = -1, after_bytes: int = 0) -> None:
        """Make appends larger than ``larger_than`` bytes fail with ``code``.

        With ``after_bytes`` the first failing append writes that many bytes before failing,
        as a disk that fills up in the middle of a write does.
        """
        budget = after_bytes

        def pwrite(fd: int, data: bytes | memoryview, offset: int) -> int:
            nonlocal budget
            self.calls.append("pwrite")
            if len(data) <= larger_than:
                return self.real_pwrite(fd, data, offset)
            if budget > 0:
                written = self.real_pwrite(fd, bytes(data[:budget]), offset)
                budget = 0
                return written
            raise OSError(code, os.strerror(code))

        self._monkeypatch.setattr(FILE_LAYER_OS, "pwrite", pwrite)

    def fail_data_syncs(self, code: int, *, times: int | None = None) -> None:
        """Make data syncs of appended logs fail with ``code``: all, or the next ``times``."""
        left = times

        def sync(fd: int) -> None:
            nonlocal left
            self.calls.append("sync")
            if left is not None:
                if left <= 0:
                    self.real_sync(fd)
                    return
                left -= 1
            raise OSError(code, os.strerror(code))

        self._monkeypatch.setattr(_file_log, "_sync_data", sync)

    def fail_fsyncs(self, code: int) -> None:
        """Make every ``os.fsync`` (directories, tombstones, repaired tails) fail with ``code``."""

        def fsync(fd: int) -> None:
            self.calls.append("fsync")
            raise OSError(code, os.strerror(code))

        self._monkeypatch.setattr(FILE_LAYER_OS, "fsync", fsync)

    def fail_creates(self, code: int) -> None:
        """Make every ``os.open`` that would create a file fail with ``code``."""

        def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if flags & os.O_CREAT:
                self.calls.append("create")
                raise OSError(code, os.strerror(code))
            return self.real_open(path, flags, *args, **kwargs)

        self._monkeypatch.setattr(FILE_LAYER_OS, "open", open_)

    def heal(self) -> None:
        """Undo every fault: the disk works again."""
        self._monkeypatch.setattr(FILE_LAYER_OS, "pwrite", self.real_pwrite)
        self._monkeypatch.setattr(_file_log, "_sync_data", self.real_sync)
        self._monkeypatch.setattr(FILE_LAYER_OS, "fsync", self.real_fsync)
        self._monkeypatch.setattr(FILE_LAYER_OS, "open", self.real_open)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    return Disk(monkeypatch)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: Path) -> Iterator[FileTokenStore]:
    opened = FileTokenStore(root)
    yield opened
    run(opened.close())


def log_bytes(root: Path, rollout_id: str) -> bytes:
    return (root / log_name(rollout_id)).read_bytes()


@pytest.mark.parametrize("code", ERRNOS)
class TestPut:
    def test_a_failed_write_raises_store_write_error(
        self, store: FileTokenStore, root: Path, disk: Disk, code: int
    ) -> None:
        """A put whose append fails raises StoreWriteError with its errno and stores nothing."""
        run(store.put(entry("r", "a")))
        before = log_bytes(root, "r")
        disk.fail_writes(code)
        with pytest.raises(StoreWriteError) as raised:
            run(store.put(entry("r", "b")))
        assert raised.value.errno == code
        assert "pwrite" in disk.calls
        assert log_bytes(root, "r") == before
        disk.heal()
        assert payloads(fresh_freeze(root, "r")) == {"a": entry("r", "a").to_json_bytes()}

    def test_a_failed_sync_raises_and_marks_the_rollout_incomplete(
        self, store: FileTokenStore, root: Path, disk: Disk, code: int
    ) -> None:
        """A put whose sync fails raises StoreWriteError, and the rollout fails closed.

        The record may stay (other processes may have read it, so it is never cut off), but
        whether it is durable is unknown: a mark makes every later freeze incomplete and moves
        the version, so a snapshot taken before cannot be dropped as if clean.
        """
        run(store.put(entry("r", "a")))
        disk.fail_data_syncs(code, times=1)
        with pytest.raises(StoreWriteError, match="could not sync") as raised:
            run(store.put(entry("r", "b")))
        assert raised.value.errno == code
        snapshot = fresh_freeze(root, "r")
        assert snapshot.incomplete
        assert payloads(snapshot) == {call: entry("r", call).to_json_bytes() for call in ("a", "b")}
        assert snapshot.version == 3

    def test_a_failed_sync_whose_mark_also_fails_still_raises(
        self, store: FileTokenStore, root: Path, disk: Disk, code: int
    ) -> None:
        """When no sync works, the put raises and what was acked before is untouched."""
        run(store.put(entry("r", "a")))
        disk.fail_data_syncs(code)
        with pytest.raises(StoreWriteError):
            run(store.put(entry("r", "b")))
        with pytest.raises(StoreWriteError):
            run(store.mark_incomplete("r", "b"))
        disk.heal()
        snapshot = fresh_freeze(root, "r")
        assert payloads(snapshot)["a"] == entry("r", "a").to_json_bytes()
        run(store.mark_incomplete("r", "b"))
        assert fresh_freeze(root, "r").incomplete

    def test_a_write_cut_short_leaves_no_torn_record(
        self, store: FileTokenStore, root: Path, disk: Disk, code: int
    ) -> None:
        """An append the disk cuts short in the middle leaves the log exactly as acked before."""
        run(store.put(entry("r", "a")))
        before = log_bytes(root, "r")
        disk.fail_writes(code, after_bytes=20)
        with pytest.raises(StoreWriteError):
            run(store.put(entry("r", "b", tokens=500)))
        assert log_bytes(root, "r") == before
        disk.heal()
        run(store.put(entry("r", "c")))
        assert sorted(payloads(fresh_freeze(root, "r"))) == ["a", "c"]

    def test_queued_puts_that_fail_together_each_raise(
        self, store: FileTokenStore, root: Path, disk: Disk, code: int
    ) -> None:
        """Puts written as one batch all raise StoreWriteError when the batch cannot be written."""
        run(store.put(entry("r", "a")))
        disk.fail_writes(code)

        async def many() -> list[BaseException | None]:
            calls = [store.put(entry("r", f"b{i}")) for i in range(5)]
            return list(await asyncio.gather(*calls, return_exceptions=True))

        outcomes = run(many())
        assert all(isinstance(outcome, StoreWriteError) for outcome in outcomes), outcomes
        disk.heal()
        assert sorted(payloads(fresh_freeze(root, "r"))) == ["a"]

    def test_the_store_works_again_once_the_disk_does(
        self, store: FileTokenStore, root: Path, disk: Disk, code: int
    ) -> None:
        """After failed puts the same instance puts, freezes and drops normally."""
        run(store.put(entry("r", "a")))
        disk.fail_writes(code)
        for call in ("b", "c"):
            with pytest.raises(StoreWriteError):
                run(store.put(entry("r", call)))
        disk.heal()
        run(store.put(entry("r", "b")))
        snapshot = run(store.freeze("r"))
        assert sorted(payloads(snapshot)) == ["a", "b"]
        assert not snapshot.incomplete
        assert snapshot.version == 2
        assert run(store.drop("r", snapshot_id=snapshot.snapshot_id, version=snapshot.version))

    def test_a_first_put_whose_directory_sync_fails_raises(
        self, store: FileTokenStore, root: Path, disk: Disk, code: int
    ) -> None:
        """A new rollout whose directory entry cannot be synced acks nothing, then recovers."""
        disk.fail_fsyncs(code)
        with pytest.raises(StoreWriteError):
            run(store.put(entry("new", "a")))
        assert "fsync" in disk.calls
        disk.heal()
        assert fresh_freeze(root, "new").entries == ()
        run(store.put(entry("new2", "a")))
        assert sorted(payloads(fresh_freeze(root, "new2"))) == ["a"]


@pytest.mark.parametrize("code", ERRNOS)
class TestReadableWhileFull:
    def test_a_frozen_rollout_freezes_again_on_a_failing_disk(
        self, store: FileTokenStore, root: Path, disk: Disk, code: int
    ) -> None:
        """Freezing an already frozen rollout needs no write, so it works while writes fail."""
        run(store.put(entry("r", "a")))
        first = run(store.freeze("r"))
        disk.fail_writes(code)
        disk.fail_data_syncs(code)
        again = fresh_freeze(root, "r")
        assert (again.snapshot_id, again.version) == (first.snapshot_id, first.version)
        assert payloads(again) == payloads(first)

    def test_a_freeze_that_cannot_write_its_fence_raises(
        self, store: FileTokenStore, root: Path, disk: Disk, code: int
    ) -> None:
        """A freeze whose fence cannot be written raises StoreWriteError instead of an unfenced
        snapshot, and the rollout freezes with its entries once the disk works."""
        run(store.put(entry("r", "a")))
        disk.fail_writes(code)
        with pytest.raises(StoreWriteError):
            run(store.freeze("r"))
        disk.heal()
        assert sorted(payloads(fresh_freeze(root, "r"))) == ["a"]

    def test_a_drop_that_cannot_write_its_tombstone_destroys_nothing(
        self, store: FileTokenStore, root: Path, disk: Disk, code: int
    ) -> None:
        """A drop whose tombstone cannot be synced raises, leaves no temporary file, and the same
        snapshot still drops once the disk works."""
        run(store.put(entry("r", "a")))
        snapshot = run(store.freeze("r"))
        disk.fail_fsyncs(code)
        with pytest.raises(StoreWriteError):
            run(store.drop("r", snapshot_id=snapshot.snapshot_id, version=snapshot.version))
        disk.heal()
        assert not [name for name in os.listdir(root) if name.endswith(".tmp")]
        again = fresh_freeze(root, "r")
        assert (again.snapshot_id, payloads(again)) == (snapshot.snapshot_id, payloads(snapshot))
        assert run(store.drop("r", snapshot_id=snapshot.snapshot_id, version=snapshot.version))


@pytest.mark.parametrize("code", ERRNOS)
class TestMarkIncomplete:
    def test_records_the_loss_when_only_the_large_write_fails(
        self, store: FileTokenStore, root: Path, disk: Disk, code: int
    ) -> None:
        """When a large entry cannot be written, a small mark still is, and freezes say so."""
        run(store.put(entry("r", "a")))
        disk.fail_writes(code, larger_than=1024)
        with pytest.raises(StoreWriteError):
            run(store.put(entry("r", "big", tokens=2000)))
        run(store.mark_incomplete("r", "big"))
        snapshot = fresh_freeze(root, "r")
        assert snapshot.incomplete
        assert sorted(payloads(snapshot)) == ["a"]

    def test_a_mark_that_cannot_be_written_raises(
        self, store: FileTokenStore, root: Path, disk: Disk, code: int
    ) -> None:
        """A mark whose append fails raises StoreWriteError rather than returning as if durable."""
        run(store.put(entry("r", "a")))
        disk.fail_writes(code)
        with pytest.raises(StoreWriteError):
            run(store.mark_incomplete("r", "lost"))
        disk.heal()
        assert not fresh_freeze(root, "r").incomplete

    def test_a_mark_that_cannot_be_synced_raises(
        self, store: FileTokenStore, root: Path, disk: Disk, code: int
    ) -> None:
        """A mark whose data sync fails raises StoreWriteError; retried later, it holds."""
        run(store.put(entry("r", "a")))
        disk.fail_data_syncs(code)
        with pytest.raises(StoreWriteError):
            run(store.mark_incomplete("r", "lost"))
        disk.heal()
        run(store.mark_incomplete("r", "lost"))
        snapshot = fresh_freeze(root, "r")
        assert snapshot.incomplete
        assert sorted(payloads(snapshot)) == ["a"]


@pytest.mark.parametrize("code", ERRNOS)
class TestEveryWriteFailureIsTyped:
    def test_a_torn_tail_whose_repair_cannot_sync_raises_store_write_error(
        self, store: FileTokenStore, root: Path, disk: Disk, code: int
    ) -> None:
        """Cutting a crashed writer's torn tail when the sync fails raises StoreWriteError."""
        run(store.put(entry("r", "a")))
        with (root / log_name("r")).open("ab") as handle:
            handle.write(b'{"kind":"entry","call":"torn"')
        disk.fail_fsyncs(code)
        with pytest.raises(StoreWriteError):
            run(FileTokenStore(root).put(entry("r", "b")))

    def test_a_log_that_cannot_be_created_raises_store_write_error(
        self, store: FileTokenStore, disk: Disk, code: int
    ) -> None:
        """A put to a new rollout whose log file cannot be created raises StoreWriteError."""
        disk.fail_creates(code)
        with pytest.raises(StoreWriteError):
            run(store.put(entry("new", "a")))


def failing(code: int, calls: list[str], name: str) -> Callable[..., Any]:
    """Return a stand-in for an ``os`` function that records its call and fails with ``code``."""

    def fail(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        raise OSError(code, os.strerror(code))

    return fail


@pytest.mark.parametrize("code", ERRNOS)
class TestEveryOtherDiskFailureIsTyped:
    def test_a_frozen_rollout_that_cannot_be_read_raises_naming_the_file(
        self, store: FileTokenStore, root: Path, monkeypatch: pytest.MonkeyPatch, code: int
    ) -> None:
        """Re-freezing a frozen rollout whose log cannot be read raises StoreWriteError."""
        run(store.put(entry("r", "a")))
        run(store.freeze("r"))
        calls: list[str] = []
        monkeypatch.setattr(FILE_LAYER_OS, "pread", failing(code, calls, "pread"))
        for freeze in (lambda: run(store.freeze("r")), lambda: fresh_freeze(root, "r")):
            with pytest.raises(
                StoreWriteError, match=rf"{log_name('r')}: could not read"
            ) as raised:
                freeze()
            assert raised.value.errno == code
        assert calls

    def test_a_log_that_cannot_be_locked_raises_naming_the_file(
        self, store: FileTokenStore, monkeypatch: pytest.MonkeyPatch, code: int
    ) -> None:
        """A lock the kernel refuses (not merely busy) raises StoreWriteError naming the log."""
        calls: list[str] = []
        monkeypatch.setattr(vars(_file_log)["fcntl"], "flock", failing(code, calls, "flock"))
        with pytest.raises(StoreWriteError, match=rf"{log_name('r')}: could not lock"):
            run(store.put(entry("r", "a")))
        assert calls

    def test_a_log_that_cannot_be_statted_raises_naming_the_file(
        self, store: FileTokenStore, monkeypatch: pytest.MonkeyPatch, code: int
    ) -> None:
        """A failing stat of the log's name raises StoreWriteError naming the log."""
        run(store.put(entry("r", "a")))
        calls: list[str] = []
        monkeypatch.setattr(FILE_LAYER_OS, "stat", failing(code, calls, "stat"))
        with pytest.raises(StoreWriteError, match=rf"{log_name('r')}: could not stat"):
            run(store.freeze("r"))
        assert calls

    def test_a_directory_that_cannot_be_opened_raises_naming_it(
        self, root: Path, monkeypatch: pytest.MonkeyPatch, code: int
    ) -> None:
        """A store whose directory cannot be opened raises StoreWriteError from every method."""
        store = FileTokenStore(root)
        real_open = os.open

        def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if flags & os.O_DIRECTORY:
                raise OSError(code, os.strerror(code))
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(FILE_LAYER_OS, "open", open_)
        for call in (store.freeze("r"), store.sweep_tombstones(0), store.retire(["r"])):
            with pytest.raises(StoreWriteError, match="could not open the store's directory"):
                run(call)
        run(store.close())

    def test_a_directory_that_cannot_be_listed_raises_naming_it(
        self, store: FileTokenStore, root: Path, monkeypatch: pytest.MonkeyPatch, code: int
    ) -> None:
        """A sweep that cannot list the directory raises StoreWriteError naming it."""
        run(store.retire(["r"]))
        calls: list[str] = []
        monkeypatch.setattr(FILE_LAYER_OS, "listdir", failing(code, calls, "listdir"))
        with pytest.raises(StoreWriteError, match=f"{root}: could not list"):
            run(store.sweep_tombstones(0))
        assert calls

    def test_a_root_that_cannot_be_created_raises_naming_it(
        self, tmp_path: Path, code: int, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Construction that cannot create the directory raises StoreWriteError naming it."""
        monkeypatch.setattr(os, "makedirs", failing(code, [], "makedirs"))
        with pytest.raises(StoreWriteError, match="could not create the store's directory"):
            FileTokenStore(tmp_path / "new")


def test_faults_reach_the_writer_thread(
    store: FileTokenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's data syncs go through the injected ``_sync_data``, off the caller's thread."""
    seen: list[str] = []
    real: Callable[[int], None] = _file_log._sync_data

    def record(fd: int) -> None:
        seen.append(threading.current_thread().name)
        real(fd)

    monkeypatch.setattr(_file_log, "_sync_data", record)
    run(store.put(entry("r", "a")))
    assert seen
    assert threading.current_thread().name not in seen
