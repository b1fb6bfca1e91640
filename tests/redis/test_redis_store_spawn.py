"""RedisTokenStore shared by freshly spawned writers that know only its target and kwargs."""

from __future__ import annotations

import asyncio
import multiprocessing
import uuid
from typing import Any

from conftest import RedisServer

from reference.memory_store import MemoryTokenStore
from reference.redis_store import RedisTokenStore
from tokcap_spec.config import token_id_capture_config
from tokcap_spec.protocols import TokenCaptureSnapshot, install_token_sink, installed_token_sink
from tokcap_spec.records import TokenEntry

WRITERS = 4
CALLS = 25
OWN_ROLLOUTS = 3


def entry(rollout_id: str, writer: int, index: int) -> TokenEntry:
    """The one entry writer ``writer`` puts as call ``index`` of ``rollout_id``."""
    return TokenEntry(
        rollout_id=rollout_id,
        model_call_id=f"w{writer}-c{index}",
        prompt_token_ids=[writer, index],
        generation_token_ids=[writer * 1000 + index],
        generation_log_probs=[-float(index)],
        created_at=float(writer),
        writer=writer,
    )


def write(config: dict[str, Any], shared: str, own: list[str], writer: int, start: Any) -> None:
    """Build the sink from config alone, wait for every writer, then write interleaved."""

    async def main() -> None:
        assert installed_token_sink() is None, "a spawned writer inherited an installed sink"
        sink = token_id_capture_config(config).build_sink()
        assert sink is not None
        start.wait(timeout=60)
        try:
            for index in range(CALLS):
                await sink.put(entry(shared, writer, index))
                for rollout_id in own:
                    await sink.put(entry(rollout_id, writer, index))
        finally:
            await sink.close()

    asyncio.run(main())


def test_spawned_writers_lose_nothing_and_mix_nothing(redis_server: RedisServer) -> None:
    """Four spawned writers fill one shared rollout and their own; the parent sees all, unmixed."""
    namespace = f"spawn-{uuid.uuid4().hex}"
    config = {
        "token_id_capture": {
            "enabled": True,
            "sink": "reference.redis_store:RedisTokenStore",
            "sink_kwargs": {"url": redis_server.url, "namespace": namespace},
        }
    }
    own = {w: [f"own-{w}-{r}" for r in range(OWN_ROLLOUTS)] for w in range(WRITERS)}
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(WRITERS)
    writers = [
        context.Process(target=write, args=(config, "shared", own[w], w, start))
        for w in range(WRITERS)
    ]
    # Installed here, in the launcher: the writers must not see it.
    install_token_sink(MemoryTokenStore())
    try:
        for process in writers:
            process.start()
        for process in writers:
            process.join(timeout=120)
    finally:
        install_token_sink(None)
    assert [p.exitcode for p in writers] == [0] * WRITERS

    async def freeze_everything() -> dict[str, TokenCaptureSnapshot]:
        source = RedisTokenStore(redis_server.url, namespace=namespace)
        try:
            ids = ["shared", *(r for rollouts in own.values() for r in rollouts)]
            return {rollout_id: await source.freeze(rollout_id) for rollout_id in ids}
        finally:
            await source.close()

    snapshots = asyncio.run(freeze_everything())
    shared = snapshots.pop("shared")
    assert sorted(e.to_json_bytes() for e in shared.entries) == sorted(
        entry("shared", w, i).to_json_bytes() for w in range(WRITERS) for i in range(CALLS)
    )
    assert shared.version == WRITERS * CALLS
    assert not shared.incomplete
    for writer, rollouts in own.items():
        for rollout_id in rollouts:
            snapshot = snapshots[rollout_id]
            assert sorted(e.to_json_bytes() for e in snapshot.entries) == sorted(
                entry(rollout_id, writer, i).to_json_bytes() for i in range(CALLS)
            )
            assert not snapshot.incomplete
