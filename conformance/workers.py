"""Work done in freshly spawned interpreters, as uvicorn workers do it.

A worker receives only the target string, the kwargs and a list of operations. It builds its
own sink, optionally waits at a barrier so that several workers construct at the same moment,
runs the operations, closes the sink and reports each acknowledgement to the parent.
Nothing the parent installed reaches it.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from conformance.settings import DEFAULT_ENTRY_CLASS

__all__ = ["Operation", "WorkerOutcome", "WorkerPlan", "run_workers"]

WORKER_TIMEOUT = 120.0
"""Seconds a worker may take before it is killed and reported as hung."""


@dataclass(frozen=True)
class Operation:
    """``("put", fields_json)`` or ``("mark", rollout_id, model_call_id)``.

    ``fields_json`` is the kit's canonical form of the entry's fields.
    """

    kind: str
    payload: bytes = b""
    rollout_id: str = ""
    model_call_id: str = ""


@dataclass(frozen=True)
class WorkerPlan:
    """What one worker builds and does."""

    target: str
    kwargs: dict[str, Any]
    operations: tuple[Operation, ...] = ()
    entry_class: str = DEFAULT_ENTRY_CLASS
    """The class the worker builds each put's entry with, from the payload's fields."""


@dataclass
class WorkerOutcome:
    """What one worker reported: ``stage`` is ``ok``, ``build``, ``operation`` or ``hung``."""

    stage: str
    acked: int = 0
    error: str = ""
    details: list[str] = field(default_factory=list)


def _worker(plan: WorkerPlan, barrier: Any, conn: Connection) -> None:
    from conformance.context import build_endpoint
    from conformance.entries import load_entry_class

    try:
        build = load_entry_class(plan.entry_class)
        barrier.wait(timeout=WORKER_TIMEOUT)
        sink = build_endpoint(plan.target, plan.kwargs, "sink")
    except Exception as exc:
        conn.send(WorkerOutcome("build", error=f"{type(exc).__name__}: {exc}"))
        return

    async def run() -> WorkerOutcome:
        acked = 0
        try:
            for operation in plan.operations:
                if operation.kind == "put":
                    await sink.put(build(**json.loads(operation.payload)))
                else:
                    await sink.mark_incomplete(operation.rollout_id, operation.model_call_id)
                acked += 1
        except Exception as exc:
            frames = traceback.extract_tb(exc.__traceback__)
            where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
            return WorkerOutcome("operation", acked, f"{type(exc).__name__}: {exc}{where}")
        finally:
            await sink.close()
        return WorkerOutcome("ok", acked)

    conn.send(asyncio.run(run()))


def run_workers(plans: list[WorkerPlan], *, together: bool = True) -> list[WorkerOutcome]:
    """Run each plan in its own spawned interpreter and return what each one reported.

    With ``together`` every worker constructs its sink only once all of them have started,
    so constructions race (SPAWN-2).
    """
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(plans) if together else 1)
    running = []
    for plan in plans:
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_worker, args=(plan, barrier, send), daemon=True)
        process.start()
        send.close()
        running.append((process, receive))
    outcomes = []
    for process, receive in running:
        if receive.poll(WORKER_TIMEOUT):
            try:
                outcomes.append(receive.recv())
            except EOFError:
                outcomes.append(WorkerOutcome("build", error="the worker died without reporting"))
        else:
            outcomes.append(WorkerOutcome("hung", error=f"no report within {WORKER_TIMEOUT:.0f}s"))
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
            process.join()
    return outcomes
