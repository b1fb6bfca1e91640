"""A deadline on every call the kit makes into an implementation.

Each check runs on a thread of its own (:func:`watched`) that marks every call it makes into
the implementation (:class:`Watch`), so that the pytest thread can give up on a call that
never returns, even one that blocks synchronously inside a coroutine or a constructor. A call
that overruns raises :class:`Overrun`, which fails the clause being checked; the check's
thread is abandoned, never joined.

Once the same operation overran in :data:`TRIPS` checks of one run, the kit stops calling it:
later checks that need it are refused at once with :class:`Refused` and reported as blocked by
the clause that saw it overrun first. A hanging implementation thus costs a few deadlines,
not one per check.

An interrupt of the run (SIGINT, or SIGTERM and SIGHUP as :mod:`conformance._interrupt` maps
them) is different: the check's thread is stopped, not left to run on while the run winds
down. What it started (spawned workers) is stopped through :func:`on_interrupt` hooks.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from conformance import _constructions as constructions

__all__ = [
    "TRIPS",
    "Overrun",
    "Refused",
    "Stopped",
    "Watch",
    "breaker",
    "current_watch",
    "label",
    "on_interrupt",
    "operation_of",
    "operations_of",
    "stop_checks",
    "watched",
]

T = TypeVar("T")

TRIPS = 2
"""Overruns of one operation after which the kit stops calling it for the rest of the run."""

STOP_WAIT = 0.5
"""Seconds an interrupt waits for a check's thread to unwind; one blocked inside the
implementation's own C code cannot, and stays parked there."""

_KIT_DIR = str(Path(__file__).parent)
_ASYNCIO_DIR = str(Path(asyncio.__file__).parent)


class Overrun(BaseException):
    """A call into the implementation did not return within the deadline.

    A BaseException, so that a check catching the implementation's own errors cannot mistake
    a hang for a refusal.
    """

    def __init__(self, what: str, seconds: float, where: str = "") -> None:
        self.what = what
        self.seconds = seconds
        self.where = where
        super().__init__(f"{what} did not return within {seconds:g} s{where}")


class Refused(BaseException):
    """The kit no longer calls an operation that overran in earlier checks of this run."""

    def __init__(self, what: str, clause: str, first: str) -> None:
        self.what = what
        self.clause = clause
        self.first = first
        super().__init__(
            f"{label(what)} is no longer called: it overran {TRIPS} times in this run, "
            f"first under {clause} ({first})"
        )


class Stopped(BaseException):
    """Raised inside a check's thread when the run was interrupted: the check ends there."""


@dataclass
class Breaker:
    """Counts overruns per operation for one process; see the module docstring."""

    overruns: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def trip(self, what: str, clause: str, message: str) -> None:
        """Record that ``what`` overran while ``clause`` was being checked."""
        self.overruns.setdefault(what, []).append((clause, message))

    def check(self, names: Iterable[str]) -> None:
        """Raise :class:`Refused` when any of ``names`` overran too often already."""
        for name in names:
            seen = self.overruns.get(name, [])
            if len(seen) >= TRIPS:
                clause, message = seen[0]
                raise Refused(name, clause, message)

    def reset(self) -> None:
        self.overruns.clear()


breaker = Breaker()
"""The breaker of this process: every check of one run shares it."""


def operation_of(awaitable: Any) -> str:
    """Name the implementation operation ``awaitable`` runs, as ``put``; ``""`` if unknown.

    The first coroutine in its await chain whose code is not the kit's own names it, so
    ``recorder.freeze(source, r)`` names ``freeze``.
    """
    current = awaitable
    while current is not None:
        code = getattr(current, "cr_code", None) or getattr(current, "gi_code", None)
        if code is None:
            break
        if not code.co_filename.startswith((_KIT_DIR, _ASYNCIO_DIR)):
            return str(code.co_name)
        current = getattr(current, "cr_await", None) or getattr(current, "gi_yieldfrom", None)
    return ""


_RECORDED = {"mark": ("mark_incomplete",), "begin": ("begin_call",), "retire": ("freeze", "drop")}
"""Operations the history recorder's own coroutines call, by the recorder's method name."""


