"""NeMo Gym 0.7.0's capture path in a spawned model-server worker, fed calls from a queue.

:func:`serve` is what one model-server process does for each call it is sent: build the capture
context with the worker's own sink and lineage resolver (built once, from their target strings
and kwargs, as Gym builds them), resolve the parent, record the call's intent, and capture the
response's tokens, all through the released ``nemo_gym.token_id_capture.sink``. It answers with
the parent decision it made.
"""

from __future__ import annotations

import asyncio
import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Served:
    """What a worker did with one call."""

    worker: int
    rollout_id: str
    model_call_id: str
    status: str
    parent_call_id: str | None
    reason: str


def _build(target: str, kwargs: dict[str, Any]) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)(**kwargs)


def serve(
    worker: int,
    sink: tuple[str, dict[str, Any]],
    lineage: tuple[str, dict[str, Any]],
    calls: Any,
    served: Any,
    delta_records: bool = False,
) -> None:
    """Serve calls from ``calls`` until it yields None; put a :class:`Served` for each.

    With ``delta_records`` a resolved call is stored as what its prompt adds to its parent's.
    """
    capture = importlib.import_module("nemo_gym.token_id_capture.sink")
    token_sink, resolver = _build(*sink), _build(*lineage)

    async def one(
        rollout_id: str, call_id: str, items: list[dict[str, Any]], response: Any
    ) -> None:
        context = capture.CaptureContext(
            rollout_id=rollout_id,
            model_call_id=call_id,
            token_sink=token_sink,
            lineage_store=resolver,
            delta_records=delta_records,
        )
        token = capture.set_token_sink(context)
        try:
            await capture.resolve_parent(items)
            await capture.register_call_intent()
            await capture.capture_tokens(response, items)
        finally:
            capture.reset_token_sink(token)
        decision = context.parent_resolution
        served.put(
            Served(
                worker,
                rollout_id,
                call_id,
                decision.status.value,
                context.parent_call_id,
                decision.reason,
            )
        )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        while (job := await loop.run_in_executor(None, calls.get)) is not None:
            await one(*job)
        await token_sink.close()
        await resolver.close()

    asyncio.run(main())
