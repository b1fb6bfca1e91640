"""What RedisTokenStore makes of a server's memory and persistence settings, on real servers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis
from conftest import DURABLE, VOLATILE, RedisServer, StartRedis

from reference.redis_store import RedisTokenStore
from tokcap_spec.errors import StoreWriteError
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry

T = TypeVar("T")
EVICTING = (*DURABLE, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
ROLLOUTS = 100
CALLS = 30


def entry(rollout_id: str, index: int, padding: int = 0) -> TokenEntry:
    return TokenEntry(
        rollout_id=rollout_id,
        model_call_id=f"c{index}",
        prompt_token_ids=[index] * padding,
        created_at=0.0,
    )


def with_store(store: RedisTokenStore, scenario: Callable[[RedisTokenStore], Awaitable[T]]) -> T:
    async def main() -> T:
        try:
            return await scenario(store)
        finally:
            await store.close()

    return asyncio.run(main())


async def freeze_r(store: RedisTokenStore) -> TokenCaptureSnapshot:
    return await store.freeze("r")


class TestEviction:
    def test_an_evicting_policy_is_refused_naming_the_setting_and_the_fix(
        self, start_redis: StartRedis
    ) -> None:
        """With allkeys-lru the first call raises, names the policy and the fix, writes nothing."""
        server = start_redis(EVICTING)

        async def put(store: RedisTokenStore) -> None:
            await store.put(entry("r", 0))

        with pytest.raises(StoreWriteError) as caught:
            with_store(RedisTokenStore(server.url), put)
        message = str(caught.value)
        assert "maxmemory-policy" in message
        assert "server has allkeys-lru" in message
        assert "CONFIG SET maxmemory-policy noeviction" in message
        assert "allow_eviction=True" in message
        with redis.Redis.from_url(server.url) as raw:
            assert raw.dbsize() == 0

    def test_a_volatile_policy_is_accepted(self, start_redis: StartRedis) -> None:
        """volatile-lru never evicts keys without a time to live, so it is accepted."""
        server = start_redis((*DURABLE, "--maxmemory-policy", "volatile-lru"))
        assert with_store(RedisTokenStore(server.url), freeze_r).entries == ()

    @pytest.mark.slow
    def test_with_the_opt_out_no_rollout_freezes_clean_and_short(
        self, start_redis: StartRedis
    ) -> None:
        """On a 2 MB allkeys-lru server, every rollout that lost entries freezes incomplete."""
        server = start_redis(EVICTING)

        async def scenario(store: RedisTokenStore) -> list[TokenCaptureSnapshot]:
            for index in range(CALLS):
                for rollout in range(ROLLOUTS):
                    await store.put(entry(f"r{rollout}", index, padding=100))
            return [await store.freeze(f"r{rollout}") for rollout in range(ROLLOUTS)]

        snapshots = with_store(RedisTokenStore(server.url, allow_eviction=True), scenario)
        with redis.Redis.from_url(server.url) as raw:
            evicted = int(raw.info("stats")["evicted_keys"])
        whole = [s for s in snapshots if len(s.entries) == CALLS]
        short = [s for s in snapshots if len(s.entries) < CALLS]
        assert evicted > 0, "expected the server to evict keys"
        assert short, "expected some rollouts to lose entries"
        assert [s.rollout_id for s in short if not s.incomplete] == []
        print(
            f"{ROLLOUTS * CALLS} puts acked, {evicted} keys evicted, {len(short)} rollouts short "
            f"(all incomplete), {len(whole)} whole ({sum(s.incomplete for s in whole)} incomplete)"
        )


class TestDurability:
    @pytest.mark.parametrize(
        ("settings", "durability"),
        [
            (DURABLE, "aof-always"),
            (("--appendonly", "yes", "--appendfsync", "everysec", "--save", ""), "aof-everysec"),
            (VOLATILE, "none"),
            (("--appendonly", "no", "--save", "3600 1"), "rdb-only"),
            ((*DURABLE, "--rename-command", "CONFIG", ""), "unknown"),
        ],
    )
    def test_reports_what_the_settings_promise(
        self, start_redis: StartRedis, settings: tuple[str, ...], durability: str
    ) -> None:
        """durability is None before the first call, then names the server's persistence.

        A server that refuses CONFIG GET, as managed services may, is reported as unknown.
        """
        server = start_redis(settings)
        store = RedisTokenStore(server.url)
        assert store.durability is None
        with_store(store, freeze_r)
        assert store.durability == durability

    def test_weak_persistence_is_logged_once(
        self, start_redis: StartRedis, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Three stores on a server without persistence log one warning naming the setting."""
        server = start_redis(VOLATILE)
        # A database no other test uses: a port freed by another test's server may come back.
        url = server.url.replace("/0", "/5")
        with caplog.at_level(logging.WARNING, logger="reference.redis_store"):
            for _ in range(3):
                with_store(RedisTokenStore(url), freeze_r)
        (record,) = caplog.records
        assert "durability none: a restart loses every acknowledged write" in record.message
        assert "appendfsync always" in record.message

    def test_fsynced_persistence_logs_nothing(
        self, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A server with appendonly yes and appendfsync always gives no warning."""
        with caplog.at_level(logging.WARNING, logger="reference.redis_store"):
            with_store(RedisTokenStore(redis_server.url, namespace="quiet"), freeze_r)
        assert caplog.records == []


class TestFullServer:
    def test_a_full_noeviction_server_still_drains(self, start_redis: StartRedis) -> None:
        """When full, frozen rollouts freeze again and drop; puts, marks and new freezes raise."""
        server = start_redis((*DURABLE, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction"))

        async def scenario(store: RedisTokenStore) -> dict[str, Any]:
            await store.put(entry("done", 0, padding=10))
            first = await store.freeze("done")
            errors: dict[str, Any] = {"first": first}
            # Big entries fill the server fast; small ones then take it to the last byte.
            for first_call, padding in ((0, 20_000), (10_000, 10)):
                try:
                    for index in range(first_call, first_call + 10_000):
                        await store.put(entry("filler", index, padding=padding))
                except StoreWriteError as exc:
                    errors["put"] = str(exc)
                else:
                    raise AssertionError("expected the server to fill up within 10000 puts")
            errors["again"] = await store.freeze("done")
            for name, call in [
                ("mark", lambda: store.mark_incomplete("done")),
                ("new-freeze", lambda: store.freeze("fresh")),
                ("new-put", lambda: store.put(entry("open", 1))),
            ]:
                with pytest.raises(StoreWriteError, match="OutOfMemoryError") as caught:
                    await call()
                errors[name] = str(caught.value)
            errors["dropped"] = await store.drop(
                "done", snapshot_id=first.snapshot_id, version=first.version
            )
            return errors

        seen = with_store(RedisTokenStore(server.url, retries=0), scenario)
        assert "put on rollout 'filler' failed (OutOfMemoryError" in seen["put"]
        assert seen["again"] == seen["first"]
        assert "mark_incomplete on rollout 'done' failed (OutOfMemoryError" in seen["mark"]
        assert seen["dropped"] is True
