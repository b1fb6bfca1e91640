"""The cost budget is read strictly, and the meter sees a call that blocks the loop."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from conformance import _costs as costs
from conformance import run_conformance
from conformance._budget import DEFAULT_BUDGET, BudgetError, parse_budget, shown
from conformance._settings import Option, SettingsError, resolve_settings


def _resolve(cli: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    def find(option: Option) -> tuple[Any, str]:
        return cli.get(option.name), "cli"

    def make() -> Path:
        raise AssertionError("no kwarg uses the scratch directory")

    return resolve_settings(find, env or {}, lambda option: (None, "ini"), make)


class TestParseBudget:
    def test_limits_are_read_in_seconds(self) -> None:
        """Each unit is honoured, and the budget shows as it would be written."""
        limits = parse_budget("loop-hold=5ms, put-p99=0.02s,freeze-mib=1500us")
        assert limits == {"loop-hold": 0.005, "put-p99": 0.02, "freeze-mib": 0.0015}
        assert shown(limits) == "loop-hold=5ms,put-p99=20ms,freeze-mib=1.5ms"

    def test_default_is_a_preset_a_later_limit_replaces(self) -> None:
        """``default`` stands for the documented limits; a limit after it wins."""
        limits = parse_budget("default,loop-hold=5ms")
        assert limits == {**DEFAULT_BUDGET, "loop-hold": 0.005}

    @pytest.mark.parametrize(
        ("text", "says"),
        [
            ("", "empty"),
            ("loop-hold=5ms,,put-p99=1ms", "empty part"),
            ("loop-hold", "not key=value"),
            ("put-p95=5ms", "not a budget key"),
            ("put-p99=5", "not a duration"),
            ("put-p99=fast", "not a duration"),
            ("put-p99=0ms", "positive"),
        ],
    )
    def test_a_budget_that_cannot_be_read_says_why(self, text: str, says: str) -> None:
        """Each mistake is refused with a message that says what is wrong."""
        with pytest.raises(BudgetError, match=says):
            parse_budget(text)


class TestBudgetSetting:
    def test_the_environment_sets_the_budget(self) -> None:
        """TOKCAP_BUDGET is read like the flag."""
        settings = _resolve({"sink": "m:C"}, {"TOKCAP_BUDGET": "loop-hold=2ms"})
        assert dict(settings.budget) == {"loop-hold": 0.002}

    def test_a_bad_budget_names_where_it_came_from(self) -> None:
        """The error names the flag, the value and its source."""
        with pytest.raises(SettingsError, match=r"--tokcap-budget='put-p99=5' \(from cli\)"):
            _resolve({"sink": "m:C", "budget": "put-p99=5"})

    def test_no_budget_claims_nothing(self) -> None:
        """Without the option the budget is empty."""
        assert dict(_resolve({"sink": "m:C"}).budget) == {}


async def _blocking() -> None:
    time.sleep(0.05)


async def _awaiting() -> None:
    await asyncio.sleep(0.3)


class TestRunMeasured:
    def test_a_call_that_blocks_the_loop_shows_its_hold(self) -> None:
        """A coroutine that sleeps without awaiting holds the loop at least that long."""
        loop = asyncio.new_event_loop()
        try:
            with costs.recording() as calls:
                costs.run_measured(loop, _blocking(), "put", "here")
        finally:
            loop.close()
        (call,) = calls
        assert (call.operation, call.where) == ("put", "here")
        assert call.hold >= 0.05
        assert call.seconds >= call.hold

    def test_a_call_that_awaits_leaves_the_loop_free(self) -> None:
        """A coroutine that awaits a long sleep holds the loop for a small part of it."""
        loop = asyncio.new_event_loop()
        try:
            with costs.recording() as calls:
                costs.run_measured(loop, _awaiting(), "freeze", "here")
        finally:
            loop.close()
        (call,) = calls
        assert call.seconds >= 0.3
        assert call.hold < 0.25


class TestRunSpans:
    """Calls in flight at once: each is charged with its own holds, not its neighbours'."""

    def _serve(self, *lives: Any) -> list[costs.Measured]:
        loop = asyncio.new_event_loop()
        spans = costs.Spans("here")

        async def together() -> list[Any]:
            return list(await asyncio.gather(*(life(spans) for life in lives)))

        try:
            with costs.recording() as calls:
                costs.run_spans(loop, together(), spans, "concurrent put")
        finally:
            loop.close()
        return calls

    def test_a_call_that_blocks_the_loop_holds_it_and_delays_no_one_else(self) -> None:
        """The blocking call's hold is its block; the block is left out of the latency of the
        call in flight beside it, and the loop's hold over both is noted once."""

        async def block() -> None:
            time.sleep(0.15)

        async def blocks(spans: costs.Spans) -> None:
            await asyncio.sleep(0.01)
            await spans.call("put", block())

        async def awaits(spans: costs.Spans) -> None:
            await spans.call("freeze", asyncio.sleep(0.2))

        calls = self._serve(blocks, awaits)
        by = {call.operation: call for call in calls}
        assert set(by) == {"put", "freeze", "concurrent put"}
        assert by["put"].hold >= 0.15
        assert by["freeze"].hold < 0.01
        # 0.2 s of waiting, less the put's block of 0.15 s, which is the put's hold.
        assert 0.03 <= by["freeze"].seconds < 0.1
        assert by["concurrent put"].hold >= 0.14  # the heartbeat sees it a period short

    def test_a_call_that_waits_is_slow_without_holding(self) -> None:
        """Waiting (a back-off, a remote acknowledgement) counts as latency, never as hold."""

        async def backs_off(spans: costs.Spans) -> None:
            await spans.call("put", asyncio.sleep(0.2))

        (put, whole) = sorted(self._serve(backs_off), key=lambda call: call.operation != "put")
        assert put.seconds >= 0.2
        assert put.hold < 0.05
        assert whole.operation == "concurrent put"

    def test_a_call_that_raises_passes_its_error_on_and_is_not_measured(self) -> None:
        """An error reaches the caller through the stepping, and the call is not noted."""

        async def fails() -> None:
            await asyncio.sleep(0)
            raise ConnectionError("refused")

        seen: list[BaseException] = []

        async def calls_it(spans: costs.Spans) -> None:
            try:
                await spans.call("put", fails())
            except ConnectionError as error:
                seen.append(error)

        calls = self._serve(calls_it)
        assert [str(error) for error in seen] == ["refused"]
        assert [call.operation for call in calls] == ["concurrent put"]

    def test_a_cancelled_call_is_cancelled_inside(self) -> None:
        """A cancellation reaches the call's own code, as a plain ``await`` would pass it."""
        reached: list[str] = []

        async def waits() -> None:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                reached.append("cancelled")
                raise

        async def cancels(spans: costs.Spans) -> None:
            task = asyncio.ensure_future(spans.call("put", waits()))
            await asyncio.sleep(0.01)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        self._serve(cancels)
        assert reached == ["cancelled"]