def operations_of(awaitable: Any) -> list[str]:
    """Name every operation ``awaitable`` may call, before it runs, for the breaker."""
    found = operation_of(awaitable)
    if found:
        return [found]
    code = getattr(awaitable, "cr_code", None)
    if code is None:
        return []
    if code.co_name in _RECORDED:
        return list(_RECORDED[code.co_name])
    return [code.co_name] if code.co_name in ("put", "freeze", "drop", "close") else []


def label(name: str) -> str:
    """How a message names an operation: a method name in backquotes, a phrase as it is."""
    if not name:
        return "the call"
    return f"`{name}`" if name.isidentifier() else name


class Watch:
    """The call into the implementation a check's thread is in, and when it began.

    The check's thread marks each call with :meth:`call`; :func:`watched` runs the check on
    that thread and gives up on it when one call outlives the deadline. Marking a call costs
    two attribute writes: nothing is handed between threads per call.
    """

    def __init__(
        self, seconds: float, clause: str = "", blame: Callable[[str], str] | None = None
    ) -> None:
        self.seconds = seconds
        self.clause = clause
        self._blame = blame
        self.loop: asyncio.AbstractEventLoop | None = None
        self.abandoned: BaseException | None = None
        self._current: tuple[str, float] | None = None

    def call(self, names: list[str]) -> _Marked | constructions.Span:
        """Mark a call that may use the operations ``names`` (refused if the breaker says so).

        Use as ``with watch.call(["put"]): ...``. A call that builds the target has a
        deadline per construction (:mod:`conformance._constructions`).
        """
        __tracebackhide__ = True
        if self.abandoned is not None:
            raise self.abandoned
        breaker.check(names)
        name = names[0] if len(set(names)) == 1 else ""
        if name.startswith(constructions.PREFIX):
            return constructions.Span(self, name)
        return _Marked(self, name)

    def rearm(self, name: str | None) -> None:
        """Start the deadline of the call ``name`` now; None marks no call in progress."""
        self._current = None if name is None else (name, time.monotonic())

    def clause_of(self, operation: str) -> str:
        """The clause an overrun of ``operation`` fails: what ``blame`` names for it when the
        watch was given one, else :attr:`clause`."""
        return self._blame(operation) if self._blame is not None else self.clause

    def next_look(self) -> float:
        """Seconds until the call in progress, if any, overruns."""
        current = self._current
        if current is None:
            return self.seconds / 4
        return max(0.0, current[1] + self.seconds - time.monotonic())

    def overdue(self) -> Overrun | None:
        """The overrun of the call in progress, once it has outlived the deadline."""
        current = self._current
        if current is None or time.monotonic() - current[1] < self.seconds:
            return None
        name = current[0] or self._pending_name()
        return Overrun(label(name), self.seconds)

    def abandon(self, overrun: Overrun) -> None:
        """Give up on the check: every later call raises ``overrun``; pending awaits are
        cancelled so that a coroutine waiting forever unwinds its thread."""
        self.abandoned = overrun
        name = self._current[0] if self._current else ""
        what = name or overrun.what
        breaker.trip(what, self.clause_of(what), str(overrun))
        loop = self.loop
        if loop is not None and not loop.is_closed():
            for task in _tasks(loop):
                loop.call_soon_threadsafe(task.cancel)

    def _pending_name(self) -> str:
        loop = self.loop
        if loop is None:
            return ""
        return next((n for n in (operation_of(t.get_coro()) for t in _tasks(loop)) if n), "")


class _Marked:
    """The span of one marked call; a plain class, as it runs on every call of every check."""

    __slots__ = ("name", "watch")

    def __init__(self, watch: Watch, name: str) -> None:
        self.watch = watch
        self.name = name

    def __enter__(self) -> None:
        self.watch._current = (self.name, time.monotonic())

    def __exit__(self, *exc_info: object) -> None:
        self.watch._current = None


