"""The writer thread that does a store's blocking work (reference._file_writer)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import queue
import threading
from pathlib import Path

import pytest

from reference import _file_log
from reference._file_log import RolloutLockBusy, RolloutLockTimeoutError
from reference._file_rollouts import LogDirectory
from reference._file_writer import WriterThread, _Jobs, _Stop
from tokcap_spec.errors import RolloutFrozenError, StoreWriteError
from tokcap_spec.records import TokenEntry


def payload(call: str, rollout_id: str = "r") -> bytes:
    return TokenEntry(rollout_id=rollout_id, model_call_id=call, created_at=1.0).to_json_bytes()


def alive(name: str) -> int:
    return sum(thread.name == name for thread in threading.enumerate())


class Stuck:
    """Makes the first call of one ``_file_log`` function wait until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, function: str) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()
        self._monkeypatch = monkeypatch
        self._function = function

    def arm(self) -> None:
        """From now on, the first call waits (up to 30 s) for :attr:`release`."""
        real = getattr(_file_log, self._function)

        def stuck(fd: int) -> None:
            if not self.reached.is_set():
                self.reached.set()
                self.release.wait(30)
            real(fd)

        self._monkeypatch.setattr(_file_log, self._function, stuck)


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    return f"writer-under-test-{request.node.name}"


class TestRun:
    def test_jobs_run_in_order_on_one_other_thread(self, tmp_path: Path, name: str) -> None:
        """Jobs run one after another, in submission order, off the event loop's thread."""
        writer = WriterThread(str(tmp_path), name)
        seen: list[tuple[int, str]] = []

        def job(index: int) -> object:
            return lambda logs: seen.append((index, threading.current_thread().name))

        async def scenario() -> None:
            await asyncio.gather(*(writer.run(job(i)) for i in range(20)))
            await writer.close()

        asyncio.run(scenario())
        assert seen == [(i, name) for i in range(20)]

    def test_a_job_without_a_key_sees_all_work_submitted_before_it(
        self, tmp_path: Path, name: str
    ) -> None:
        """Keyed puts queued between two unkeyed jobs run after the first and before the second."""
        writer = WriterThread(str(tmp_path), name)
        gate = threading.Event()
        holding = threading.Event()

        def hold(logs: LogDirectory) -> None:
            holding.set()
            gate.wait(30)

        async def scenario() -> int:
            held = asyncio.ensure_future(writer.run(hold))
            assert await asyncio.to_thread(holding.wait, 30)
            queued = [
                asyncio.ensure_future(writer.run(lambda logs: None)),
                asyncio.ensure_future(writer.put("r", "c", payload("c"))),
                asyncio.ensure_future(writer.run(lambda logs: len(logs.freeze("r").entries))),
            ]
            await asyncio.sleep(0)
            gate.set()
            await held
            *_, seen = await asyncio.gather(*queued)
            await writer.close()
            return int(seen)

        assert asyncio.run(scenario()) == 1

    def test_a_job_error_reaches_its_caller_only(self, tmp_path: Path, name: str) -> None:
        """A job that raises fails its own caller and leaves the thread serving others."""
        writer = WriterThread(str(tmp_path), name)

        def boom(logs: LogDirectory) -> None:
            raise KeyError("boom")

        async def scenario() -> list[object]:
            results = await asyncio.gather(
                writer.run(boom), writer.run(lambda logs: 7), return_exceptions=True
            )
            await writer.close()
            return results

        failed, answered = asyncio.run(scenario())
        assert isinstance(failed, KeyError)
        assert answered == 7

    def test_serves_several_event_loops(self, tmp_path: Path, name: str) -> None:
        """One writer answers callers on different loops in different threads."""
        writer = WriterThread(str(tmp_path), name)
        answers: list[int] = []

        def call(value: int) -> None:
            answers.append(asyncio.run(writer.run(lambda logs: value)))

        threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        asyncio.run(writer.close())
        assert sorted(answers) == [0, 1, 2, 3]


