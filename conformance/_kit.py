"""The context one check runs in: fresh endpoints, unique rollout ids, entries, one event loop.

A check is synchronous code. Endpoints it builds are wrapped so that ``sink.put(entry)``
runs the implementation's coroutine to completion on the check's own event loop; each such
call is marked on the check's :class:`conformance._deadline.Watch`, so that one outliving the
run's deadline fails the check instead of hanging it. Every endpoint the kit builds is closed
when the check ends, whatever happened.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import os
import random
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, Protocol, TypeVar

from conformance import _constructions as constructions
from conformance import _costs as costs
from conformance._deadline import Overrun, Refused, Watch, current_watch, operations_of
from conformance._entries import EntryFactory, load_entry_class
from conformance._hints import null_log_prob
from conformance._settings import KitSettings
from conformance._violation import ClauseViolation, NotClaimed, fail
from tokcap_spec.endpoints import build_endpoint as build_sink_or_source
from tokcap_spec.errors import EndpointError
from tokcap_spec.protocols import TokenSink, TokenSource
from tokcap_spec.redaction import redact

__all__ = ["LINEAGE_ROLE", "NO_LINEAGE", "Endpoint", "Kit", "PlainEndpoint", "build_endpoint"]
__all__ += ["run_token"]

T = TypeVar("T")

_RUN_TOKEN = secrets.token_hex(4)
_KIT_CODE = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""Where the kit's own code lives: coroutines from here are not the target's calls."""

LINEAGE_ROLE = "lineage resolver"
NO_LINEAGE = (
    "no lineage resolver is named: pass --tokcap-lineage=module.path:ClassName (env "
    "TOKCAP_LINEAGE, ini tokcap_lineage) or a NeMo Gym 0.7.0 config with a lineage_store"
)


def run_token() -> str:
    """A short random token, new for every process, that keeps rollout ids unique per run."""
    return _RUN_TOKEN


class LineageResolverCalls(Protocol):
    """The coroutine methods of a :class:`~tokcap_spec.lineage.LineageResolver`, which building
    one checks; its plain ``is_process_shared`` is LINEAGE-1's to judge."""

    async def resolve(self, rollout_id: str, request_items: Any) -> Any: ...

    async def close(self) -> None: ...


_PROTOCOLS: dict[str, type] = {
    "sink": TokenSink,
    "source": TokenSource,
    LINEAGE_ROLE: LineageResolverCalls,
    # What a staging sink or source has is STAGE-1's to judge, method by method.
    "staging sink": object,
    "staging source": object,
}


def build_endpoint(target: str, kwargs: dict[str, Any], kind: str) -> Any:
    """Build a sink, source or lineage resolver from its target string and kwargs, as a
    serving process does."""
    return build_sink_or_source(target, kwargs, _PROTOCOLS[kind], kind)


