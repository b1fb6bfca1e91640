"""Measure how many acknowledged puts per second a sink sustains, straight through its API.

    python examples/gym_server/measure_puts.py reference.redis_store:RedisTokenStore \
        '{"url": "redis://127.0.0.1:6379/0"}' --puts 2000 --concurrency 16

The sink is built exactly as a worker builds it (``module:Class`` plus JSON kwargs). Puts go to
``--rollouts`` fresh rollouts with ``--concurrency`` of them in flight; one line is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid

from tokcap_spec.config import token_id_capture_config
from tokcap_spec.records import TokenEntry


async def measure(
    target: str, kwargs: dict[str, object], puts: int, rollouts: int, width: int
) -> float:
    """Return the puts per second of ``puts`` acknowledged puts, ``width`` at a time."""
    config = {"token_id_capture": {"enabled": True, "sink": target, "sink_kwargs": kwargs}}
    sink = token_id_capture_config(config).build_sink()
    assert sink is not None
    run = uuid.uuid4().hex[:8]
    entries = [
        TokenEntry(
            rollout_id=f"bench-{run}-{i % rollouts}",
            model_call_id=f"call-{i}",
            prompt_token_ids=list(range(512)),
            generation_token_ids=list(range(128)),
            generation_log_probs=[-0.5] * 128,
        )
        for i in range(puts)
    ]
    gate = asyncio.Semaphore(width)

    async def put(entry: TokenEntry) -> None:
        async with gate:
            await sink.put(entry)

    try:
        started = time.perf_counter()
        await asyncio.gather(*(put(entry) for entry in entries))
        return puts / (time.perf_counter() - started)
    finally:
        await sink.close()


def main() -> None:
    """Parse the command line, measure once and print the rate."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="module.path:ClassName of the sink")
    parser.add_argument("kwargs", help="the sink's keyword arguments as a JSON object")
    parser.add_argument("--puts", type=int, default=2000)
    parser.add_argument("--rollouts", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=16)
    options = parser.parse_args()
    rate = asyncio.run(
        measure(
            options.target,
            json.loads(options.kwargs),
            options.puts,
            options.rollouts,
            options.concurrency,
        )
    )
    print(
        f"{options.target}: {options.puts} puts, {options.concurrency} in flight: {rate:.0f} puts/s"
    )


if __name__ == "__main__":
    main()