class TestReport:
    def test_the_report_carries_the_costs_of_the_calls_the_checks_made(self) -> None:
        """A run's JSON report has latencies, loop holds and the reference figures; without a
        budget COST is not claimed."""
        verdicts = run_conformance(
            "reference:MemoryTokenStore",
            capabilities=["process-local"],
            select=["PUT-2", "COST"],
        )
        report = verdicts.as_json()
        measured = report["costs"]
        assert measured["calls"]["put"]["count"] > 0
        assert measured["calls"]["freeze"]["p99_ms"] >= measured["calls"]["freeze"]["p50_ms"]
        assert measured["loop_hold"]["calls"] > 0
        assert measured["reference"]["target"] == "reference:FileTokenStore"
        assert measured["budget"] is None
        outcomes = {c: e["outcome"] for c, e in report["clauses"].items() if c.startswith("COST")}
        assert outcomes == dict.fromkeys(("COST-1", "COST-2", "COST-3"), "not-claimed")
        assert "#### Costs" in verdicts.as_markdown()


class HoldsOnEveryPut:
    """A store whose every put holds the loop for 120 ms; it counts the puts it was sent."""

    puts = 0

    def __init__(self) -> None:
        from reference.memory_store import MemoryTokenStore

        self._store = MemoryTokenStore("holds-on-every-put")

    async def put(self, entry: Any) -> None:
        type(self).puts += 1
        time.sleep(0.12)
        await self._store.put(entry)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class TestSettledEarly:
    def test_serving_stops_once_the_hold_limit_is_certainly_broken(self) -> None:
        """COST-1 fails as soon as its verdict is certain, without serving every rollout to the
        end: a store whose cost grows with what it holds would otherwise run for minutes."""
        HoldsOnEveryPut.puts = 0
        verdicts = run_conformance(
            f"{__name__}:HoldsOnEveryPut",
            capabilities=["process-local"],
            select=["COST-1"],
            budget="loop-hold-max=100ms",
        )
        outcome = verdicts.as_json()["clauses"]["COST-1"]
        assert outcome["outcome"] == "failed", outcome["message"]
        assert "longest" in outcome["message"]
        assert 1 <= HoldsOnEveryPut.puts < 14 * 8


class RecordsItsFirstPut:
    """A memory store that notes the rollout of the first put any instance was sent."""

    first: ClassVar[list[str]] = []

    def __init__(self) -> None:
        from reference.memory_store import MemoryTokenStore

        self._store = MemoryTokenStore("records-its-first-put")

    async def put(self, entry: Any) -> None:
        if not type(self).first:
            type(self).first.append(entry.rollout_id)
        await self._store.put(entry)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class TestCostFirst:
    @pytest.mark.parametrize(("budget", "cost_first"), [("put-p99=10s", True), (None, False)])
    def test_under_a_budget_the_cost_checks_run_first(
        self, budget: str | None, cost_first: bool
    ) -> None:
        """A store too slow to finish a CI job's run still reports its cost verdict, which
        comes first whenever a budget is claimed; without one the catalog's order holds."""
        RecordsItsFirstPut.first.clear()
        run_conformance(
            f"{__name__}:RecordsItsFirstPut",
            capabilities=["process-local"],
            select=["PUT-1", "COST-2"],
            budget=budget,
        )
        assert ("-serve" in RecordsItsFirstPut.first[0]) is cost_first

    def test_the_pytest_wing_collects_the_cost_checks_first(
        self, pytester: pytest.Pytester
    ) -> None:
        """Under a budget the plugin moves the COST tests to the front of the run."""
        result = pytester.runpytest_subprocess(
            "-p",
            "no:cacheprovider",
            "--collect-only",
            "-q",
            "--tokcap-sink=reference.memory_store:MemoryTokenStore",
            "--tokcap-budget=default",
        )
        tests = [line for line in result.outlines if "::test_" in line]
        assert tests, result.outlines
        families = [line.split("::test_")[1].split("[")[0] for line in tests]
        assert families[:3] == ["cost"] * 3
        assert "cost" not in families[3:]
