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
RESHARD_SLOTS = 2000


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


def served_slots(cluster: RedisClusterNodes, port: int) -> set[int]:
    """The slots the master at ``port`` serves, as its own CLUSTER NODES line says."""
    for line in cluster.node_cli(port, "CLUSTER", "NODES").splitlines():
        fields = line.split()
        if "myself" in fields[2]:
            return {
                slot
                for span in fields[8:]
                if span[0].isdigit()
                for slot in range(int(span.split("-")[0]), int(span.split("-")[-1]) + 1)
            }
    raise AssertionError(f"node {port} did not name itself in CLUSTER NODES")


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

    def owner(self) -> int:
        """Return the port of the master that serves the slot."""
        (port,) = [
            n.port for n in self.cluster.nodes if self.slot in served_slots(self.cluster, n.port)
        ]
        return port

    async def run(self, between: Callable[[], Any]) -> tuple[int, int, int]:
        """Move the slot to another master; await ``between()`` after every step."""
        source = self.owner()
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


class Writers:
    """WRITERS concurrent writers putting new calls into ``rollouts`` until stopped."""

    def __init__(self, store: RedisTokenStore, rollouts: list[str]) -> None:
        self.store = store
        self.rollouts = rollouts
        self.acked: set[tuple[str, str]] = set()
        self.refused: list[BaseException] = []
        self.attempts = 0
        self._stop = asyncio.Event()
        self._advanced = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._write(w)) for w in range(WRITERS)]

    async def _write(self, worker: int) -> None:
        for index in itertools.count():
            if self._stop.is_set():
                return
            rollout = self.rollouts[(index * WRITERS + worker) % len(self.rollouts)]
            call = f"w{worker}-{index}"
            try:
                await self.store.put(entry(rollout, call))
                self.acked.add((rollout, call))
            except Exception as exc:
                self.refused.append(exc)
            async with self._advanced:
                self.attempts += 1
                self._advanced.notify_all()

    async def ran(self, count: int = 8) -> None:
        """Return once ``count`` more puts were acked or refused."""
        async with self._advanced:
            goal = self.attempts + count
            await asyncio.wait_for(self._advanced.wait_for(lambda: self.attempts >= goal), 60)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def check(self) -> None:
        """Every acked entry is in its rollout's freeze, clean, and every refusal is typed."""
        for rollout in self.rollouts:
            snapshot = await self.store.freeze(rollout)
            calls = {e.model_call_id for e in snapshot.entries}
            assert {call for r, call in self.acked if r == rollout} <= calls, rollout
            assert not snapshot.incomplete, rollout
        untyped = [exc for exc in self.refused if not isinstance(exc, TokenCaptureError)]
        assert not untyped, untyped[:3]


def test_a_slot_moving_under_puts_loses_no_acked_entry(redis_cluster: RedisClusterNodes) -> None:
    """While a slot moves key by key, every acked put is frozen after and every refusal is typed."""
    slot, rollouts = ids_in_one_slot(3)

    async def scenario() -> tuple[tuple[int, int, int], Writers]:
        store = RedisTokenStore(redis_cluster.url, namespace=f"m-{uuid.uuid4().hex}")
        writers = Writers(store, rollouts)
        mover = SlotMove(redis_cluster, slot)
        try:
            writers.start()
            await writers.ran()
            moved = await mover.run(writers.ran)
            await writers.stop()
            await writers.check()
            return moved, writers
        finally:
            await mover.close()
            await store.close()

    (source, target, moved), writers = asyncio.run(scenario())
    assert source != target
    assert moved >= 2 * len(rollouts), "expected the rollouts' keys to move one by one"
    assert writers.attempts >= 8 * (moved + 3)
    print(f"slot {slot}: {len(writers.acked)} acked, {len(writers.refused)} refused")


@pytest.mark.slow
def test_a_reshard_under_puts_loses_no_acked_entry(redis_cluster: RedisClusterNodes) -> None:
    """`redis-cli --cluster reshard` of 2000 slots under puts loses nothing, types every refusal."""
    rollouts = [f"rs-{index}" for index in range(300)]
    source, target = redis_cluster.nodes[0].port, redis_cluster.nodes[1].port
    ids = [redis_cluster.node_cli(port, "CLUSTER", "MYID").strip() for port in (source, target)]
    before = served_slots(redis_cluster, source)

    async def scenario() -> Writers:
        store = RedisTokenStore(redis_cluster.url, namespace=f"rs-{uuid.uuid4().hex}")
        writers = Writers(store, rollouts)
        try:
            writers.start()
            await writers.ran(100)
            reshard = await asyncio.create_subprocess_exec(
                redis_cluster.cli,
                "--cluster", "reshard", f"127.0.0.1:{redis_cluster.nodes[0].port}",
                "--cluster-from", ids[0], "--cluster-to", ids[1],
                "--cluster-slots", str(RESHARD_SLOTS), "--cluster-yes",
                stdout=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            assert await reshard.wait() == 0
            await writers.ran(100)
            await writers.stop()
            await writers.check()
            return writers
        finally:
            await store.close()

    writers = asyncio.run(scenario())
    moved = before & served_slots(redis_cluster, target)
    assert len(moved) == RESHARD_SLOTS
    assert [r for r in rollouts if key_slot(r.encode()) in moved], "expected rollouts to move"
    assert writers.attempts > 200
    print(f"reshard: {len(writers.acked)} acked, {len(writers.refused)} refused")
