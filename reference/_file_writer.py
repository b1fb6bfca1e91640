"""A long-lived thread that does a store's blocking disk work, in the order it was asked for.

Coroutines hand it jobs through a queue and await a future of their own event loop, so no event
loop ever blocks on disk I/O and a call costs one queue hand-off instead of a thread start.
Puts waiting in the queue together are written as one batch per rollout: one lock, one sync.

The thread starts on first use, stops on :meth:`WriterThread.close` (or when its owner is
garbage collected), and starts again if used after closing or in a forked child.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from reference._file_rollouts import RolloutLogs

__all__ = ["WriterThread"]

T = TypeVar("T")


@dataclass(slots=True)
class _Job:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    work: Callable[[RolloutLogs], Any]


@dataclass(slots=True)
class _Put:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    rollout_id: str
    model_call_id: str
    payload: bytes


@dataclass
class _Stop:
    done: list[_Job] = field(default_factory=list)


_Item = _Job | _Put | _Stop


def _deliver(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def _settle(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any = None,
    error: BaseException | None = None,
) -> None:
    # A closed loop raises RuntimeError: its caller is gone and nobody waits for the answer.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_deliver, future, result, error)


def _put_batch(logs: RolloutLogs, puts: list[_Put]) -> None:
    by_rollout: dict[str, list[_Put]] = {}
    for put in puts:
        by_rollout.setdefault(put.rollout_id, []).append(put)
    for rollout_id, group in by_rollout.items():
        try:
            outcomes = logs.put(rollout_id, [(p.model_call_id, p.payload) for p in group])
        except Exception as exc:
            for put in group:
                _settle(put.loop, put.future, error=exc)
            continue
        for put, outcome in zip(group, outcomes, strict=True):
            _settle(put.loop, put.future, error=outcome)


def _serve(jobs: queue.SimpleQueue[_Item], root: str) -> None:
    logs = RolloutLogs(root)
    while True:
        batch = [jobs.get()]
        while not jobs.empty():
            batch.append(jobs.get_nowait())
        index = 0
        while index < len(batch):
            item = batch[index]
            if isinstance(item, _Put):
                end = index
                while end < len(batch) and isinstance(batch[end], _Put):
                    end += 1
                puts = [p for p in batch[index:end] if isinstance(p, _Put)]
                _put_batch(logs, puts)
                index = end
                continue
            if isinstance(item, _Stop):
                logs.close()
                for job in item.done:
                    _settle(job.loop, job.future)
                return
            try:
                result = item.work(logs)
            except Exception as exc:
                _settle(item.loop, item.future, error=exc)
            else:
                _settle(item.loop, item.future, result)
            index += 1


class WriterThread:
    """Runs blocking :class:`RolloutLogs` work for the coroutines of one store."""

    def __init__(self, root: str, name: str) -> None:
        self._root = root
        self._name = name
        self._guard = threading.Lock()
        self._jobs: queue.SimpleQueue[_Item] | None = None
        self._pid = os.getpid()
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def _queue(self) -> queue.SimpleQueue[_Item]:
        with self._guard:
            if self._pid != os.getpid():
                self._jobs = None
                self._pid = os.getpid()
            if self._jobs is None:
                jobs: queue.SimpleQueue[_Item] = queue.SimpleQueue()
                thread = threading.Thread(
                    target=_serve, args=(jobs, self._root), name=self._name, daemon=True
                )
                thread.start()
                self._finalizer = weakref.finalize(self, jobs.put, _Stop())
                self._jobs = jobs
            return self._jobs

    async def run(self, work: Callable[[RolloutLogs], T]) -> T:
        """Run ``work`` on the writer thread and return its result (or raise its error)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue().put(_Job(loop, future, work))
        return await future

    async def put(self, rollout_id: str, model_call_id: str, payload: bytes) -> None:
        """Store one entry payload; return once it is durable."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._queue().put(_Put(loop, future, rollout_id, model_call_id, payload))
        await future

    async def close(self) -> None:
        """Finish every job already queued, close every file and stop the thread; idempotent."""
        with self._guard:
            jobs, self._jobs = self._jobs, None
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None
            if self._pid != os.getpid():
                jobs = None
        if jobs is None:
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        jobs.put(_Stop([_Job(loop, future, lambda logs: None)]))
        await future
