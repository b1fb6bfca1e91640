"""Each reference store's resolver sees a put at once, in every process that shares the store.

A resolver built before the put and one built after it both resolve a faithful continuation
to the call the put committed, while the rollout stays unfrozen: ``peek`` fences nothing, so
the sink's next call still lands. The file and Redis resolvers see a put a spawned worker made.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reference.file_store import FileTokenStore
from reference.lineage import FileLineageResolver, MemoryLineageResolver, RedisLineageResolver
from reference.memory_store import MemoryTokenStore
from reference.redis_store import RedisTokenStore
from tokcap_spec.fingerprint import continuation_stamp
from tokcap_spec.lineage import ParentResolutionStatus
from tokcap_spec.records import TokenEntry

QUESTION = [{"role": "user", "content": "Weather?"}]
ANSWER = [{"role": "assistant", "content": "It is sunny."}]
FOLLOW_UP = [*QUESTION, *ANSWER, {"role": "user", "content": "And tomorrow?"}]

Pair = tuple[Callable[[], Any], Callable[[], Any], bool]
"""Opens a sink, opens a resolver over the same store, and whether it is process-shared."""


def entry(rollout: str, call: str = "call-1") -> TokenEntry:
    return TokenEntry(
        rollout_id=rollout,
        model_call_id=call,
        prompt_token_ids=[101, 102],
        generation_token_ids=[201],
        generation_log_probs=[-0.25],
        output_items=ANSWER,
        **continuation_stamp(QUESTION, ANSWER),
    )


@pytest.fixture(params=["file", "memory", "redis"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    name = f"l-{uuid.uuid4().hex[:12]}"
    if request.param == "file":
        yield (
            lambda: FileTokenStore(tmp_path),
            lambda: FileLineageResolver(tmp_path),
            True,
        )
    elif request.param == "memory":
        yield lambda: MemoryTokenStore(name), lambda: MemoryLineageResolver(name), False
    else:
        url = request.getfixturevalue("redis_server").url
        yield (
            lambda: RedisTokenStore(url, namespace=name),
            lambda: RedisLineageResolver(url, namespace=name),
            True,
        )


def test_a_put_is_seen_by_resolvers_built_before_and_after_it(pair: Pair) -> None:
    open_sink, open_resolver, shared = pair

    async def run() -> None:
        rollout = f"r-{uuid.uuid4().hex}"
        sink, early = open_sink(), open_resolver()
        before = await early.resolve(rollout, FOLLOW_UP)
        assert before.status is ParentResolutionStatus.UNRESOLVED
        await sink.put(entry(rollout))
        late = open_resolver()
        for resolver in (early, late):
            resolution = await resolver.resolve(rollout, FOLLOW_UP)
            assert resolution.status is ParentResolutionStatus.RESOLVED, resolution
            assert resolution.match is not None
            assert resolution.match.model_call_id == "call-1"
            assert resolution.match.cumulative_token_ids == (101, 102, 201)
            assert (await resolver.resolve(rollout, QUESTION)).status is ParentResolutionStatus.ROOT
            assert resolver.is_process_shared() is shared
        await sink.put(entry(rollout, "call-2"))  # resolving fenced nothing
        for each in (sink, early, late, early):
            await each.close()

    asyncio.run(run())


def _put_in_worker(kind: str, where: str, namespace: str, rollout: str) -> None:
    sink = FileTokenStore(where) if kind == "file" else RedisTokenStore(where, namespace=namespace)

    async def run() -> None:
        await sink.put(entry(rollout))
        await sink.close()

    asyncio.run(run())


@pytest.mark.parametrize("kind", ["file", "redis"])
def test_a_put_in_a_spawned_worker_is_seen_here(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    namespace, rollout = f"l-{uuid.uuid4().hex[:12]}", f"r-{uuid.uuid4().hex}"
    where = str(tmp_path) if kind == "file" else request.getfixturevalue("redis_server").url
    resolver = (
        FileLineageResolver(where)
        if kind == "file"
        else RedisLineageResolver(where, namespace=namespace)
    )
    worker = multiprocessing.get_context("spawn").Process(
        target=_put_in_worker, args=(kind, where, namespace, rollout)
    )
    worker.start()
    worker.join(60)
    assert worker.exitcode == 0

    async def run() -> None:
        resolution = await resolver.resolve(rollout, FOLLOW_UP)
        assert resolution.status is ParentResolutionStatus.RESOLVED
        await resolver.close()

    asyncio.run(run())


def test_a_retired_rollout_resolves_nothing(tmp_path: Path) -> None:
    async def run() -> None:
        store, resolver = FileTokenStore(tmp_path), FileLineageResolver(tmp_path)
        await store.put(entry("r"))
        snapshot = await store.freeze("r")
        assert await store.drop("r", snapshot_id=snapshot.snapshot_id, version=snapshot.version)
        assert (await resolver.resolve("r", FOLLOW_UP)).reason == "no_match"
        assert await store.peek("never-written") == ()
        await store.close()
        await resolver.close()

    asyncio.run(run())
