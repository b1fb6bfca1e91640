"""Staging and fetching in freshly spawned interpreters, as inference workers and trainers do.

The children are the capture contract's (:mod:`conformance._workers`): each builds its
staging sink or source from the target and kwargs alone, in a new interpreter that leaves the
parent's ``__main__`` behind, says which call it is in, and answers plain data: what every
``stage`` answered, or every fetched row's fields. A child whose call outlives the deadline is
killed, one that dies is named with the call it died in, and every error comes back with the
run's secrets masked. A child that cannot build its sink or source breaks STAGE-2.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance._kit import Kit
from conformance._secrecy import scrub
from conformance._settings import DEFAULT_ENTRY_CLASS, DEFAULT_STAGING_CLASSES
from conformance._workers import Built, Job, Meeting, Progress, Supervisor, WorkerOutcome

__all__ = ["Answer", "build_elsewhere", "fetch_elsewhere", "run_elsewhere", "stage_elsewhere"]


@dataclass(frozen=True)
class Answer:
    """What one spawned job answered: ``value``, or ``error`` saying which call went wrong."""

    value: Any = None
    error: str = ""


async def _closed(endpoint: Any, progress: Progress) -> None:
    """Close ``endpoint`` if it offers a ``close``, awaiting what that returns."""
    close = getattr(endpoint, "close", None)
    if callable(close):
        progress.call("close")
        result = close()
        if inspect.isawaitable(result):
            await result


def _answered(value: Any, error: str = "") -> WorkerOutcome:
    """A job that ran to its end: ``value``, and ``error`` when one of its calls raised.

    Only the harness reports a child as ``hung`` or ``operation``: it overran or died.
    """
    return WorkerOutcome("ok", events=[value], error=scrub(error))


@dataclass(frozen=True)
class _StageJob:
    """Stage each record (JSON) from one sink, once every sibling has built its own, as an
    instance of the run's staging classes; answer ``(ok, key, error, wrong class)`` per stage,
    the last ``()`` or ``(required class, answered class)``."""

    target: str
    kwargs: dict[str, Any] = field(repr=False)
    records: tuple[str, ...]
    entry_class: str = DEFAULT_ENTRY_CLASS
    staging_classes: str = DEFAULT_STAGING_CLASSES

    def endpoints(self) -> tuple[tuple[str, str, dict[str, Any]], ...]:
        return (("staging sink", self.target, self.kwargs),)

    def calls(self) -> set[str]:
        return {"stage"}

    async def run(self, built: Built, progress: Progress, meeting: Meeting) -> WorkerOutcome:
        from tokcap_spec.staging import StagedCallRecord
        from tokcap_spec.staging.classes import wire_classes

        explicit = self.staging_classes != DEFAULT_STAGING_CLASSES
        classes = wire_classes(self.staging_classes)
        sink = built.staging_sink
        answers: list[tuple[Any, Any, str, tuple[str, ...]]] = []
        try:
            for number, text in enumerate(self.records, 1):
                record = classes.record_of(StagedCallRecord.model_validate_json(text))
                progress.call("stage", f"stage {number} of {len(self.records)}")
                try:
                    result = sink.stage(record)
                except Exception as exc:
                    return _answered(answers, f"stage raised {type(exc).__name__}: {exc}")
                progress.acked += 1
                wrong: tuple[str, ...] = ()
                if explicit and not isinstance(result, classes.result):
                    answered = f"{type(result).__module__}.{type(result).__qualname__}"
                    wrong = (classes.describe(), answered)
                answers.append(
                    (
                        getattr(result, "ok", None),
                        getattr(result, "staging_key", None),
                        str(getattr(result, "error", "")),
                        wrong,
                    )
                )
            return _answered(answers)
        finally:
            await _closed(sink, progress)


@dataclass(frozen=True)
class _FetchJob:
    """Fetch ``keys`` from one source; answer each row's fields."""

    target: str
    kwargs: dict[str, Any] = field(repr=False)
    keys: tuple[str, ...]
    entry_class: str = DEFAULT_ENTRY_CLASS

    def endpoints(self) -> tuple[tuple[str, str, dict[str, Any]], ...]:
        return (("staging source", self.target, self.kwargs),)

    def calls(self) -> set[str]:
        return {"fetch"}

    async def run(self, built: Built, progress: Progress, meeting: Meeting) -> WorkerOutcome:
        source = built.staging_source
        try:
            progress.call("fetch", f"{len(self.keys)} keys")
            try:
                rows = source.fetch(list(self.keys))
            except Exception as exc:
                return _answered(None, f"fetch raised {type(exc).__name__}: {exc}")
            if not isinstance(rows, list):
                return _answered(None, f"fetch answered {type(rows).__name__}, not a list")
            fields = [row.model_dump() if hasattr(row, "model_dump") else dict(row) for row in rows]
            return _answered(fields)
        finally:
            await _closed(source, progress)