class Endpoint:
    """A sink or source the kit built, with its coroutine methods callable synchronously.

    ``endpoint.put(entry)`` awaits the implementation's ``put`` on the check's loop and returns
    its result. A method that returns something that is not awaitable breaks SHAPE-1.
    ``endpoint.raw`` is the implementation object itself.
    """

    def __init__(self, kit: Kit, raw: Any, role: str) -> None:
        self._kit = kit
        self.raw = raw
        self.role = role

    def has(self, name: str) -> bool:
        """Return whether the implementation has a callable attribute ``name``."""
        return callable(getattr(self.raw, name, None))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.raw, name)
        if not callable(method):
            return method  # type: ignore[no-any-return]

        def call(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            with self._kit.watch.call([name]):
                return self._answer(name, method(*args, **kwargs))

        return call

    def _answer(self, name: str, result: Any) -> Any:
        """What a call of ``name`` that returned ``result`` answers: the awaited result."""
        __tracebackhide__ = True
        if not inspect.isawaitable(result):
            fail(
                "SHAPE-1",
                expected=f"{self.role}.{name}() to return an awaitable",
                observed=f"it returned {type(result).__name__}",
                hint="declare every protocol method with 'async def'",
            )
        return costs.run_measured(self._kit.loop, result, name, self._kit.check_id)


class PlainEndpoint(Endpoint):
    """A staging sink or source the kit built, its plain methods called within the deadline.

    ``endpoint.stage(record)`` returns what the implementation's ``stage`` returns; what that
    is, the staging steps judge (:mod:`conformance._staging.steps`).
    """

    def _answer(self, name: str, result: Any) -> Any:
        return result


class Kit:
    """Everything one check needs; always :meth:`close` it.

    ``clause`` is the clause the check judges: the one its steps and :meth:`fail` blame
    unless told another. It is None for a check that judges no single clause; such a check
    names the clause of every step.
    """

    def __init__(self, settings: KitSettings, check_id: str, clause: str | None = None) -> None:
        self.settings = settings
        self.check_id = check_id
        self.clause = clause
        self.watch = current_watch() or Watch(settings.timeout, clause or "")
        self.loop = asyncio.new_event_loop()
        self.watch.loop = self.loop
        self.random = random.Random(f"{settings.seed}:{check_id}")
        self.entries = EntryFactory(self.random, load_entry_class(settings.entry_class))
        self._opened: list[Endpoint] = []
        self._spares: dict[str, list[tuple[Endpoint, set[str]]]] = {"sink": [], "source": []}
        self.observations: dict[str, str] = {}
        self._counter = itertools.count()
        self._slug = re.sub(r"[^A-Za-z0-9]+", "-", check_id).strip("-").lower()[:80]

    @property
    def fence(self) -> str:
        return self.settings.fence

    def claims(self, capability: str) -> bool:
        """Return whether the user declared ``capability`` for the target."""
        return self.settings.claims(capability)

    def blame(self, clause: str | None = None) -> str:
        """Return the clause a step serves: ``clause`` if named, else the check's own.

        Raises TypeError when neither is known: that is a fault of the check, not the target.
        """
        if clause is not None:
            return clause
        if self.clause is None:
            raise TypeError(
                f"check {self.check_id} judges no single clause: name the clause this step serves"
            )
        return self.clause

    def fail(
        self, *, expected: str, observed: str, hint: str, clause: str | None = None
    ) -> NoReturn:
        """Raise the :class:`ClauseViolation` of ``clause``, by default the check's own."""
        __tracebackhide__ = True
        fail(self.blame(clause), expected=expected, observed=observed, hint=hint)

    def observe(self, key: str, value: str) -> None:
        """Record a fact about the target the report should carry (e.g. its fence)."""
        self.observations[key] = value

    def rollout_id(self, label: str = "r") -> str:
        """Return a rollout id no other check, run or process uses.

        No id the kit makes is a prefix of another (the counter has a fixed width), so only
        the checks that mean to try related ids (PUT-5) do.
        """
        return f"tk-{run_token()}-{self._slug}-{label}-{next(self._counter):04d}"

    def run(self, awaitable: Awaitable[T]) -> T:
        """Run ``awaitable`` to completion on this check's loop, within the deadline.

        A call that overruns raises :class:`conformance._deadline.Overrun`.
        """
        __tracebackhide__ = True
        code = getattr(awaitable, "cr_code", None)
        with _discarded_unless_run([awaitable]), self.watch.call(operations_of(awaitable)):
            if code is not None and code.co_filename.startswith(_KIT_CODE):
                # The kit's own coroutine around a call may hold the loop on purpose (put_held).
                return self.loop.run_until_complete(awaitable)
            operation = code.co_name if code is not None else ""
            return costs.run_measured(self.loop, awaitable, operation, self.check_id)

    def gather(self, *awaitables: Awaitable[Any]) -> list[Any]:
        """Run several awaitables concurrently, within one deadline; exceptions are returned."""
        __tracebackhide__ = True

        async def together() -> list[Any]:
            return list(await asyncio.gather(*awaitables, return_exceptions=True))

        names = [name for each in awaitables for name in operations_of(each)]
        together_as = "concurrent " + ", ".join(sorted(set(names))) if names else "concurrent"
        with _discarded_unless_run(awaitables), self.watch.call(names):
            return costs.run_measured(self.loop, together(), together_as, self.check_id)

    def serve(self, spans: costs.Spans, *lives: Awaitable[Any], calls: Iterable[str]) -> list[Any]:
        """Run ``lives`` concurrently within one deadline, as a serving loop runs its rollouts;
        each call of ``calls`` they make through ``spans`` is measured on its own. Exceptions
        are returned."""
        __tracebackhide__ = True

        async def together() -> list[Any]:
            return list(await asyncio.gather(*lives, return_exceptions=True))

        names = sorted(set(calls))
        label = "concurrent " + ", ".join(names)
        with _discarded_unless_run(lives), self.watch.call(names):
            return costs.run_spans(self.loop, together(), spans, label)

    def sink(self) -> Endpoint:
        """Build a fresh sink from the target string and kwargs."""
        return self._open(self.settings.sink, dict(self.settings.sink_kwargs), "sink")

    def source(self) -> Endpoint:
        """Build a fresh source from the target string and kwargs."""
        return self._open(self.settings.source, dict(self.settings.source_kwargs), "source")

    def lineage(self) -> Endpoint:
        """Build a fresh lineage resolver; raise :class:`NotClaimed` when the run names none."""
        if not self.settings.lineage:
            raise NotClaimed(NO_LINEAGE)
        kwargs = dict(self.settings.lineage_kwargs)
        return self._open(self.settings.lineage, kwargs, LINEAGE_ROLE)

    def staging_sink(self) -> PlainEndpoint:
        """Build a fresh staging sink from the target string and kwargs."""
        return self._open_plain(self.settings.sink, dict(self.settings.sink_kwargs), "sink")

    def staging_source(self) -> PlainEndpoint:
        """Build a fresh staging source from the target string and kwargs."""
        return self._open_plain(self.settings.source, dict(self.settings.source_kwargs), "source")

    def _open_plain(self, target: str, kwargs: dict[str, Any], role: str) -> PlainEndpoint:
        __tracebackhide__ = True
        kind = f"staging {role}"
        with self.watch.call([f"{constructions.PREFIX}{target}"]):
            endpoint = PlainEndpoint(self, build_endpoint(target, kwargs, kind), kind)
        self._opened.append(endpoint)
        return endpoint

    def sink_for(self, rollout_id: str) -> Endpoint:
        """A sink of this check's spares that was never handed out for ``rollout_id``.

        See :meth:`source_for`.
        """
        return self._spare("sink", rollout_id)

    def source_for(self, rollout_id: str) -> Endpoint:
        """A source of this check's spares that was never handed out for ``rollout_id``.

        It stands in for a freshly built source wherever what matters is an instance with no
        memory of the rollout, as when a loop reads each new rollout back: the spares serve
        rollout after rollout, and a new one is built only when each spare has served this
        rollout already. The first spare is built when first asked for, so after the check's
        first writes: a constructor that opens a store with data in it still runs.
        """
        return self._spare("source", rollout_id)

    def _spare(self, kind: str, rollout_id: str) -> Endpoint:
        __tracebackhide__ = True
        for endpoint, served in self._spares[kind]:
            if rollout_id not in served:
                served.add(rollout_id)
                return endpoint
        endpoint = self.sink() if kind == "sink" else self.source()
        self._spares[kind].append((endpoint, {rollout_id}))
        return endpoint

    def _open(self, target: str, kwargs: dict[str, Any], kind: str) -> Endpoint:
        __tracebackhide__ = True
        with self.watch.call([f"{constructions.PREFIX}{target}"]):
            endpoint = Endpoint(self, build_endpoint(target, kwargs, kind), kind)
        self._opened.append(endpoint)
        return endpoint

    def redact(self, text: str) -> str:
        """Return ``text`` with every kwarg value of the run replaced by ``***``."""
        return redact(text, self.settings.secrets)

    def close(self) -> list[str]:
        """Close every endpoint the check built (each once) and the loop; return close errors.

        Each close has the deadline too. Once the check was given up on for a call that
        overran, nothing more is closed: the thread and what it holds are abandoned.
        """
        errors = []
        seen: set[int] = set()
        for endpoint in self._opened:
            if id(endpoint.raw) in seen:
                continue
            seen.add(id(endpoint.raw))
            if isinstance(endpoint, PlainEndpoint) and not endpoint.has("close"):
                continue  # The staging protocol has no close; a store may offer one.
            if self.watch.abandoned is not None:
                errors.append(f"{endpoint.role} not closed: {self.watch.abandoned}")
                continue
            try:
                with self.watch.call(["close"]):
                    result = endpoint.raw.close()
                    if inspect.isawaitable(result):
                        self.loop.run_until_complete(_as_coroutine(result))
            except (Overrun, Refused) as overrun:
                errors.append(f"{endpoint.role}.close(): {overrun}")
            except Exception as exc:
                errors.append(
                    self.redact(f"{endpoint.role}.close() raised {type(exc).__name__}: {exc}")
                )
        self._opened.clear()
        if self.watch.abandoned is None:
            self.loop.close()
        return errors


@contextmanager
def _discarded_unless_run(awaitables: Iterable[Awaitable[Any]]) -> Iterator[None]:
    """Close coroutines a refused call never started, so none is reported never awaited."""
    try:
        yield
    except (Refused, Overrun):
        for each in awaitables:
            if inspect.iscoroutine(each) and inspect.getcoroutinestate(each) == "CORO_CREATED":
                each.close()
        raise


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


def unexpected_error(clause: str, doing: str, exc: BaseException, kit: Kit) -> ClauseViolation:
    """Turn an error an implementation raised where none was allowed into a clause violation."""
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        where = f" at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    if isinstance(exc, EndpointError):
        hint = "the target could not be built from its target string and kwargs (BUILD-2)"
    else:
        hint = null_log_prob(exc) or "the implementation raised where the contract allows no error"
    return ClauseViolation(
        clause,
        expected=f"{doing} to succeed",
        observed=kit.redact(f"{type(exc).__name__}: {exc}{where}"),
        hint=hint,
    )
