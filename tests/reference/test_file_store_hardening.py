"""FileTokenStore in a hostile directory and beside slow work: links, modes, locks, freezes."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from reference import _file_log
from reference import _file_writer as writer
from reference._file_log import log_name
from reference._file_rollouts import LogDirectory
from reference.file_store import FileTokenStore, RolloutLockTimeoutError
from tokcap_spec.errors import CorruptStoreError, StoreWriteError
from tokcap_spec.records import TokenEntry

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def entry(rollout_id: str, call: str) -> TokenEntry:
    return TokenEntry(
        rollout_id=rollout_id,
        model_call_id=call,
        model="m",
        prompt_token_ids=[1, 2, 3],
        generation_token_ids=[4, 5],
        generation_log_probs=[float("-inf"), -0.0],
        created_at=1.5,
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Where the store lives; not created yet."""
    return tmp_path / "store"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileTokenStore]:
    """A store in the directory ``root`` names."""
    opened = FileTokenStore(tmp_path / "store")
    yield opened
    run(opened.close())


class TestHardLinks:
    def test_a_hard_link_made_after_the_log_was_opened_is_refused(
        self, store: FileTokenStore, root: Path, tmp_path: Path
    ) -> None:
        """A log that gains a second name while the store holds it open is no longer written."""
        run(store.put(entry("r", "a")))
        log = root / log_name("r")
        before = log.read_bytes()
        os.link(log, tmp_path / "snapshot-of-the-log")
        with pytest.raises(CorruptStoreError, match="2 links"):
            run(store.put(entry("r", "b")))
        assert log.read_bytes() == before

    def test_a_hard_linked_tombstone_is_refused(
        self, store: FileTokenStore, root: Path, tmp_path: Path
    ) -> None:
        """A tombstone with a second name is refused instead of read as a fence or removed."""
        run(store.retire(["r"]))
        os.link(root / log_name("r"), tmp_path / "second-name")
        with pytest.raises(CorruptStoreError, match="2 links"):
            run(store.delete(["r"]))
        assert (root / log_name("r")).exists()


class TestForeignFiles:
    @pytest.mark.parametrize(
        "content",
        [b"precious", b"precious first line\nprecious unfinished tail", b"{}\nnot a record"],
    )
    def test_a_file_the_store_did_not_write_is_left_as_it_is(
        self, store: FileTokenStore, root: Path, content: bytes
    ) -> None:
        """A single-link file at a log name that is not a log raises and keeps every byte."""
        root.mkdir(exist_ok=True)
        planted = root / log_name("r")
        planted.write_bytes(content)
        with pytest.raises(CorruptStoreError):
            run(store.put(entry("r", "c")))
        assert planted.read_bytes() == content

    def test_a_torn_first_header_is_still_cut(self, store: FileTokenStore, root: Path) -> None:
        """A log whose very first write was torn (a prefix of a header) is repaired as before."""
        root.mkdir(exist_ok=True)
        (root / log_name("r")).write_bytes(b'{"epoch":"0a1b')
        run(store.put(entry("r", "c")))
        assert [e.model_call_id for e in run(store.freeze("r")).entries] == ["c"]


class TestPermissions:
    def test_a_new_root_and_its_files_are_private_by_default(
        self, root: Path, umask: Callable[[int], None]
    ) -> None:
        """With a permissive umask the root is still 0700 and every file 0600."""
        umask(0o000)
        store = FileTokenStore(root)
        run(store.put(entry("r", "c")))
        run(store.retire(["gone"]))
        run(store.close())
        assert stat.S_IMODE(root.stat().st_mode) == 0o700
        assert {stat.S_IMODE(p.stat().st_mode) for p in root.iterdir()} == {0o600}

    @pytest.mark.parametrize("mode", [0o660, "0660", "0o660"])
    def test_a_shared_mode_opens_files_and_root_to_the_group(
        self, root: Path, umask: Callable[[int], None], mode: int | str
    ) -> None:
        """``mode`` sets the files' permissions and lets the group search the new root."""
        umask(0o007)
        store = FileTokenStore(root, mode=mode)
        run(store.put(entry("r", "c")))
        run(store.retire(["gone"]))
        run(store.close())
        assert stat.S_IMODE(root.stat().st_mode) == 0o770
        assert {stat.S_IMODE(p.stat().st_mode) for p in root.iterdir()} == {0o660}

    @pytest.mark.parametrize("mode", [0o644 | 0o100, 0o400, 0o1600, -1, "rw", "", True, 1.5])
    def test_refuses_a_mode_that_is_not_a_file_permission(self, root: Path, mode: object) -> None:
        """An executable, owner-unwritable or malformed mode is refused at construction."""
        with pytest.raises((TypeError, ValueError), match="mode"):
            FileTokenStore(root, mode=mode)  # type: ignore[arg-type]


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    saved = os.umask(0o022)
    os.umask(saved)
    yield os.umask
    os.umask(saved)


HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def foreign_lock() -> Iterator[Callable[[Path], subprocess.Popen[str]]]:
    """Start a process that holds ``flock`` on a file until its stdin closes."""
    holders: list[subprocess.Popen[str]] = []

    def hold(path: Path) -> subprocess.Popen[str]:
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        holders.append(holder)
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"
        return holder

    yield hold
    for holder in holders:
        holder.kill()
        holder.wait()


class TestForeignLock:
    def test_a_held_lock_times_out_naming_the_rollout_and_the_file(
        self, root: Path, foreign_lock: Callable[[Path], subprocess.Popen[str]]
    ) -> None:
        """A lock another process keeps fails the call with a typed error; nothing is written."""
        store = FileTokenStore(root, lock_timeout=0.05)
        run(store.put(entry("r", "a")))
        log = root / log_name("r")
        before = log.read_bytes()
        foreign_lock(log)
        with pytest.raises(RolloutLockTimeoutError) as raised:
            run(store.put(entry("r", "b")))
        assert isinstance(raised.value, StoreWriteError)
        assert "'r'" in str(raised.value)
        assert str(log) in str(raised.value)
        assert log.read_bytes() == before
        run(store.close())

    def test_a_held_lock_never_blocks_other_rollouts(
        self, root: Path, foreign_lock: Callable[[Path], subprocess.Popen[str]]
    ) -> None:
        """Puts to other rollouts complete while one rollout waits; it lands once released."""
        store = FileTokenStore(root, lock_timeout=60, writer_threads=1)
        run(store.put(entry("r", "a")))
        holder = foreign_lock(root / log_name("r"))

        async def scenario() -> bool:
            waiting = asyncio.ensure_future(store.put(entry("r", "b")))
            await asyncio.wait_for(
                asyncio.gather(*(store.put(entry(f"other-{i}", "c")) for i in range(5))), 30
            )
            await asyncio.wait_for(store.freeze("other-0"), 30)
            served_while_waiting = not waiting.done()
            assert holder.stdin is not None
            holder.stdin.close()
            await asyncio.wait_for(waiting, 30)
            await store.close()
            return served_while_waiting

        assert run(scenario())
        assert sorted(e.model_call_id for e in run(store.freeze("r")).entries) == ["a", "b"]
        run(store.close())

    def test_work_queued_behind_a_held_lock_keeps_its_order(
        self, root: Path, foreign_lock: Callable[[Path], subprocess.Popen[str]]
    ) -> None:
        """A freeze queued after a waiting put of the same rollout still sees that put."""
        store = FileTokenStore(root, lock_timeout=60)
        run(store.put(entry("r", "a")))
        holder = foreign_lock(root / log_name("r"))

        async def scenario() -> list[str]:
            put = asyncio.ensure_future(store.put(entry("r", "b")))
            freeze = asyncio.ensure_future(store.freeze("r"))
            await asyncio.sleep(0)
            assert holder.stdin is not None
            holder.stdin.close()
            await asyncio.wait_for(put, 30)
            snapshot = await asyncio.wait_for(freeze, 30)
            await store.close()
            return sorted(e.model_call_id for e in snapshot.entries)

        assert run(scenario()) == ["a", "b"]


class TestFreezeBesidePuts:
    def test_a_put_queued_during_a_freeze_is_written_before_the_freeze_has_read_everything(
        self, store: FileTokenStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Reading a rollout back gives way between entries to puts to other rollouts."""
        calls = [f"c{i}" for i in range(6)]
        order: list[str] = []
        reading = threading.Event()
        queued = threading.Event()
        real_unpack = _file_log.unpack_entry
        real_append = LogDirectory.append_entries

        def unpack(rest: bytes, tokens: bytes) -> TokenEntry:
            order.append("read")
            if len(order) == 1:
                reading.set()
            elif len(order) == 2:
                # The put must be queued before this step ends, whatever the thread timing.
                assert queued.wait(30)
            return real_unpack(rest, tokens)

        def append(logs: LogDirectory, rollout_id: str, items: Any) -> Any:
            order.append(f"append {rollout_id}")
            return real_append(logs, rollout_id, items)

        async def scenario() -> None:
            for call in calls:
                await store.put(entry("big", call))
            await store.put(entry("other", "a"))
            monkeypatch.setattr(_file_log, "unpack_entry", unpack)
            monkeypatch.setattr(writer, "STEP_SECONDS", 0.0)
            monkeypatch.setattr(LogDirectory, "append_entries", append)
            freezing = asyncio.ensure_future(store.freeze("big"))
            assert await asyncio.to_thread(reading.wait, 30)
            put = asyncio.ensure_future(store.put(entry("other", "b")))
            await asyncio.sleep(0)
            queued.set()
            await asyncio.wait_for(put, 30)
            assert len((await asyncio.wait_for(freezing, 30)).entries) == len(calls)

        try:
            run(scenario())
        finally:
            queued.set()
        assert order.index("append other") < len(order) - 1
        assert order.count("read") == len(calls)