@dataclass(frozen=True)
class _BuildJob:
    """Build the sink and the source, then close them."""

    sink: tuple[str, dict[str, Any]] = field(repr=False)
    source: tuple[str, dict[str, Any]] = field(repr=False)
    entry_class: str = DEFAULT_ENTRY_CLASS

    def endpoints(self) -> tuple[tuple[str, str, dict[str, Any]], ...]:
        return (
            ("staging sink", self.sink[0], self.sink[1]),
            ("staging source", self.source[0], self.source[1]),
        )

    def calls(self) -> set[str]:
        return set()

    async def run(self, built: Built, progress: Progress, meeting: Meeting) -> WorkerOutcome:
        await _closed(built.staging_sink, progress)
        await _closed(built.staging_source, progress)
        return _answered(True)


_STOPPED = "another spawned stager overran or died"


def run_elsewhere(
    kit: Kit,
    jobs: Sequence[tuple[str, Job]],
    *,
    clause: str | None = None,
    doing: str,
    together: bool = False,
) -> list[Answer]:
    """Run each named job in its own spawned interpreter, all at once; return the answers.

    With ``together`` the jobs make their calls only once every one has built its endpoints,
    so that the calls race, and the first that overruns or dies stops the others. A child
    that overruns the deadline or dies breaks ``clause`` (by default the check's own); one
    that cannot build its sink or source breaks STAGE-2.
    """
    __tracebackhide__ = True
    supervisor = Supervisor(
        jobs, start_together=together, stop_siblings=_STOPPED if together else ""
    )
    supervisor.start()
    outcomes = supervisor.finish()
    unbuilt = [outcome.error for outcome in outcomes if outcome.stage == "build"]
    if unbuilt:
        # The child that failed says why; the siblings it held back or stopped say less.
        why = [error for error in unbuilt if error and not error.endswith(_STOPPED)]
        kit.fail(
            clause="STAGE-2",
            expected="the staging sink and source to build in a spawned interpreter",
            observed=kit.redact(why[0] if why else "a spawned worker did not build"),
            hint="build from the target and JSON kwargs alone: no object passed in, no "
            "state made by the parent process",
        )
    for outcome in outcomes:
        if outcome.stage != "ok" and not outcome.error.endswith(_STOPPED):
            kit.fail(
                clause=clause,
                expected=f"{doing} in spawned interpreters to answer",
                observed=kit.redact(outcome.error),
                hint="a call must return within the deadline in every process "
                "(--tokcap-timeout), and never end its process",
            )
    return [
        Answer(outcome.events[0] if outcome.events else None, kit.redact(outcome.error))
        for outcome in outcomes
    ]


def stage_elsewhere(
    kit: Kit, batches: Sequence[Sequence[Any]], *, clause: str | None = None
) -> list[list[tuple[Any, Any, str, tuple[str, ...]]]]:
    """Stage each batch of records from a sink of its own in its own spawned interpreter, all
    starting together; return what each ``stage`` answered, batch by batch."""
    __tracebackhide__ = True
    target, kwargs = kit.settings.sink, dict(kit.settings.sink_kwargs)
    jobs: list[tuple[str, Job]] = [
        (
            f"spawned stager {number}",
            _StageJob(
                target,
                kwargs,
                tuple(record.model_dump_json() for record in batch),
                staging_classes=kit.settings.staging_classes,
            ),
        )
        for number, batch in enumerate(batches)
    ]
    answers = run_elsewhere(kit, jobs, clause=clause, doing="staging", together=True)
    for (name, _), answer in zip(jobs, answers, strict=True):
        if answer.error:
            kit.fail(
                clause=clause,
                expected="a sink in a spawned interpreter to stage every call it is given",
                observed=f"{name}: {answer.error}",
                hint="build from the target and kwargs alone; report failures as ok=False",
            )
    return [list(answer.value) for answer in answers]


def fetch_elsewhere(kit: Kit, keys: list[str], *, clause: str | None = None) -> Answer:
    """Fetch ``keys`` from a source built in a spawned interpreter; answer the rows' fields."""
    __tracebackhide__ = True
    target, kwargs = kit.settings.source, dict(kit.settings.source_kwargs)
    job = ("spawned fetcher", _FetchJob(target, kwargs, tuple(keys)))
    (answer,) = run_elsewhere(kit, [job], clause=clause, doing="fetching")
    return answer


def build_elsewhere(kit: Kit, *, clause: str | None = None) -> Answer:
    """Build the sink and the source in a spawned interpreter, as its own process would."""
    __tracebackhide__ = True
    settings = kit.settings
    job = _BuildJob(
        (settings.sink, dict(settings.sink_kwargs)),
        (settings.source, dict(settings.source_kwargs)),
    )
    (answer,) = run_elsewhere(kit, [("spawned builder", job)], clause=clause, doing="building")
    return answer