class TestPut:
    def test_puts_queued_together_each_get_their_outcome(self, tmp_path: Path, name: str) -> None:
        """Concurrent puts are acked or refused one by one, even when written as one batch."""
        writer = WriterThread(str(tmp_path), name)

        async def scenario() -> list[object]:
            await writer.run(lambda logs: logs.freeze("frozen"))
            results = await asyncio.gather(
                *(writer.put("r", f"c{i}", payload(f"c{i}")) for i in range(10)),
                writer.put("frozen", "c", payload("c")),
                return_exceptions=True,
            )
            await writer.close()
            return results

        results = asyncio.run(scenario())
        assert results[:10] == [None] * 10
        assert isinstance(results[10], RolloutFrozenError)

    def test_a_caller_that_went_away_does_not_stop_the_thread(
        self, tmp_path: Path, name: str
    ) -> None:
        """A put whose loop closed before the answer still lands, and the thread keeps going."""
        writer = WriterThread(str(tmp_path), name)
        gate = threading.Event()

        async def abandon() -> None:
            await writer.run(lambda logs: None)
            blocked = asyncio.ensure_future(writer.run(lambda logs: gate.wait(10)))
            put = asyncio.ensure_future(writer.put("r", "c", payload("c")))
            await asyncio.sleep(0)
            blocked.cancel()
            put.cancel()

        asyncio.run(abandon())
        gate.set()

        async def check() -> int:
            snapshot = await writer.run(lambda logs: logs.freeze("r"))
            await writer.close()
            return len(snapshot.entries)

        assert asyncio.run(check()) == 1


class TestClose:
    def test_close_stops_the_thread_and_is_idempotent(self, tmp_path: Path, name: str) -> None:
        """Close ends the thread; a second close does nothing."""
        writer = WriterThread(str(tmp_path), name)

        async def scenario() -> None:
            await writer.run(lambda logs: None)
            assert alive(name) == 1
            await writer.close()
            await writer.close()

        asyncio.run(scenario())
        for thread in threading.enumerate():
            if thread.name == name:
                thread.join(timeout=10)
        assert alive(name) == 0

    def test_close_finishes_jobs_queued_before_it(self, tmp_path: Path, name: str) -> None:
        """Work queued before close completes before close returns."""
        writer = WriterThread(str(tmp_path), name)
        done: list[int] = []

        async def scenario() -> None:
            pending = [
                asyncio.ensure_future(writer.run(lambda logs, i=i: done.append(i)))
                for i in range(5)
            ]
            await asyncio.sleep(0)
            await writer.close()
            assert all(task.done() for task in pending)

        asyncio.run(scenario())
        assert done == [0, 1, 2, 3, 4]

    def test_a_closed_writer_starts_again(self, tmp_path: Path, name: str) -> None:
        """A call after close starts a new thread."""
        writer = WriterThread(str(tmp_path), name)
        asyncio.run(writer.run(lambda logs: None))
        asyncio.run(writer.close())
        assert asyncio.run(writer.run(lambda logs: 5)) == 5
        asyncio.run(writer.close())

    def test_a_forgotten_writer_stops_its_thread(self, tmp_path: Path, name: str) -> None:
        """Garbage-collecting an unclosed writer ends its thread."""
        writer = WriterThread(str(tmp_path), name)
        asyncio.run(writer.run(lambda logs: None))
        (thread,) = [t for t in threading.enumerate() if t.name == name]
        del writer
        gc.collect()
        thread.join(timeout=10)
        assert not thread.is_alive()


