"""Staging and fetching in freshly spawned interpreters, as inference workers and trainers do.

Each job builds the staging sink or source from its target and kwargs in a new interpreter,
does its calls and answers plain data: what every ``stage`` answered, or every fetched row's
fields. A worker that does not answer within the deadline is killed and the check fails; one
that dies is reported as dead. Errors are passed back as text with the run's secrets masked.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from conformance._kit import Kit, build_endpoint
from conformance._secrecy import scrub

__all__ = ["Answer", "fetch_elsewhere", "run_elsewhere", "stage_elsewhere"]

_SPAWN = multiprocessing.get_context("spawn")


@dataclass(frozen=True)
class Answer:
    """What one spawned job answered: ``value``, or ``error`` saying what went wrong."""

    value: Any = None
    error: str = ""
    built: bool = True
    """False when the job could not build its sink or source: STAGE-2's to judge."""


def _built(target: str, kwargs: dict[str, Any], kind: str) -> Any:
    return build_endpoint(target, kwargs, kind)


def _closed(endpoint: Any) -> None:
    close = getattr(endpoint, "close", None)
    if callable(close):
        result = close()
        if inspect.isawaitable(result):
            import asyncio

            async def wait() -> None:
                await result

            asyncio.run(wait())


def _stage_job(target: str, kwargs: dict[str, Any], records: list[str], start_at: float) -> Answer:
    """Build a sink, wait for ``start_at`` (so that jobs stage together), stage each record."""
    from tokcap_spec.staging import StagedCallRecord

    try:
        sink = _built(target, kwargs, "staging sink")
    except Exception as exc:
        return Answer(
            error=f"building the staging sink raised {type(exc).__name__}: {exc}", built=False
        )
    try:
        pause = start_at - time.time()
        if pause > 0:
            time.sleep(pause)
        answers = []
        for text in records:
            record = StagedCallRecord.model_validate_json(text)
            try:
                result = sink.stage(record)
            except Exception as exc:
                return Answer(error=f"stage raised {type(exc).__name__}: {exc}")
            answers.append(
                (
                    getattr(result, "ok", None),
                    getattr(result, "staging_key", None),
                    str(getattr(result, "error", "")),
                )
            )
        return Answer(answers)
    finally:
        _closed(sink)


def _fetch_job(target: str, kwargs: dict[str, Any], keys: list[str]) -> Answer:
    """Build a source and fetch ``keys``; answer each row's fields."""
    try:
        source = _built(target, kwargs, "staging source")
    except Exception as exc:
        return Answer(
            error=f"building the staging source raised {type(exc).__name__}: {exc}",
            built=False,
        )
    try:
        try:
            rows = source.fetch(list(keys))
        except Exception as exc:
            return Answer(error=f"fetch raised {type(exc).__name__}: {exc}")
        if not isinstance(rows, list):
            return Answer(error=f"fetch answered {type(rows).__name__}, not a list")
        fields = [row.model_dump() if hasattr(row, "model_dump") else dict(row) for row in rows]
        return Answer(fields)
    finally:
        _closed(source)


def _build_job(sink: tuple[str, dict[str, Any]], source: tuple[str, dict[str, Any]]) -> Answer:
    """Build the sink and the source, then close them."""
    for kind, (target, kwargs) in (("staging sink", sink), ("staging source", source)):
        try:
            built = _built(target, kwargs, kind)
        except Exception as exc:
            return Answer(
                error=f"building the {kind} raised {type(exc).__name__}: {exc}", built=False
            )
        _closed(built)
    return Answer(True)