def _tasks(loop: asyncio.AbstractEventLoop) -> list[asyncio.Task[Any]]:
    try:
        return list(asyncio.all_tasks(loop))
    except RuntimeError:  # the loop's thread changed the set while we read it
        return []


_local = threading.local()
_checks: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
_interrupt_hooks: list[Callable[[], None]] = []


def on_interrupt(hook: Callable[[], None]) -> None:
    """Call ``hook`` (once registered, on every interrupt) before check threads are stopped."""
    if hook not in _interrupt_hooks:
        _interrupt_hooks.append(hook)


def stop_checks(wait: float = STOP_WAIT) -> None:
    """Stop every check thread still running: run the interrupt hooks, then raise
    :class:`Stopped` in each thread and wait up to ``wait`` seconds for all to end."""
    for hook in _interrupt_hooks:
        hook()
    live = [thread for thread in list(_checks) if thread.is_alive()]
    for thread in live:
        if thread.ident is not None:
            _raise_in(thread.ident, Stopped)
    until = time.monotonic() + wait
    for thread in live:
        thread.join(max(0.0, until - time.monotonic()))
    parked = [thread.ident for thread in live if thread.is_alive() and thread.ident is not None]
    if parked:
        _take_back(parked)


def _raise_in(ident: int, exception: type[BaseException] | None) -> None:
    """Have the thread ``ident`` raise ``exception`` at its next bytecode; None withdraws it."""
    value = None if exception is None else ctypes.py_object(exception)
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), value)


class _TakenBack(BaseException):
    """Raised in the stopping thread itself, and caught there: see :func:`_take_back`."""


def _take_back(parked: list[int]) -> None:
    """Withdraw :class:`Stopped` from the threads ``parked`` in C code, which never took it.

    An exception left pending for a thread keeps a flag raised that the whole interpreter sees
    (CPython 3.11). While it stays up every thread stops to look for work at each call, and
    one running under a profile or trace function (the construction counter, coverage, a
    debugger) loops at its next function entry for ever. Withdrawing the exceptions leaves
    the flag up: it falls only when a thread takes one, so this thread takes one of its own.
    A parked thread that returns later finds its watch abandoned and raises at its next call.
    """
    for ident in parked:
        _raise_in(ident, None)
    try:
        _raise_in(threading.get_ident(), _TakenBack)
        for _ in range(_TAKE_WITHIN):
            pass  # each turn of the loop looks for the exception
        _raise_in(threading.get_ident(), None)  # never taken: it must not surface later
    except _TakenBack:
        return


_TAKE_WITHIN = 1_000_000
"""Loop turns within which a thread takes an exception raised in it: it does at its first."""


def current_watch() -> Watch | None:
    """The watch of the check running on this thread, if any.

    Per thread, so that a check given up on keeps its own watch, and with it the overrun
    every later call of it raises, while the next check runs under a new one.
    """
    watch: Watch | None = getattr(_local, "watch", None)
    return watch


def watched(function: Callable[[], T], watch: Watch) -> T:
    """Run ``function`` on a thread of its own under ``watch``; return or raise what it did.

    Raises :class:`Overrun` as soon as a call it marked outlives the deadline, leaving the
    thread to itself: it is a daemon, and every call it makes after that raises at once.
    """
    __tracebackhide__ = True
    outcome: list[Any] = []
    done = threading.Event()

    def body() -> None:
        _local.watch = watch
        try:
            outcome.append((True, function()))
        except BaseException as exc:  # handed to the watching thread, never lost
            outcome.append((False, exc))
        finally:
            done.set()

    thread = threading.Thread(target=body, name="tokcap-check")
    thread.daemon = True
    _checks.add(thread)
    thread.start()
    try:
        while not done.wait(watch.next_look()):
            overrun = watch.overdue()
            if overrun is not None:
                watch.abandon(overrun)
                raise overrun
    except (KeyboardInterrupt, SystemExit):
        # The run is interrupted: the check must not run on while it winds down.
        watch.abandoned = Stopped("the run was interrupted")
        stop_checks()
        raise
    returned, value = outcome[0]
    if returned:
        return value  # type: ignore[no-any-return]
    raise value
