"""NeMo Gym 0.7.0's own capture path, in two model-server workers, on each reference store.

The harness sends each rollout's calls one after another, every call to the other worker than
the one before, as a load balancer does. Each worker resolves the parent with its own resolver
over the store, and Gym's ``capture_tokens`` stamps and puts the entry. Every continuation must
resolve to the call before it, so no rollout is masked; then the reference consumer builds each
rollout's row and retires it, exactly once.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from interop.gym_capture_path import Served, serve
from reference.consumer import FinalizedRollout, consume
from tokcap_spec.config import TokenIdCaptureSettings
from tokcap_spec.errors import RolloutRetiredError

ROLLOUTS = 6
CALLS = 4
Target = tuple[str, dict[str, Any]]


class Conversation:
    """One rollout's chat: the harness's requests and the model's responses, with tokens."""

    def __init__(self, rollout_id: str, rng: random.Random) -> None:
        self.rollout_id = rollout_id
        self.rng = rng
        self.items: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
        self.tokens: list[int] = [rng.randrange(1, 50_000) for _ in range(5)]

    def call(self, number: int) -> tuple[str, str, list[dict[str, Any]], dict[str, Any]]:
        """The next call: its id, the request the harness sends and the model's response."""
        self.items.append({"role": "user", "content": f"question {number} of {self.rollout_id}"})
        prompt = self.tokens + [self.rng.randrange(1, 50_000) for _ in range(3)]
        generation = [self.rng.randrange(1, 50_000) for _ in range(4)]
        answer = f"answer {number}"
        message = {
            "role": "assistant",
            "content": answer,
            "prompt_token_ids": prompt,
            "generation_token_ids": generation,
            "generation_log_probs": [-0.25] * len(generation),
        }
        request = list(self.items)
        self.items.append({"role": "assistant", "content": answer})
        self.tokens = prompt + generation
        response = {"id": f"resp-{uuid.uuid4().hex[:8]}", "choices": [{"message": message}]}
        return self.rollout_id, f"call-{number}", request, response


def run_capture(
    sink: Target, lineage: Target, workers: int, *, delta_records: bool = False
) -> list[Served]:
    """Serve ROLLOUTS rollouts of CALLS calls across ``workers`` spawned model servers."""
    context = multiprocessing.get_context("spawn")
    queues = [context.Queue() for _ in range(workers)]
    served_queue = context.Queue()
    processes = [
        context.Process(
            target=serve, args=(n, sink, lineage, queues[n], served_queue, delta_records)
        )
        for n in range(workers)
    ]
    for process in processes:
        process.start()
    rng = random.Random(7)
    conversations = [Conversation(f"gym-{uuid.uuid4().hex[:10]}", rng) for _ in range(ROLLOUTS)]
    served: list[Served] = []
    try:
        for number in range(CALLS):
            for index, conversation in enumerate(conversations):
                queues[(index + number) % workers].put(conversation.call(number))
            served += [served_queue.get(timeout=60) for _ in conversations]
    finally:
        for each in queues:
            each.put(None)
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.kill()
    assert [process.exitcode for process in processes] == [0] * workers
    return served


def judge(served: list[Served], source: Any) -> None:
    """Every continuation resolved to the call before it; every rollout consumed once."""
    for each in served:
        number = int(each.model_call_id.removeprefix("call-"))
        if number == 0:
            assert each.status == "root", each
        else:
            assert (each.status, each.parent_call_id) == ("resolved", f"call-{number - 1}"), each
    handed: list[FinalizedRollout] = []

    async def handoff(finalized: FinalizedRollout) -> None:
        handed.append(finalized)

    async def consume_all() -> None:
        settings = TokenIdCaptureSettings(enabled=True, sink="x:Y")
        for rollout in sorted({each.rollout_id for each in served}):
            consumed = await consume(source, rollout, handoff, config=settings)
            assert consumed is not None
            assert not consumed.finalized.masked, consumed.finalized.mask_reason
            assert consumed.dropped
            with pytest.raises(RolloutRetiredError):
                await source.freeze(rollout)
        await source.close()

    asyncio.run(consume_all())
    assert len(handed) == ROLLOUTS
    calls = tuple(f"call-{number}" for number in range(CALLS))
    assert all(f.row is not None and f.row.model_call_ids == calls for f in handed)


pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("gym_pythonpath")]


def test_the_file_store_serves_two_workers(tmp_path: Path) -> None:
    from reference.file_store import FileTokenStore

    kwargs = {"root": str(tmp_path)}
    served = run_capture(
        ("reference.file_store:FileTokenStore", kwargs),
        ("reference.lineage:FileLineageResolver", kwargs),
        workers=2,
    )
    assert {each.worker for each in served} == {0, 1}
    judge(served, FileTokenStore(**kwargs))


def test_the_file_store_serves_two_workers_writing_delta_records(tmp_path: Path) -> None:
    """With delta_records, as Gym's documented example has it, every call still resolves."""
    from reference.file_store import FileTokenStore

    kwargs = {"root": str(tmp_path)}
    served = run_capture(
        ("reference.file_store:FileTokenStore", kwargs),
        ("reference.lineage:FileLineageResolver", kwargs),
        workers=2,
        delta_records=True,
    )

    async def deltas() -> int:
        store = FileTokenStore(**kwargs)
        rollout = served[0].rollout_id
        entries = await store.peek(rollout)
        await store.close()
        return sum(bool(getattr(entry, "prompt_is_delta", False)) for entry in entries)

    assert asyncio.run(deltas()) == CALLS - 1
    judge(served, FileTokenStore(**kwargs))


def test_the_redis_store_serves_two_workers(redis_server: Any) -> None:
    from reference.redis_store import RedisTokenStore

    kwargs = {"url": redis_server.url, "namespace": f"gym-{uuid.uuid4().hex[:8]}"}
    served = run_capture(
        ("reference.redis_store:RedisTokenStore", kwargs),
        ("reference.lineage:RedisLineageResolver", kwargs),
        workers=2,
    )
    judge(served, RedisTokenStore(**kwargs))


def test_the_memory_store_serves_one_worker() -> None:
    """The process-local store and resolver serve Gym's path in the one process they share.

    Gym refuses more than one worker with a resolver whose ``is_process_shared()`` is False,
    so the harness's calls all go to a worker running here, on a thread.
    """
    import queue
    import threading

    from reference.memory_store import MemoryTokenStore

    kwargs = {"namespace": f"gym-{uuid.uuid4().hex[:8]}"}
    calls: queue.Queue[Any] = queue.Queue()
    served_queue: queue.Queue[Served] = queue.Queue()
    worker = threading.Thread(
        target=serve,
        args=(
            0,
            ("reference.memory_store:MemoryTokenStore", kwargs),
            ("reference.lineage:MemoryLineageResolver", kwargs),
            calls,
            served_queue,
        ),
    )
    worker.start()
    rng = random.Random(11)
    conversations = [Conversation(f"gym-{uuid.uuid4().hex[:10]}", rng) for _ in range(ROLLOUTS)]
    served: list[Served] = []
    try:
        for number in range(CALLS):
            for conversation in conversations:
                calls.put(conversation.call(number))
            served += [served_queue.get(timeout=60) for _ in conversations]
    finally:
        calls.put(None)
        worker.join(30)
    judge(served, MemoryTokenStore(**kwargs))


def test_a_resolver_that_never_resolves_masks_nothing_silently(tmp_path: Path) -> None:
    """The proof can fail: with a resolver that never proves a parent, no call resolves."""
    kwargs = {"root": str(tmp_path)}
    served = run_capture(
        ("reference.file_store:FileTokenStore", kwargs),
        ("interop.test_gym_capture_path:NeverResolves", kwargs),
        workers=2,
    )
    assert {each.status for each in served if each.model_call_id != "call-0"} == {"unresolved"}


class NeverResolves:
    """A resolver that answers unresolved to every request with history."""

    def __init__(self, root: str) -> None:
        self.root = root

    async def resolve(self, rollout_id: str, request_items: list[dict[str, Any]]) -> Any:
        from tokcap_spec.lineage import LineageResolution, ParentResolutionStatus

        return LineageResolution(ParentResolutionStatus.UNRESOLVED, reason="never")

    def is_process_shared(self) -> bool:
        return True

    async def close(self) -> None:
        return None