class TestBusyLocks:
    def test_work_whose_lock_is_busy_runs_later_while_other_keys_are_served(
        self, tmp_path: Path, name: str
    ) -> None:
        """A job that finds its lock busy is tried again later; jobs of other keys go first."""
        writer = WriterThread(str(tmp_path), name, shards=1)
        order: list[str] = []
        tries = 0

        def busy_twice(logs: LogDirectory) -> str:
            nonlocal tries
            tries += 1
            if tries <= 2:
                raise RolloutLockBusy("a", "a.log")
            order.append("a")
            return "a done"

        def other(logs: LogDirectory) -> str:
            order.append("b")
            return "b done"

        async def scenario() -> list[str]:
            results = await asyncio.gather(writer.run(busy_twice, "a"), writer.run(other, "b"))
            await writer.close()
            return list(results)

        assert asyncio.run(scenario()) == ["a done", "b done"]
        assert order == ["b", "a"]
        assert tries == 3

    def test_work_whose_lock_stays_busy_times_out_typed(self, tmp_path: Path, name: str) -> None:
        """Work that finds its lock busy past the timeout fails with RolloutLockTimeoutError."""
        writer = WriterThread(str(tmp_path), name, lock_timeout=0.01)

        def always_busy(logs: LogDirectory) -> None:
            raise RolloutLockBusy("a", "/store/a.log")

        async def scenario() -> None:
            try:
                await writer.run(always_busy, "a")
            finally:
                await writer.close()

        with pytest.raises(RolloutLockTimeoutError, match=r"rollout 'a'.*/store/a\.log"):
            asyncio.run(scenario())

    def test_different_keys_run_on_different_threads(self, tmp_path: Path, name: str) -> None:
        """Work of different rollouts spreads over the shards; one key always uses one thread."""
        writer = WriterThread(str(tmp_path), name, shards=4)
        seen: dict[str, set[str]] = {}

        def job(key: str) -> object:
            return lambda logs: seen.setdefault(key, set()).add(threading.current_thread().name)

        async def scenario() -> None:
            for _ in range(3):
                await asyncio.gather(*(writer.run(job(f"r{i}"), f"r{i}") for i in range(16)))
            await writer.close()

        asyncio.run(scenario())
        assert all(len(threads) == 1 for threads in seen.values())
        assert len(set().union(*seen.values())) > 1


