"""RedisTokenStore on a real three-master Redis Cluster, including while a slot moves."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from conftest import RedisClusterNodes, RedisServer
from redis.crc import key_slot

from reference.redis_store import RedisTokenStore
from tokcap_spec.errors import StoreWriteError, TokenCaptureError
from tokcap_spec.records import TokenEntry

ROLLOUTS = 30
WRITERS = 4


def entry(rollout_id: str, call: str) -> TokenEntry:
    return TokenEntry(
        rollout_id=rollout_id,
        model_call_id=call,
        prompt_token_ids=[1, 2, 3],
        generation_token_ids=[4],
        generation_log_probs=[float("-inf")],
        created_at=0.0,
    )


def node_keys(cluster: RedisClusterNodes, namespace: str) -> list[int]:
    """How many keys of ``namespace`` each node holds."""
    counts = []
    for node in cluster.nodes:
        with redis.Redis(host="127.0.0.1", port=node.port) as raw:
            counts.append(sum(1 for _ in raw.scan_iter(match=f"{namespace}:*")))
    return counts


class TestOnACluster:
    def test_finds_the_cluster_and_serves_rollouts_on_every_master(
        self, redis_cluster: RedisClusterNodes
    ) -> None:
        """From one node's URL the store reaches rollouts whose slots live on all three masters."""
        namespace = f"c-{uuid.uuid4().hex}"

        async def scenario() -> list[tuple[int, bool, int]]:
            store = RedisTokenStore(redis_cluster.url, namespace=namespace)
            try:
                for index in range(ROLLOUTS):
                    await store.begin_call(f"r{index}", "a")
                    await store.put(entry(f"r{index}", "a"))
                    await store.put(entry(f"r{index}", "b"))
                snapshots = [await store.freeze(f"r{index}") for index in range(ROLLOUTS)]
                dropped = [
                    await store.drop(f"r{i}", snapshot_id=s.snapshot_id, version=s.version)
                    for i, s in enumerate(snapshots)
                ]
                assert store.cluster is True
                return [
                    (len(s.entries), s.incomplete, d)
                    for s, d in zip(snapshots, dropped, strict=True)
                ]
            finally:
                await store.close()

        assert asyncio.run(scenario()) == [(2, False, True)] * ROLLOUTS
        counts = node_keys(redis_cluster, namespace)
        assert all(counts), f"expected tombstones on every master, got {counts}"
        assert sum(counts) == ROLLOUTS

    def test_reads_the_settings_of_every_primary(self, redis_cluster: RedisClusterNodes) -> None:
        """One evicting primary, not the one in the URL, is named when the store refuses."""
        evicting = redis_cluster.nodes[-1].port

        async def scenario() -> str | None:
            store = RedisTokenStore(redis_cluster.url, namespace=f"s-{uuid.uuid4().hex}")
            try:
                await store.freeze("r")
                return store.durability
            finally:
                await store.close()

        assert asyncio.run(scenario()) == "aof-always"
        redis_cluster.node_cli(evicting, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        try:
            with pytest.raises(StoreWriteError, match=f"127.0.0.1:{evicting} has allkeys-lru"):
                asyncio.run(scenario())
        finally:
            redis_cluster.node_cli(evicting, "CONFIG", "SET", "maxmemory-policy", "noeviction")

    def test_cluster_true_on_a_single_node_is_refused_typed(
        self, redis_server: RedisServer
    ) -> None:
        """Asking for a cluster client against a plain node raises StoreWriteError on first use."""

        async def scenario() -> None:
            store = RedisTokenStore(redis_server.url, cluster=True, retries=0)
            try:
                await store.freeze("r")
            finally:
                await store.close()

        with pytest.raises(StoreWriteError, match="freeze on rollout 'r' failed"):
            asyncio.run(scenario())

    def test_wait_replicas_is_refused_on_a_cluster(self, redis_cluster: RedisClusterNodes) -> None:
        """wait_replicas on a cluster is refused, saying it needs a single node."""

        async def scenario() -> None:
            store = RedisTokenStore(redis_cluster.url, wait_replicas=1)
            try:
                await store.put(entry("r", "a"))
            finally:
                await store.close()

        with pytest.raises(StoreWriteError, match="wait_replicas needs a single Redis node"):
            asyncio.run(scenario())


def ids_in_one_slot(count: int) -> tuple[int, list[str]]:
    """Return a slot and ``count`` rollout ids whose keys all hash to it."""
    first = "move-0"
    slot = key_slot(first.encode())
    found = [first]
    for index in itertools.count(1):
        if len(found) == count:
            return slot, found
        candidate = f"move-{index}"
        if key_slot(candidate.encode()) == slot:
            found.append(candidate)
    raise AssertionError("unreachable")


class SlotMove:
    """Moves one slot between two masters key by key, letting puts run between the steps."""

    def __init__(self, cluster: RedisClusterNodes, slot: int) -> None:
        self.cluster = cluster
        self.slot = slot
        self.admin = {
            node.port: aioredis.Redis(host="127.0.0.1", port=node.port) for node in cluster.nodes
        }

    async def owner(self) -> int:
        """Return the port of the master that serves the slot."""
        for port, admin in self.admin.items():
            if await self._serves(admin):
                return port
        raise AssertionError(f"no master serves slot {self.slot}")

    async def _serves(self, admin: aioredis.Redis) -> bool:
        myid = (await admin.execute_command("CLUSTER", "MYID")).decode()
        for line in (await admin.execute_command("CLUSTER", "NODES")).decode().splitlines():
            fields = line.split()
            if fields[0] != myid:
                continue
            for span in fields[8:]:
                low, _, high = span.partition("-")
                if low.isdigit() and int(low) <= self.slot <= int(high or low):
                    return True
        return False

    async def run(self, between: Callable[[], Any]) -> tuple[int, int, int]:
        """Move the slot to another master; await ``between()`` after every step."""
        source = await self.owner()
        target = next(port for port in self.admin if port != source)
        src, dst = self.admin[source], self.admin[target]
        src_id = (await src.execute_command("CLUSTER", "MYID")).decode()
        dst_id = (await dst.execute_command("CLUSTER", "MYID")).decode()
        await dst.execute_command("CLUSTER", "SETSLOT", self.slot, "IMPORTING", src_id)
        await src.execute_command("CLUSTER", "SETSLOT", self.slot, "MIGRATING", dst_id)
        await between()
        moved = 0
        while keys := await src.execute_command("CLUSTER", "GETKEYSINSLOT", self.slot, 10):
            for key in keys:
                await src.execute_command("MIGRATE", "127.0.0.1", target, key, 0, 5000)
                moved += 1
                await between()
        for admin in (dst, src, *(a for p, a in self.admin.items() if p not in (source, target))):
            await admin.execute_command("CLUSTER", "SETSLOT", self.slot, "NODE", dst_id)
        await between()
        return source, target, moved

    async def close(self) -> None:
        for admin in self.admin.values():
            await admin.aclose()


def test_a_slot_moving_under_puts_loses_no_acked_entry(redis_cluster: RedisClusterNodes) -> None:
    """While a slot moves key by key, every acked put is frozen after and every refusal is typed."""
    slot, rollouts = ids_in_one_slot(3)
    namespace = f"m-{uuid.uuid4().hex}"
    acked: set[tuple[str, str]] = set()
    refused: list[BaseException] = []
    attempts = 0

    async def scenario() -> tuple[tuple[int, int, int], int, dict[str, Any]]:
        nonlocal attempts
        store = RedisTokenStore(redis_cluster.url, namespace=namespace)
        stop = asyncio.Event()
        advanced = asyncio.Condition()

        async def writer(worker: int) -> None:
            nonlocal attempts
            for index in itertools.count():
                if stop.is_set():
                    return
                rollout = rollouts[index % len(rollouts)]
                call = f"w{worker}-{index}"
                try:
                    await store.put(entry(rollout, call))
                    acked.add((rollout, call))
                except Exception as exc:
                    refused.append(exc)
                async with advanced:
                    attempts += 1
                    advanced.notify_all()

        async def puts_ran(count: int = 8) -> None:
            async with advanced:
                goal = attempts + count
                await asyncio.wait_for(advanced.wait_for(lambda: attempts >= goal), 60)

        mover = SlotMove(redis_cluster, slot)
        try:
            tasks = [asyncio.create_task(writer(w)) for w in range(WRITERS)]
            await puts_ran()
            moved = await mover.run(puts_ran)
            stop.set()
            await asyncio.gather(*tasks)
            during = attempts
            frozen = {r: await store.freeze(r) for r in rollouts}
            return moved, during, frozen
        finally:
            await mover.close()
            await store.close()

    (source, target, moved), during, frozen = asyncio.run(scenario())
    assert source != target
    assert moved >= 2 * len(rollouts), "expected the rollouts' keys to move one by one"
    assert during > 8 * (moved + 3)
    for rollout, snapshot in frozen.items():
        calls = {e.model_call_id for e in snapshot.entries}
        assert {call for r, call in acked if r == rollout} <= calls
        assert not snapshot.incomplete
    untyped = [exc for exc in refused if not isinstance(exc, TokenCaptureError)]
    assert not untyped, untyped[:3]
    print(f"slot {slot} moved {source}->{target}: {len(acked)} acked, {len(refused)} refused")
