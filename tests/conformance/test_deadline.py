"""The deadline on calls into an implementation, in the pytest process."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from conformance._deadline import TRIPS, Overrun, Refused, Watch, breaker, operation_of, watched
from conformance._kit import Kit
from conformance._settings import KitSettings

DEADLINE = 0.5


class Store:
    """Blocks its thread in ``put`` or awaits forever in ``freeze``."""

    async def put(self, entry: object) -> None:
        threading.Event().wait()

    async def freeze(self, rollout_id: str) -> None:
        await asyncio.Event().wait()


@pytest.fixture(autouse=True)
def _fresh_breaker() -> Iterator[None]:
    breaker.reset()
    yield
    breaker.reset()


def kit() -> Kit:
    return Kit(KitSettings(sink="m:C", timeout=DEADLINE), "PUT-1-durable-on-return")


class TestWatched:
    def test_a_call_blocking_its_thread_overruns(self) -> None:
        """A coroutine that blocks synchronously is given up on after the deadline."""

        def check() -> None:
            kit().run(Store().put(None))

        with pytest.raises(Overrun, match=r"^`put` did not return within 0.5 s$"):
            watched(check, Watch(DEADLINE, "PUT-1"))

    def test_a_call_awaiting_forever_is_cancelled(self) -> None:
        """A coroutine awaiting forever overruns, and its thread unwinds once cancelled."""
        watch = Watch(DEADLINE, "PUT-1")
        unwound = threading.Event()

        def check() -> None:
            try:
                kit().run(Store().freeze("r"))
            finally:
                unwound.set()

        with pytest.raises(Overrun, match="`freeze` did not return"):
            watched(check, watch)
        assert unwound.wait(5)

    def test_a_check_given_up_on_makes_no_more_calls(self) -> None:
        """After its overrun, every call of the abandoned check raises that overrun at once."""
        watch = Watch(DEADLINE, "PUT-1")
        overrun = Overrun("`put`", DEADLINE)
        watch.abandon(overrun)
        with pytest.raises(Overrun) as info, watch.call(["freeze"]):
            pass
        assert info.value is overrun

    def test_a_returning_check_returns_its_value(self) -> None:
        """A check that returns in time hands back what it returned."""
        assert watched(lambda: 42, Watch(DEADLINE)) == 42


class TestBreaker:
    def test_an_operation_that_keeps_overrunning_is_refused(self) -> None:
        """After TRIPS overruns of put, a later call of put is refused naming the first clause."""
        for clause in ("SHAPE-3", "PUT-1")[:TRIPS]:
            breaker.trip("put", clause, "`put` did not return within 1 s")
        with pytest.raises(Refused, match="first under SHAPE-3") as info:
            Watch(DEADLINE).call(["put"]).__enter__()
        assert info.value.clause == "SHAPE-3"

    def test_other_operations_are_still_called(self) -> None:
        """A stopped put does not stop freeze."""
        for _ in range(TRIPS):
            breaker.trip("put", "PUT-1", "overran")
        with Watch(DEADLINE).call(["freeze"]):
            pass


def test_the_implementations_method_names_the_operation() -> None:
    """The first non-kit coroutine of an await chain names the call."""
    coroutine = Store().put(None)
    try:
        assert operation_of(coroutine) == "put"
    finally:
        coroutine.close()


PARKED_THEN_PROFILED = """
import sys, threading
from conformance import _deadline

release = threading.Event()
thread = threading.Thread(target=release.wait, daemon=True)  # parked in C: a lock's acquire
_deadline._checks.add(thread)
thread.start()
_deadline.stop_checks(wait=0.2)
assert thread.is_alive()

sys.setprofile(lambda frame, event, arg: None)  # as the construction counter does
def called():
    return "returned"
print(called())
sys.setprofile(None)
release.set()
thread.join(5)
print("parked thread", "ended" if not thread.is_alive() else "still parked")
"""


class TestStopChecks:
    def test_a_thread_parked_in_c_code_leaves_no_exception_pending(self) -> None:
        """Stopping a check thread blocked in C code leaves the interpreter as it was.

        Its Stopped, never taken, would keep the interpreter's pending flag up, and the next
        function entered under a profile function would loop for ever (CPython 3.11). The
        thread, released later, returns normally instead of raising.
        """
        done = subprocess.run(
            [sys.executable, "-c", PARKED_THEN_PROFILED],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.stdout.splitlines() == ["returned", "parked thread ended"], done.stderr
        assert done.returncode == 0, done.stderr