def run_elsewhere(
    kit: Kit,
    jobs: Sequence[tuple[Callable[..., Answer], tuple[Any, ...]]],
    *,
    clause: str | None = None,
    doing: str,
) -> list[Answer]:
    """Run each ``(job, args)`` in its own spawned interpreter, all at once; return the answers.

    A job that outlives the run's deadline (plus what starting an interpreter takes) or whose
    interpreter dies breaks ``clause`` (by default the check's own); one that cannot build its
    sink or source breaks STAGE-2.
    """
    __tracebackhide__ = True
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=len(jobs), mp_context=_SPAWN)
    futures = [pool.submit(job, *args) for job, args in jobs]
    deadline = time.monotonic() + kit.settings.timeout + _START_SECONDS
    answers: list[Answer] = []
    problem = ""
    try:
        for future in futures:
            try:
                answers.append(future.result(timeout=max(0.0, deadline - time.monotonic())))
            except concurrent.futures.TimeoutError:
                problem = f"did not answer within {kit.settings.timeout + _START_SECONDS:g} s"
                break
            except BrokenProcessPool:
                problem = "died before it answered"
                break
    finally:
        if problem:
            _kill(pool)
        pool.shutdown(wait=not problem, cancel_futures=True)
    if problem:
        kit.fail(
            clause=clause,
            expected=f"{doing} in spawned interpreters to answer",
            observed=f"a spawned worker {problem}",
            hint="a call must return within the deadline in every process (--tokcap-timeout)",
        )
    read = [
        Answer(answer.value, scrub(kit.redact(answer.error)), answer.built) for answer in answers
    ]
    for answer in read:
        if not answer.built:
            kit.fail(
                clause="STAGE-2",
                expected="the staging sink and source to build in a spawned interpreter",
                observed=answer.error,
                hint="build from the target and JSON kwargs alone: no object passed in, no "
                "state made by the parent process",
            )
    return read


_START_SECONDS = 30.0
"""What starting an interpreter and importing the target may take on a loaded machine, beyond
the deadline of the calls themselves."""


def _kill(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    processes = getattr(pool, "_processes", None) or {}
    for process in list(processes.values()):
        if process.pid is not None:
            with contextlib.suppress(OSError):
                os.kill(process.pid, signal.SIGKILL)


def stage_elsewhere(
    kit: Kit, batches: Sequence[Sequence[Any]], *, clause: str | None = None
) -> list[list[tuple[Any, Any, str]]]:
    """Stage each batch of records from a sink of its own in its own spawned interpreter, all
    starting together; return what each ``stage`` answered, batch by batch."""
    __tracebackhide__ = True
    start_at = time.time() + _GATHER_SECONDS
    target, kwargs = kit.settings.sink, dict(kit.settings.sink_kwargs)
    jobs = [
        (_stage_job, (target, kwargs, [record.model_dump_json() for record in batch], start_at))
        for batch in batches
    ]
    answers = run_elsewhere(kit, jobs, clause=clause, doing="staging")
    for number, answer in enumerate(answers):
        if answer.error:
            kit.fail(
                clause=clause,
                expected="a sink in a spawned interpreter to stage every call it is given",
                observed=f"spawned stager {number}: {answer.error}",
                hint="build from the target and kwargs alone; report failures as ok=False",
            )
    return [list(answer.value) for answer in answers]


_GATHER_SECONDS = 3.0
"""How long after submitting spawned stagers they all begin: enough for interpreters to
start, so that their stages overlap."""


def fetch_elsewhere(kit: Kit, keys: list[str], *, clause: str | None = None) -> Answer:
    """Fetch ``keys`` from a source built in a spawned interpreter; answer the rows' fields."""
    __tracebackhide__ = True
    target, kwargs = kit.settings.source, dict(kit.settings.source_kwargs)
    (answer,) = run_elsewhere(
        kit, [(_fetch_job, (target, kwargs, keys))], clause=clause, doing="fetching"
    )
    return answer


def build_elsewhere(kit: Kit, *, clause: str | None = None) -> Answer:
    """Build the sink and the source in a spawned interpreter, as its own process would."""
    __tracebackhide__ = True
    settings = kit.settings
    job = (
        _build_job,
        (
            (settings.sink, dict(settings.sink_kwargs)),
            (settings.source, dict(settings.source_kwargs)),
        ),
    )
    (answer,) = run_elsewhere(kit, [job], clause=clause, doing="building")
    return answer
