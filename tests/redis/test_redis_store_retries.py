"""RedisTokenStore answers truthfully when a stalled server makes the client resend a call.

The server is stopped with SIGSTOP before the call and resumed with SIGCONT later than the
socket timeout: the first copy's reply is lost, redis-py reconnects and sends the call again,
and on resuming the server runs both copies.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis
from conftest import DURABLE, RedisServer, StartRedis

from reference.redis_store import RedisTokenStore
from tokcap_spec.errors import RolloutRetiredError
from tokcap_spec.records import TokenEntry

TRIALS = 20
STALL_SECONDS = 0.6
SOCKET_TIMEOUT = 0.25


def entry(rollout_id: str) -> TokenEntry:
    return TokenEntry(rollout_id=rollout_id, model_call_id="c", created_at=0.0)


@contextmanager
def stalled(server: RedisServer) -> Iterator[None]:
    """Stop the server now and resume it STALL_SECONDS later, whatever happens meanwhile."""
    assert server.process is not None
    pid = server.process.pid
    resume = threading.Timer(STALL_SECONDS, os.kill, (pid, signal.SIGCONT))
    os.kill(pid, signal.SIGSTOP)
    resume.start()
    try:
        yield
    finally:
        resume.join()
        os.kill(pid, signal.SIGCONT)


def script_runs(server: RedisServer) -> int:
    """How many EVALSHA calls the server has executed so far."""
    with redis.Redis.from_url(server.url) as raw:
        stats = raw.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


@pytest.fixture
def server(start_redis: StartRedis) -> RedisServer:
    return start_redis(DURABLE)


def open_store(server: RedisServer) -> RedisTokenStore:
    return RedisTokenStore(server.url, socket_timeout=SOCKET_TIMEOUT, retries=5)


@pytest.mark.slow
def test_a_resent_drop_that_retired_its_snapshot_answers_true(server: RedisServer) -> None:
    """Over TRIALS stalls, every drop whose snapshot is gone returned True, and each was resent."""
    outcomes: list[tuple[bool, bool, int, float]] = []

    async def trial(store: RedisTokenStore, rollout_id: str) -> None:
        await store.put(entry(rollout_id))
        snapshot = await store.freeze(rollout_id)
        before = script_runs(server)
        started = time.monotonic()
        with stalled(server):
            dropped = await store.drop(
                rollout_id, snapshot_id=snapshot.snapshot_id, version=snapshot.version
            )
        elapsed = time.monotonic() - started
        try:
            await store.freeze(rollout_id)
            gone = False
        except RolloutRetiredError:
            gone = True
        outcomes.append((dropped, gone, script_runs(server) - before, elapsed))

    async def scenario() -> None:
        store = open_store(server)
        try:
            for index in range(TRIALS):
                await trial(store, f"r{index}")
        finally:
            await store.close()

    asyncio.run(scenario())
    assert len(outcomes) == TRIALS
    assert all(elapsed >= STALL_SECONDS for *_, elapsed in outcomes)
    # One run for the drop that was stalled, at least one more for its resend.
    assert all(runs >= 2 for _, _, runs, _ in outcomes), outcomes
    assert [(dropped, gone) for dropped, gone, *_ in outcomes] == [(True, True)] * TRIALS


def test_a_resent_mark_bumps_the_version_once(server: RedisServer) -> None:
    """A mark resent after a stall leaves the rollout incomplete with the version moved by one."""
    versions: list[tuple[int, int, int]] = []

    async def scenario() -> None:
        store = open_store(server)
        try:
            for index in range(5):
                rollout_id = f"m{index}"
                await store.put(entry(rollout_id))
                before = script_runs(server)
                with stalled(server):
                    await store.mark_incomplete(rollout_id)
                runs = script_runs(server) - before
                snapshot = await store.freeze(rollout_id)
                assert snapshot.incomplete
                versions.append((runs, 1, snapshot.version))
        finally:
            await store.close()

    asyncio.run(scenario())
    assert all(runs >= 2 for runs, *_ in versions), versions
    assert [version for *_, version in versions] == [2] * 5


def test_a_resent_put_stores_one_entry_once(server: RedisServer) -> None:
    """A put resent after a stall is acked once: one entry, version one, clean."""

    async def scenario() -> tuple[int, int, bool, int]:
        store = open_store(server)
        try:
            before = script_runs(server)
            with stalled(server):
                await store.put(entry("p"))
            runs = script_runs(server) - before
            snapshot = await store.freeze("p")
            return runs, len(snapshot.entries), snapshot.incomplete, snapshot.version
        finally:
            await store.close()

    runs, count, incomplete, version = asyncio.run(scenario())
    assert runs >= 2
    assert (count, incomplete, version) == (1, False, 1)