class TestSyncs:
    def test_a_slow_sync_of_one_rollout_never_holds_up_another(
        self, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """While one rollout's sync is stuck, another rollout's put is written, synced and acked."""
        stuck = Stuck(monkeypatch, "_sync_data")
        release = stuck.release
        writer = WriterThread(str(tmp_path), name, shards=1)

        async def scenario() -> bool:
            await writer.put("a", "first", payload("first"))
            await writer.put("b", "first", payload("first"))
            stuck.arm()
            slow = asyncio.ensure_future(writer.put("a", "c", payload("c")))
            assert await asyncio.to_thread(stuck.reached.wait, 30)
            await asyncio.wait_for(writer.put("b", "c", payload("c")), 30)
            overtaken = not slow.done()
            release.set()
            await asyncio.wait_for(slow, 30)
            await writer.close()
            return overtaken

        try:
            assert asyncio.run(scenario())
        finally:
            release.set()


class TestNewLogs:
    def test_a_new_logs_slow_sync_holds_up_no_other_rollout_and_keeps_it_locked(
        self, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """While a new log's first sync is stuck, other rollouts are served, and nobody else
        (another instance here) can read the new log until its directory entry is durable."""
        stuck = Stuck(monkeypatch, "sync_directory")
        release = stuck.release
        writer = WriterThread(str(tmp_path), name, shards=1)
        other = LogDirectory(str(tmp_path))

        def locked_elsewhere() -> bool:
            try:
                with other._log("new").locked(create=False):
                    return False
            except RolloutLockBusy:
                return True

        async def scenario() -> tuple[bool, bool]:
            await writer.put("old", "first", payload("first", "old"))
            stuck.arm()
            slow = asyncio.ensure_future(writer.put("new", "a", payload("a", "new")))
            assert await asyncio.to_thread(stuck.reached.wait, 30)
            await asyncio.wait_for(writer.put("old", "second", payload("second", "old")), 30)
            held = await asyncio.to_thread(locked_elsewhere)
            # The same instance's next work on the new log waits for the sync too.
            behind = asyncio.ensure_future(writer.put("new", "b", payload("b", "new")))
            await asyncio.sleep(0.05)
            waited = not slow.done() and not behind.done()
            release.set()
            await asyncio.wait_for(asyncio.gather(slow, behind), 30)
            await writer.close()
            return held, waited

        try:
            assert asyncio.run(scenario()) == (True, True)
        finally:
            release.set()
        assert [e.model_call_id for e in other.freeze("new").entries] == ["a", "b"]
        other.close()

    def test_a_new_log_synced_here_when_no_descriptor_can_be_had(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without a descriptor for a sync thread, a new log is synced at once, under its lock."""
        logs = LogDirectory(str(tmp_path))
        real_dup = _file_log.os.dup

        def no_descriptor(fd: int) -> int:
            raise OSError(24, "Too many open files")

        monkeypatch.setattr(_file_log.os, "dup", no_descriptor)
        outcomes, owed = logs.append_entries("r", [("a", payload("a"))])
        monkeypatch.setattr(_file_log.os, "dup", real_dup)
        assert (outcomes, owed) == ([None], None)
        assert not logs._log("r").creating
        other = LogDirectory(str(tmp_path))
        assert [e.model_call_id for e in other.freeze("r").entries] == ["a"]
        other.close()
        logs.close()

    def test_a_failed_first_sync_cuts_the_new_log_and_unlocks_it(self, tmp_path: Path) -> None:
        """A new log whose first sync fails holds nothing afterwards, and is usable again."""
        logs = LogDirectory(str(tmp_path))
        _, owed = logs.append_entries("r", [("a", payload("a"))])
        assert owed is not None
        real = _file_log._sync_data

        def failing(fd: int) -> None:
            raise OSError(5, "Input/output error")

        _file_log._sync_data = failing
        try:
            with pytest.raises(StoreWriteError, match="could not sync"):
                owed.run()
        finally:
            _file_log._sync_data = real
        assert (tmp_path / _file_log.log_name("r")).read_bytes() == b""
        logs.mark_unsynced("r", owed.epoch)
        assert (tmp_path / _file_log.log_name("r")).read_bytes() == b""
        logs.put("r", [("b", payload("b"))])
        assert [e.model_call_id for e in logs.freeze("r").entries] == ["b"]
        logs.close()

    def test_an_unexpected_error_of_a_sync_fails_its_puts_and_marks_the_rollout(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A sync that raises anything, not only a disk error, answers every put waiting for it
        with a StoreWriteError and marks the rollout, for a new log and for one with records:
        no put waits for ever, and the writer goes on serving."""

        def broken(fd: int, path: str) -> None:
            raise RuntimeError("a bug in the sync")

        async def scenario() -> None:
            writer = WriterThread(str(tmp_path), "test")
            await writer.put("old", "a", payload("a", "old"))
            monkeypatch.setattr(_file_log, "_sync_appended", broken)
            for rollout in ("new", "old"):
                with pytest.raises(StoreWriteError, match="a bug in the sync"):
                    await asyncio.wait_for(writer.put(rollout, "b", payload("b", rollout)), 10)
            monkeypatch.undo()
            await writer.put("new", "c", payload("c", "new"))
            await writer.close()

        asyncio.run(scenario())
        logs = LogDirectory(str(tmp_path))
        assert logs.freeze("old").incomplete
        assert [entry.model_call_id for entry in logs.freeze("new").entries] == ["c"]
        logs.close()


class TestIntents:
    def test_a_slow_intent_sync_of_one_rollout_never_holds_up_another(
        self, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """begin_call is synced like a put: while one rollout's intent sync is stuck, another
        rollout's intent and entry are written, synced and acked."""
        stuck = Stuck(monkeypatch, "_sync_data")
        release = stuck.release
        writer = WriterThread(str(tmp_path), name, shards=1)

        async def scenario() -> bool:
            await writer.put("a", "first", payload("first", "a"))
            await writer.put("b", "first", payload("first", "b"))
            stuck.arm()
            slow = asyncio.ensure_future(writer.begin_call("a", "c"))
            assert await asyncio.to_thread(stuck.reached.wait, 30)
            await asyncio.wait_for(writer.begin_call("b", "c"), 30)
            await asyncio.wait_for(writer.put("b", "c", payload("c", "b")), 30)
            overtaken = not slow.done()
            release.set()
            await asyncio.wait_for(slow, 30)
            await writer.close()
            return overtaken

        try:
            assert asyncio.run(scenario())
        finally:
            release.set()
        logs = LogDirectory(str(tmp_path))
        assert logs.freeze("a").incomplete
        assert not logs.freeze("b").incomplete
        logs.close()

    def test_intents_and_entries_queued_together_keep_their_order(
        self, tmp_path: Path, name: str
    ) -> None:
        """An intent and then its entry, queued at once, freeze clean; an entry and then a
        repeated intent of the same call add no second intent; a new intent after the fence
        is refused."""
        writer = WriterThread(str(tmp_path), name)

        async def scenario() -> None:
            await asyncio.gather(
                writer.begin_call("r", "a"),
                writer.put("r", "a", payload("a")),
                writer.put("r", "b", payload("b")),
                writer.begin_call("r", "b"),
                writer.begin_call("r", "b"),
            )
            await writer.run(lambda logs: logs.freeze("r"), "r")
            with pytest.raises(RolloutFrozenError):
                await writer.begin_call("r", "late")
            await writer.begin_call("r", "a")
            await writer.close()

        asyncio.run(scenario())
        logs = LogDirectory(str(tmp_path))
        snapshot = logs.freeze("r")
        assert [e.model_call_id for e in snapshot.entries] == ["a", "b"]
        assert not snapshot.incomplete
        assert (tmp_path / _file_log.log_name("r")).read_bytes().count(b'"kind":"intent"') == 1
        logs.close()


class TestJobQueue:
    """The shard's job queue: its timed wait for the next job ends, however short the timeout.

    ``queue.SimpleQueue.get(timeout=...)`` could block for good before CPython 3.13 when the
    deadline passed between its first try and its wait (a tiny timeout, or a preemption
    there): a shard waiting out a busy rollout's pause then slept until the next job, which
    a caller waiting for the set-aside put never sends.
    """

    def test_a_timed_get_of_an_empty_queue_raises_empty(self) -> None:
        jobs = _Jobs()
        jobs.put(_Stop())
        jobs.get()  # as the shard does: an item taken leaves the queue's lock free
        for timeout in (0.0, 1e-9, 1e-6):
            with pytest.raises(queue.Empty):
                jobs.get(timeout=timeout)

    def test_jobs_come_out_in_order_and_a_put_wakes_a_waiting_get(self) -> None:
        jobs = _Jobs()
        first, second = _Stop(), _Stop()
        jobs.put(first)
        jobs.put(second)
        assert jobs.get(timeout=0.0) is first
        assert jobs.get_nowait() is second
        assert jobs.empty()
        taken: list[object] = []

        def take() -> None:
            taken.append(jobs.get())

        waiter = threading.Thread(target=take)
        waiter.start()
        third = _Stop()
        jobs.put(third)
        waiter.join(30)
        assert taken == [third]

    def test_timed_gets_right_after_a_take_never_block_for_good(self) -> None:
        """The sequence that hung SimpleQueue (after thousands of rounds, not at once)."""
        jobs = _Jobs()
        rounds: list[int] = []

        def take_and_wait() -> None:
            for _ in range(50_000):
                jobs.put(_Stop())
                jobs.get()
                with contextlib.suppress(queue.Empty):
                    jobs.get(timeout=1e-9)
            rounds.append(50_000)

        taker = threading.Thread(target=take_and_wait, daemon=True)
        taker.start()
        taker.join(60)
        assert rounds == [50_000], "a timed get blocked past its timeout"
