"""Threads that do a store's blocking work, each rollout's work in the order it was asked for.

Coroutines hand jobs to a shard thread (one by default) through a queue and await a future of
their own event loop, so no event loop ever blocks on disk I/O, and a put's check and encoding
run on the shard too. A rollout always goes to the same shard, so its work keeps its order and
the puts waiting together for it are written as one batch (one lock, one sync). The sync of a
batch runs on a pool of sync threads, so different rollouts' syncs overlap while the shard,
the one thread doing CPU work beside the event loop, goes on; more CPU threads would only take
turns at the GIL and delay the event loop's next turn.

A rollout whose lock is held elsewhere is set aside and tried again after a growing pause while
its shard serves other rollouts; once it has waited ``lock_timeout`` seconds, its waiting work
fails with :class:`~reference._file_log.RolloutLockTimeoutError`.

Threads start on first use, stop on :meth:`WriterThread.close` (or when their owner is garbage
collected), and start again if used after closing or in a forked child.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import os
import queue
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from reference._file_log import OwedSync, RolloutLockBusy, RolloutLockTimeoutError
from reference._file_packed import CheckedEntry
from reference._file_rollouts import LogDirectory
from tokcap_spec.errors import StoreWriteError, TokenCaptureError

__all__ = ["DEFAULT_SHARDS", "WriterThread"]

T = TypeVar("T")

DEFAULT_SHARDS = 1
"""How many threads check, encode and append for one store instance."""

SYNC_THREADS = 16
"""How many syncs of different rollouts one shard lets run at once."""

STEP_SECONDS = 0.001
"""How long long work done in steps (reading a rollout back) runs before others get a turn."""

_FIRST_PAUSE = 0.0005
_LONGEST_PAUSE = 0.02


@dataclass(slots=True)
class _Job:
    loop: asyncio.AbstractEventLoop | None
    future: asyncio.Future[Any] | None
    key: str | None
    work: Callable[[LogDirectory], Any]


@dataclass(slots=True)
class _Put:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    key: str
    model_call_id: str
    encode: Callable[[], bytes | CheckedEntry]
    payload: bytes | CheckedEntry | None = None
    refused: bool = False
    intent: bool = False


@dataclass(slots=True)
class _Steps:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    steps: Generator[None, None, Any]


@dataclass
class _Stop:
    done: list[_Job] = field(default_factory=list)


@dataclass(slots=True)
class _Waiting:
    items: list[_Job | _Put]
    busy: RolloutLockBusy
    deadline: float
    pause: float
    next_try: float


_Item = _Job | _Put | _Steps | _Stop


class _Jobs:
    """A shard's queue: put from any thread (reentrant, so a finalizer may put), taken by one.

    ``queue.SimpleQueue.get`` with a timeout can block for good before CPython 3.13: once its
    first try took the free internal lock, it recomputes the time left, and a deadline missed
    by a microsecond or more (a tiny timeout, or a thread preempted there) turns negative,
    which the next wait reads as "no timeout". The shard waits for the next job with the
    pause of a busy rollout as its timeout, so that wait would end only with another job,
    and a caller waiting for the set-aside put submits none. Here the timed wait is a
    ``threading.Lock`` acquire, whose timeout holds; each put releases the lock.
    """

    def __init__(self) -> None:
        self._items: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._ready = threading.Lock()
        self._ready.acquire()

    def put(self, item: _Item) -> None:
        self._items.put(item)
        # Already released by an earlier put the taker has not yet seen: it wakes anyway.
        with contextlib.suppress(RuntimeError):
            self._ready.release()

    def empty(self) -> bool:
        return self._items.empty()

    def get_nowait(self) -> _Item:
        return self._items.get_nowait()

    def get(self, timeout: float | None = None) -> _Item:
        """The next job, waiting up to ``timeout`` seconds (None: for good); or queue.Empty."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with contextlib.suppress(queue.Empty):
                return self._items.get_nowait()
            if deadline is None:
                self._ready.acquire()
                continue
            left = deadline - time.monotonic()
            if left <= 0 or not self._ready.acquire(timeout=left):
                raise queue.Empty


