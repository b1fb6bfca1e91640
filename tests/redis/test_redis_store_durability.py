"""What RedisTokenStore keeps across a server crash, with and without durable server settings."""

from __future__ import annotations

import asyncio

import pytest
from conftest import DURABLE, VOLATILE, StartRedis

from reference.redis_store import RedisTokenStore
from tokcap_spec.errors import RolloutFrozenError, StoreWriteError
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry

CALLS = 20


def entry(rollout_id: str, index: int) -> TokenEntry:
    return TokenEntry(
        rollout_id=rollout_id,
        model_call_id=f"call-{index}",
        prompt_token_ids=[index],
        generation_token_ids=[index + 1],
        generation_log_probs=[float("-inf")],
        created_at=0.0,
    )


async def write(url: str) -> None:
    store = RedisTokenStore(url)
    try:
        for index in range(CALLS):
            await store.put(entry("kept", index))
        await store.mark_incomplete("masked")
        await store.freeze("fenced")
    finally:
        await store.close()


async def freeze_all(url: str) -> dict[str, TokenCaptureSnapshot]:
    store = RedisTokenStore(url)
    try:
        return {r: await store.freeze(r) for r in ("kept", "masked", "fenced")}
    finally:
        await store.close()


class TestRestart:
    def test_durable_settings_keep_every_acked_write_through_sigkill(
        self, start_redis: StartRedis
    ) -> None:
        """With an fsynced append-only file, a SIGKILLed server restarts with every acked write."""
        server = start_redis(DURABLE)
        asyncio.run(write(server.url))
        fenced_before = asyncio.run(_freeze(server.url, "fenced")).snapshot_id
        server.kill()
        server.start()
        with pytest.raises(RolloutFrozenError):
            asyncio.run(_put(server.url, entry("fenced", 0)))
        snapshots = asyncio.run(freeze_all(server.url))
        assert sorted(e.model_call_id for e in snapshots["kept"].entries) == sorted(
            f"call-{i}" for i in range(CALLS)
        )
        assert snapshots["kept"].version == CALLS
        assert snapshots["masked"].incomplete
        assert snapshots["fenced"].snapshot_id == fenced_before

    def test_without_persistence_a_sigkill_loses_everything(self, start_redis: StartRedis) -> None:
        """With no append-only file and no snapshots, a SIGKILLed server restarts empty."""
        server = start_redis(VOLATILE)
        asyncio.run(write(server.url))
        server.kill()
        server.start()
        snapshots = asyncio.run(freeze_all(server.url))
        assert snapshots["kept"].entries == ()
        assert not snapshots["masked"].incomplete
        assert snapshots["fenced"].version == 0

    def test_one_instance_outlives_a_restart(self, start_redis: StartRedis) -> None:
        """A store whose server restarted reconnects on its next call and sees the old writes."""
        server = start_redis(DURABLE)

        async def scenario() -> TokenCaptureSnapshot:
            store = RedisTokenStore(server.url)
            try:
                await store.put(entry("r", 0))
                server.kill()
                server.start()
                await store.put(entry("r", 1))
                return await store.freeze("r")
            finally:
                await store.close()

        snapshot = asyncio.run(scenario())
        assert sorted(e.model_call_id for e in snapshot.entries) == ["call-0", "call-1"]

    def test_a_put_while_the_server_is_down_raises_and_acks_nothing(
        self, start_redis: StartRedis
    ) -> None:
        """A put to a stopped server raises StoreWriteError; after restart it is not there."""
        server = start_redis(DURABLE)

        async def scenario() -> None:
            store = RedisTokenStore(server.url, retries=1)
            try:
                await store.put(entry("r", 0))
                server.kill()
                with pytest.raises(StoreWriteError, match="put on rollout 'r' failed"):
                    await store.put(entry("r", 1))
            finally:
                await store.close()

        asyncio.run(scenario())
        server.start()
        (only,) = asyncio.run(_freeze(server.url, "r")).entries
        assert only.model_call_id == "call-0"


async def _put(url: str, one: TokenEntry) -> None:
    store = RedisTokenStore(url)
    try:
        await store.put(one)
    finally:
        await store.close()


async def _freeze(url: str, rollout_id: str) -> TokenCaptureSnapshot:
    store = RedisTokenStore(url)
    try:
        return await store.freeze(rollout_id)
    finally:
        await store.close()
