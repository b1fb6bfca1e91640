"""RedisStagingStore's own promises, on real servers: one node, a cluster, servers that fail.

What every staging store promises (round trips, refusals, float bits, attachments, threads) is
tested on this store too, with the others, in ``tests/reference/test_staging_stores.py``; here
are the cluster, other processes, the server's failures and settings, and the password.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import importlib
import json
import logging
import multiprocessing
import struct
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from conftest import DURABLE, VOLATILE, RedisClusterNodes, RedisServer, StartRedis, free_port
from spec.staged_calls import FLOAT32_TINIEST, call_fields

from reference import RedisStagingStore
from tokcap_spec.staging import (
    StagedCallCorruptError,
    StagedCallMissingError,
    StagedCallRecord,
    distinct_staging_key,
)

SPAWN = multiprocessing.get_context("spawn")
TARGET = "reference.staging_redis:RedisStagingStore"
PASSWORD = "s3cr3t-value"


def record(rollout_id: str = "rollout-1", model_call_id: str = "call-1", **fields: Any) -> Any:
    fields.update(rollout_id=rollout_id, model_call_id=model_call_id)
    return StagedCallRecord.model_validate(call_fields(**fields))


def bits(values: list[float]) -> list[str]:
    return [struct.pack(">d", value).hex() for value in values]


def redis_name(namespace: str, key: str) -> str:
    return f"{namespace}:staged:{hashlib.sha256(key.encode()).hexdigest()}"


@pytest.fixture
def namespace() -> str:
    return f"s-{uuid.uuid4().hex}"


@pytest.fixture
def store(redis_server: RedisServer, namespace: str) -> Iterator[RedisStagingStore]:
    opened = RedisStagingStore(redis_server.url, namespace=namespace)
    yield opened
    opened.close()


def built(target: str, kwargs_json: str) -> Any:
    """The object ``module:Class`` names, built from JSON kwargs, as a config would build it."""
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)(**json.loads(kwargs_json))


def _spawned_fetcher(target: str, kwargs_json: str, keys: list[str]) -> list[Any]:
    store = built(target, kwargs_json)
    try:
        rows, extras = store.fetch(keys), store.fetch_extras(keys)
        return [
            (row.digest, bits(row.generation_log_probs_delta), extra, store.fetch_attachments(key))
            for row, extra, key in zip(rows, extras, keys, strict=True)
        ]
    finally:
        store.close()


def _spawned_stager(store: RedisStagingStore, worker: int, calls: int) -> list[bool]:
    """Stage through a store pickled by the parent: it connects afresh in this process."""
    try:
        return [
            store.stage(record(f"w/{worker}", f"c{call}", weight_version=worker)).ok
            for call in range(calls)
        ]
    finally:
        store.close()


class TestConstruction:
    def test_builds_from_kwargs_alone_and_connects_to_nothing(self) -> None:
        """A URL whose port nothing listens on builds a store; only a call reaches for it."""
        store = built(TARGET, json.dumps({"url": f"redis://127.0.0.1:{free_port()}/0"}))
        assert isinstance(store, RedisStagingStore)
        assert store.durability is None
        assert store.cluster is None
        store.close()
        store.close()

    @pytest.mark.parametrize(
        ("kwarg", "value"),
        [
            ("retries", -1),
            ("retries", True),
            ("socket_timeout", 0),
            ("socket_timeout", float("inf")),
            ("cluster", "yes"),
            ("allow_eviction", None),
        ],
    )
    def test_refuses_a_bad_option_naming_it(self, kwarg: str, value: object) -> None:
        with pytest.raises(ValueError, match=f"{kwarg} must be .*got {value!r}"):
            RedisStagingStore("redis://127.0.0.1:1/0", **{kwarg: value})

    @pytest.mark.parametrize("namespace", ["", "a{b", "x" * 101])
    def test_refuses_a_namespace_that_would_gather_keys_in_one_slot(self, namespace: str) -> None:
        with pytest.raises(ValueError, match="namespace must be"):
            RedisStagingStore("redis://127.0.0.1:1/0", namespace=namespace)

    @pytest.mark.parametrize(
        ("url", "says"),
        [
            (f"http://user:{PASSWORD}@example/0", "got scheme 'http'"),
            (f"redis://:{PASSWORD}@h:1/0?socket_timeout=abc", r"url redis://:\*\*\*@h:1/0"),
        ],
    )
    def test_refuses_a_url_without_repeating_its_password(self, url: str, says: str) -> None:
        with pytest.raises(ValueError, match=says) as caught:
            RedisStagingStore(url)
        assert PASSWORD not in str(caught.value)

    def test_repr_hides_the_password(self) -> None:
        store = RedisStagingStore(f"redis://user:{PASSWORD}@127.0.0.1:6379/2?password=other-pw")
        assert PASSWORD not in repr(store)
        assert "other-pw" not in repr(store)
        assert "user:***@127.0.0.1:6379/2" in repr(store)


class TestOnOneNode:
    def test_a_call_is_one_string_under_the_hash_of_its_key(
        self, store: RedisStagingStore, redis_server: RedisServer, namespace: str
    ) -> None:
        """Any id, any length, ``/`` included: the Redis name is fixed-length, the value names
        the key it holds, and nothing else is stored."""
        staged = [record("a/b", "c"), record("a", "b/c"), record("r" * 5000, "%2F/" * 100)]
        keys = [store.stage(call).staging_key for call in staged]
        assert keys[:2] == ["a%2Fb/c", "a/b%2Fc"]
        with redis.Redis.from_url(redis_server.url) as raw:
            names = sorted(name.decode() for name in raw.scan_iter(match=f"{namespace}:*"))
            assert names == sorted(redis_name(namespace, key) for key in keys)  # type: ignore[arg-type]
            for key in keys:
                assert json.loads(raw.get(redis_name(namespace, key)))["key"] == key
        assert [row.rollout_id for row in store.fetch(keys)] == ["a/b", "a", "r" * 5000]  # type: ignore[arg-type]

    def test_a_fresh_instance_in_a_spawned_process_fetches_what_was_staged(
        self, store: RedisStagingStore, redis_server: RedisServer, namespace: str
    ) -> None:
        """Built there from ``module:Class`` and JSON kwargs; floats, extras and attachments as
        staged, bit for bit."""
        log_probs = [0.0, -0.0, -FLOAT32_TINIEST]
        first = record("r/1", "c1", log_probs=log_probs, mask=(0.0, 1.0, 1.0), extras={"z": -0.0})
        second = record("r", "1/c1")
        keys = [
            store.stage(first, attachments={"image": bytes(range(256))}).staging_key,
            store.stage(second).staging_key,
        ]
        kwargs = json.dumps({"url": redis_server.url, "namespace": namespace})
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=SPAWN) as pool:
            fetched = pool.submit(_spawned_fetcher, TARGET, kwargs, keys[::-1]).result(120)
        assert fetched == [
            (second.digest, bits(second.generation_log_probs_delta), None, {}),
            (first.digest, bits(log_probs), {"z": -0.0}, {"image": bytes(range(256))}),
        ]
        assert bits([fetched[1][2]["z"]]) == bits([-0.0])

    def test_a_pickled_store_stages_from_spawned_processes(self, store: RedisStagingStore) -> None:
        assert store.stage(record()).ok  # connected here; the copies connect on their own
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=SPAWN) as pool:
            outcomes = list(pool.map(_spawned_stager, [store, store], [0, 1], [5, 5]))
        assert outcomes == [[True] * 5, [True] * 5]
        rows = store.fetch([distinct_staging_key("w/1", f"c{call}") for call in range(5)])
        assert {row.weight_version for row in rows} == {1}

    def test_a_stored_call_survives_a_server_crash(self, start_redis: StartRedis) -> None:
        """On an fsynced append-only file an ok stage outlives a killed server: the same
        instance, reconnecting, and a fresh one fetch it."""
        server = start_redis()
        store = RedisStagingStore(server.url)
        staged = record(extras={"x": 1})
        key = store.stage(staged).staging_key
        assert store.durability == "aof-always"
        server.kill()
        server.start()
        assert store.fetch([key])[0].digest == staged.digest  # type: ignore[list-item]
        assert RedisStagingStore(server.url).fetch_extras([key]) == [{"x": 1}]  # type: ignore[list-item]
        store.close()

    def test_close_is_idempotent_and_the_store_reconnects(self, store: RedisStagingStore) -> None:
        assert store.stage(record("r", "a")).ok
        store.close()
        store.close()
        assert store.stage(record("r", "b")).ok
        assert len(store.fetch(["r/a", "r/b"])) == 2

    def test_a_damaged_value_is_reported_and_kept(
        self, store: RedisStagingStore, redis_server: RedisServer, namespace: str
    ) -> None:
        key = store.stage(record()).staging_key
        assert key is not None
        name = redis_name(namespace, key)
        with redis.Redis.from_url(redis_server.url) as raw:
            raw.set(name, raw.get(name).replace(b'"weight_version": 3', b'"weight_version": 4'))
            with pytest.raises(StagedCallCorruptError, match="digest"):
                store.fetch([key])
            refused = store.stage(record())
            assert not refused.ok
            assert "unreadable" in (refused.error or "")
            assert b'"weight_version": 4' in raw.get(name)

    def test_a_name_holding_another_type_fails_the_call(
        self, store: RedisStagingStore, redis_server: RedisServer, namespace: str
    ) -> None:
        with redis.Redis.from_url(redis_server.url) as raw:
            raw.hset(redis_name(namespace, "rollout-1/call-1"), "f", "v")
        result = store.stage(record())
        assert not result.ok
        assert "WRONGTYPE" in (result.error or "")
        with pytest.raises(OSError, match="WRONGTYPE"):
            store.fetch(["rollout-1/call-1"])


class TestFailingServers:
    def test_a_stopped_server_fails_the_stage_without_the_password(
        self, start_redis: StartRedis, caplog: pytest.LogCaptureFixture
    ) -> None:
        server = start_redis((*VOLATILE, "--requirepass", PASSWORD))
        store = RedisStagingStore(f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0", retries=1)
        with caplog.at_level(logging.DEBUG):
            assert store.stage(record("r", "before")).ok
            assert store.durability == "none"
            server.stop()
            result = store.stage(record("r", "after"))
            with pytest.raises(OSError, match="fetch of 'r/before' failed") as fetching:
                store.fetch(["r/before"])
        assert not result.ok
        assert result.staging_key is None
        assert "ConnectionError" in (result.error or "")
        assert f"redis://:***@127.0.0.1:{server.port}/0" in (result.error or "")
        assert "durability none" in caplog.text
        for text in (result.error or "", str(fetching.value), repr(fetching.value), caplog.text):
            assert PASSWORD not in text
        assert fetching.value.__cause__ is None
        store.close()

    def test_a_closed_port_fails_the_stage_without_the_password(self) -> None:
        url = f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0?password={PASSWORD}-too"
        result = RedisStagingStore(url, retries=0).stage(record())
        assert not result.ok
        assert "could not store the call" in (result.error or "")
        assert PASSWORD not in (result.error or "")

    def test_a_wrong_password_fails_the_stage_without_either(self, start_redis: StartRedis) -> None:
        server = start_redis((*DURABLE, "--requirepass", "right-password"))
        store = RedisStagingStore(f"redis://:wrong-password@127.0.0.1:{server.port}/0")
        result = store.stage(record())
        assert not result.ok
        assert "AuthenticationError" in (result.error or "")
        assert "wrong-password" not in (result.error or "")
        assert "right-password" not in (result.error or "")

    def test_a_full_server_refuses_new_calls_and_still_confirms_stored_ones(
        self, start_redis: StartRedis
    ) -> None:
        """Out of memory under noeviction: a new call fails and nothing is stored; staging a
        stored call again only reads, and is ok."""
        server = start_redis((*DURABLE, "--maxmemory-policy", "noeviction"))
        store = RedisStagingStore(server.url)
        assert store.stage(record("r", "stored")).ok
        with redis.Redis.from_url(server.url) as raw:
            raw.config_set("maxmemory", 1)
            result = store.stage(record("r", "new"))
            assert store.stage(record("r", "stored")).ok
            raw.config_set("maxmemory", 0)
        assert not result.ok
        assert "OutOfMemoryError" in (result.error or "")
        with pytest.raises(StagedCallMissingError):
            store.fetch(["r/new"])
        store.close()

    def test_a_read_only_replica_fails_the_stage_and_stores_nothing(
        self, start_redis: StartRedis
    ) -> None:
        primary = start_redis(name="primary")
        replica = start_redis(
            (*DURABLE, "--replicaof", "127.0.0.1", str(primary.port)), name="replica"
        )
        result = RedisStagingStore(replica.url).stage(record())
        assert not result.ok
        assert "ReadOnlyError" in (result.error or "")
        for server in (primary, replica):
            with pytest.raises(StagedCallMissingError):
                RedisStagingStore(server.url).fetch(["rollout-1/call-1"])

    def test_an_evicting_policy_is_refused_unless_allowed(self, start_redis: StartRedis) -> None:
        server = start_redis((*DURABLE, "--maxmemory-policy", "allkeys-lru"))
        refused = RedisStagingStore(server.url).stage(record())
        assert not refused.ok
        assert "maxmemory-policy evicts staged calls" in (refused.error or "")
        assert "allkeys-lru" in (refused.error or "")
        assert RedisStagingStore(server.url, allow_eviction=True).stage(record()).ok


THREADS = 8


class TestOnACluster:
    @pytest.fixture
    def on_cluster(
        self, redis_cluster: RedisClusterNodes, namespace: str
    ) -> Iterator[RedisStagingStore]:
        opened = RedisStagingStore(redis_cluster.url, namespace=namespace)
        yield opened
        opened.close()

    def test_calls_round_trip_from_every_master(
        self, on_cluster: RedisStagingStore, redis_cluster: RedisClusterNodes, namespace: str
    ) -> None:
        """From one node's URL the store finds the cluster; calls land on all three masters
        and fetch back in the order asked for, missing keys all named."""
        staged = [record(f"r/{index}", "c/0", weight_version=index) for index in range(30)]
        keys = [
            on_cluster.stage(call, attachments={"i": str(n)}).staging_key
            for n, call in enumerate(staged)
        ]
        assert None not in keys
        assert on_cluster.cluster is True
        assert on_cluster.durability == "aof-always"
        counts = []
        for node in redis_cluster.nodes:
            with redis.Redis(host="127.0.0.1", port=node.port) as raw:
                counts.append(sum(1 for _ in raw.scan_iter(match=f"{namespace}:staged:*")))
        assert sum(counts) == 30
        assert all(counts)
        asked = [keys[7], keys[0], keys[7], keys[29]]
        rows = on_cluster.fetch(asked)  # type: ignore[arg-type]
        assert [row.weight_version for row in rows] == [7, 0, 7, 29]
        assert on_cluster.fetch_attachments(keys[3]) == {"i": "3"}  # type: ignore[arg-type]
        with pytest.raises(StagedCallMissingError) as raised:
            on_cluster.fetch(["gone/1", keys[1], "gone/2"])  # type: ignore[list-item]
        assert raised.value.keys == ("gone/1", "gone/2")

    def test_another_call_under_a_stored_key_is_refused(
        self, on_cluster: RedisStagingStore
    ) -> None:
        assert on_cluster.stage(record()).ok
        assert on_cluster.stage(record()).ok
        refused = on_cluster.stage(record(weight_version=9))
        assert not refused.ok
        assert "already holds another call" in (refused.error or "")
        assert on_cluster.fetch(["rollout-1/call-1"])[0].weight_version == 3

    def test_threads_racing_for_keys_leave_one_winner_each(
        self, on_cluster: RedisStagingStore
    ) -> None:
        start = threading.Barrier(THREADS)

        def work(thread: int) -> list[bool]:
            start.wait()
            return [
                on_cluster.stage(record(f"race/{key}", "c", weight_version=thread)).ok
                for key in range(10)
            ]

        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            outcomes = list(pool.map(work, range(THREADS)))
        for key in range(10):
            winners = [thread for thread in range(THREADS) if outcomes[thread][key]]
            assert len(winners) == 1
            (row,) = on_cluster.fetch([distinct_staging_key(f"race/{key}", "c")])
            assert row.weight_version == winners[0]