def _deliver(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def _settle(
    loop: asyncio.AbstractEventLoop | None,
    future: asyncio.Future[Any] | None,
    result: Any = None,
    error: BaseException | None = None,
) -> None:
    if loop is None or future is None:
        return
    # A closed loop raises RuntimeError: its caller is gone and nobody waits for the answer.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_deliver, future, result, error)


def _typed(error: Exception, key: str | None) -> Exception:
    """Return ``error``, or for a bare ``OSError`` a StoreWriteError saying where it arose."""
    if not isinstance(error, OSError) or isinstance(error, TokenCaptureError):
        return error
    where = f"rollout {key!r}" if key is not None else "the store"
    typed = StoreWriteError(error.errno, f"{where}: a disk operation failed: {error}")
    typed.__cause__ = error
    return typed


@dataclass(slots=True)
class _Shard:
    """What one shard thread works with."""

    logs: LogDirectory
    jobs: _Jobs
    syncs: concurrent.futures.ThreadPoolExecutor


def _finish(shard: _Shard, owed: OwedSync, puts: list[_Put], outcomes: list[Any]) -> None:
    """Run a batch's sync (on a sync thread), then answer its puts, whatever happens: an
    error nobody would read on this pool's thread fails them as a failed sync does."""
    try:
        owed.run()
    except Exception as unexpected:
        if isinstance(unexpected, StoreWriteError):
            exc = unexpected
        else:
            exc = StoreWriteError(
                errno.EIO, f"{owed.path}: the sync of appended records failed: {unexpected!r}"
            )
            exc.__cause__ = unexpected
        error = exc
        rollout_id, epoch = owed.rollout_id, owed.epoch

        def mark_then_answer(logs: LogDirectory) -> None:
            # The puts fail only once the mark is down (or could not be), as they did when
            # the sync ran on the shard: nobody sees the failure before the rollout is marked.
            try:
                logs.mark_unsynced(rollout_id, epoch)
            finally:
                for put in puts:
                    _settle(put.loop, put.future, error=error)

        shard.jobs.put(_Job(None, None, rollout_id, mark_then_answer))
        return
    for put, outcome in zip(puts, outcomes, strict=True):
        _settle(put.loop, put.future, error=outcome)


def _put_run(shard: _Shard, puts: list[_Put]) -> None:
    """Write consecutive puts of one rollout as one batch; raise RolloutLockBusy untouched."""
    ready = []
    for put in puts:
        if put.refused:
            continue
        if put.payload is None and not put.intent:
            try:
                put.payload = put.encode()
            except Exception as exc:
                put.refused = True
                _settle(put.loop, put.future, error=exc)
                continue
        ready.append(put)
    if not ready:
        return
    key = ready[0].key
    try:
        outcomes, owed = shard.logs.append_entries(
            key, [(p.model_call_id, None if p.intent else p.payload or b"") for p in ready]
        )
    except RolloutLockBusy:
        raise
    except Exception as exc:
        error = _typed(exc, key)
        for put in ready:
            _settle(put.loop, put.future, error=error)
        return
    if owed is not None:
        try:
            shard.syncs.submit(_finish, shard, owed, ready, outcomes)
        except RuntimeError:
            # The pool takes no more work once the shard is stopping: the sync runs here.
            _finish(shard, owed, ready, outcomes)
        return
    for put, outcome in zip(ready, outcomes, strict=True):
        _settle(put.loop, put.future, error=outcome)


def _run_in_order(
    shard: _Shard, items: list[_Job | _Put]
) -> tuple[list[_Job | _Put], RolloutLockBusy | None]:
    """Run ``items`` of one key in order; return what is left if a lock was busy, and why."""
    index = 0
    while index < len(items):
        item = items[index]
        if isinstance(item, _Put):
            end = index
            while end < len(items) and isinstance(items[end], _Put):
                end += 1
            try:
                _put_run(shard, [p for p in items[index:end] if isinstance(p, _Put)])
            except RolloutLockBusy as busy:
                return items[index:], busy
            index = end
            continue
        try:
            result = item.work(shard.logs)
        except RolloutLockBusy as busy:
            return items[index:], busy
        except Exception as exc:
            _settle(item.loop, item.future, error=_typed(exc, item.key))
        else:
            _settle(item.loop, item.future, result)
        index += 1
    return [], None


def _step(shard: _Shard, item: _Steps) -> None:
    """Advance ``item`` for up to :data:`STEP_SECONDS`; if unfinished, queue it behind the rest."""
    deadline = time.perf_counter() + STEP_SECONDS
    try:
        while True:
            next(item.steps)
            if time.perf_counter() >= deadline:
                break
    except StopIteration as done:
        _settle(item.loop, item.future, done.value)
        return
    except Exception as exc:
        _settle(item.loop, item.future, error=_typed(exc, None))
        return
    shard.jobs.put(item)


def _run_ready(
    shard: _Shard,
    ready: dict[str | None, list[_Job | _Put]],
    waiting: dict[str | None, _Waiting],
    lock_timeout: float,
) -> None:
    """Run each key's ready work in order and empty ``ready``; set aside what finds a lock busy."""
    for key, items in ready.items():
        left, busy = _run_in_order(shard, items)
        if busy is not None:
            now = time.monotonic()
            waiting[key] = _Waiting(
                left, busy, now + lock_timeout, _FIRST_PAUSE, now + _FIRST_PAUSE
            )
    ready.clear()


def _serve(shard: _Shard, lock_timeout: float) -> None:
    jobs = shard.jobs
    waiting: dict[str | None, _Waiting] = {}
    stop: _Stop | None = None
    while True:
        if stop is not None and not waiting:
            # Syncs still running may queue marks; they are served before the thread ends.
            shard.syncs.shutdown(wait=True)
            if jobs.empty():
                shard.logs.close()
                for job in stop.done:
                    _settle(job.loop, job.future)
                return
        timeout = None
        if waiting:
            timeout = max(0.0, min(w.next_try for w in waiting.values()) - time.monotonic())
        batch: list[_Item] = []
        with contextlib.suppress(queue.Empty):
            batch.append(jobs.get(timeout=timeout))
        while not jobs.empty():
            batch.append(jobs.get_nowait())
        ready: dict[str | None, list[_Job | _Put]] = {}
        for item in batch:
            if isinstance(item, _Stop):
                stop = item
            elif isinstance(item, _Steps):
                # Long work takes a step at a time, between the work queued around it.
                _run_ready(shard, ready, waiting, lock_timeout)
                _step(shard, item)
            elif item.key in waiting:
                waiting[item.key].items.append(item)
            elif item.key is None:
                # Work without a key may touch any rollout: it sees all work submitted before it.
                _run_ready(shard, ready, waiting, lock_timeout)
                _run_ready(shard, {None: [item]}, waiting, lock_timeout)
            else:
                ready.setdefault(item.key, []).append(item)
        _run_ready(shard, ready, waiting, lock_timeout)
        for key, wait in list(waiting.items()):
            if wait.next_try > time.monotonic():
                continue
            left, busy = _run_in_order(shard, wait.items)
            if busy is None:
                del waiting[key]
            elif time.monotonic() >= wait.deadline:
                del waiting[key]
                error = RolloutLockTimeoutError.after(busy, lock_timeout)
                for item in left:
                    if isinstance(item, _Job) and item.future is None:
                        # The store's own follow-up (a mark after a failed sync) answers puts
                        # when it ends; it waits for the lock itself and gives up typed.
                        with contextlib.suppress(Exception):
                            item.work(shard.logs)
                    else:
                        _settle(item.loop, item.future, error=error)
            else:
                wait.items, wait.busy = left, busy
                wait.pause = min(2 * wait.pause, _LONGEST_PAUSE)
                wait.next_try = time.monotonic() + wait.pause


class _Shards:
    """The queues of one incarnation of a writer's threads, started one by one as used."""

    def __init__(self, count: int) -> None:
        self.queues: list[_Jobs | None] = [None] * count

    def stop_all(self) -> None:
        for jobs in self.queues:
            if jobs is not None:
                jobs.put(_Stop())


class WriterThread:
    """Runs blocking :class:`LogDirectory` work for the coroutines of one store.

    Work for one key (a rollout id) runs in the order it was submitted, on the one thread that
    key maps to; work without a key runs on the first thread, named ``name``.
    """

    def __init__(
        self,
        root: str,
        name: str,
        *,
        mode: int = 0o600,
        lock_timeout: float = 10.0,
        shards: int = DEFAULT_SHARDS,
    ) -> None:
        if shards < 1:
            raise ValueError(f"shards must be at least 1, got {shards}")
        self._root = root
        self._name = name
        self._mode = mode
        self._lock_timeout = lock_timeout
        self._count = shards
        self._guard = threading.Lock()
        self._shards: _Shards | None = None
        self._pid = os.getpid()
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def _queue(self, key: str | None) -> _Jobs:
        index = 0 if key is None else zlib.crc32(key.encode("utf-8")) % self._count
        with self._guard:
            if self._pid != os.getpid():
                self._shards = None
                self._pid = os.getpid()
            if self._shards is None:
                self._shards = _Shards(self._count)
                self._finalizer = weakref.finalize(self, self._shards.stop_all)
            jobs = self._shards.queues[index]
            if jobs is None:
                jobs = _Jobs()
                name = self._name if index == 0 else f"{self._name} shard {index}"
                shard = _Shard(
                    LogDirectory(self._root, mode=self._mode, lock_timeout=self._lock_timeout),
                    jobs,
                    concurrent.futures.ThreadPoolExecutor(SYNC_THREADS, f"{name} sync"),
                )
                thread = threading.Thread(
                    target=_serve, args=(shard, self._lock_timeout), name=name, daemon=True
                )
                thread.start()
                self._shards.queues[index] = jobs
            return jobs

    async def run(self, work: Callable[[LogDirectory], T], key: str | None = None) -> T:
        """Run ``work`` on the thread of ``key`` and return its result (or raise its error).

        ``work`` may raise :class:`RolloutLockBusy` before it changes anything; it is then run
        again later, up to the lock timeout, while other keys are served.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue(key).put(_Job(loop, future, key, work))
        return await future

    async def run_in_steps(self, steps: Generator[None, None, T], key: str | None = None) -> T:
        """Drive ``steps`` to its end on the thread of ``key``; return its return value.

        Between steps that took :data:`STEP_SECONDS`, the thread serves other work, so long
        work (reading a large rollout back) does not hold up other rollouts' puts; and, unlike a
        thread of its own, it never competes with them for the GIL.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue(key).put(_Steps(loop, future, steps))
        return await future

    async def put(
        self,
        rollout_id: str,
        model_call_id: str,
        payload: bytes | Callable[[], bytes | CheckedEntry],
    ) -> None:
        """Store one entry payload (or what ``payload()`` returns, called on the writer thread).

        Returns once the payload is durable; an error ``payload()`` raises is raised here.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        if isinstance(payload, bytes):
            item = _Put(loop, future, rollout_id, model_call_id, bytes, payload)
        else:
            item = _Put(loop, future, rollout_id, model_call_id, payload)
        self._queue(rollout_id).put(item)
        await future

    async def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        """Durably announce ``model_call_id``, as a put does: batched and synced like one.

        Returns once the intent is durable; raises what announcing it raises.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._queue(rollout_id).put(
            _Put(loop, future, rollout_id, model_call_id, bytes, intent=True)
        )
        await future

    async def close(self) -> None:
        """Finish every job already queued, close every file and stop the threads; idempotent."""
        with self._guard:
            shards, self._shards = self._shards, None
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None
            if self._pid != os.getpid():
                shards = None
        if shards is None:
            return
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[None]] = []
        for jobs in shards.queues:
            if jobs is not None:
                future: asyncio.Future[None] = loop.create_future()
                jobs.put(_Stop([_Job(loop, future, None, lambda logs: None)]))
                futures.append(future)
        await asyncio.gather(*futures)
