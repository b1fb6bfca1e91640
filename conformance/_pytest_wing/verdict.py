"""Gathering the verdict from test reports, concluding the run, and masking secrets in reports.

Registered only while the kit is active. Under xdist the report hooks run on the controller
too, so the verdict sees every worker's tests.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import pytest

from conformance._engine import tally
from conformance._pytest_wing import outcomes
from conformance._report import Verdicts
from conformance._secrecy import scrub

if TYPE_CHECKING:
    from conformance._registry import Check

__all__ = ["VerdictHooks", "conclude", "scrub_report"]

_KIT_MODULE = "test_contract.py::"


class VerdictHooks:
    """Reads every kit test's report into the run's :class:`Verdicts`."""

    def __init__(self, config: pytest.Config, verdicts: Verdicts) -> None:
        self.config = config
        self.verdicts = verdicts
        self.selected: set[str] = set()
        self.deselected = 0

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected += len(items)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.selected = {item.nodeid for item in items if _KIT_MODULE in item.nodeid}
        for item in items:
            found = _check_of(item)
            if found is not None:  # every phase's report names its check
                item.user_properties.append((outcomes.CHECK, found.id))
        budgeted = bool(self.verdicts.settings.budget)
        items.sort(key=lambda item: not _runs_early(item, budgeted))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        # An xdist controller collects nothing itself: its workers tell it what they will run.
        self.selected |= {nodeid for nodeid in ids if _KIT_MODULE in nodeid}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        named = dict(report.user_properties).get(outcomes.CHECK)
        found = _registered().get(str(named)) if named is not None else None
        if found is None:
            return
        self.verdicts.reported.add(report.nodeid)
        text = _skip_reason(report) if report.skipped else _first_line(report.longreprtext)
        outcome = outcomes.outcome_of(report, found, text)
        if outcome is not None:
            tally(self.verdicts, found, report.nodeid, outcome)

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        if config.option.collectonly:
            return
        verdicts = self.verdicts
        settings = verdicts.settings
        write = terminalreporter.write_line
        terminalreporter.section("tokcap conformance")
        write(
            f"{'family':<8} {'passed':>7} {'failed':>7} {'blocked':>8} {'skipped':>8} "
            f"{'not claimed':>12}"
        )
        for family, counts in verdicts.by_family().items():
            write(
                f"{family:<8} {counts['passed']:>7} {counts['failed']:>7} {counts['blocked']:>8} "
                f"{counts['skipped']:>8} {counts['not-claimed']:>12}"
            )
        failed = verdicts.failed
        summary = verdicts.summary()
        # The line reads as it always did; the blocked count joins it only when there is one.
        blocked = f", {summary['blocked']} blocked" if summary["blocked"] else ""
        write(
            f"clauses: {summary['passed']} passed, {summary['failed']} failed, "
            f"{summary['skipped']} skipped, {summary['not-claimed']} not claimed{blocked}"
            + (f" (failed: {', '.join(failed)})" if failed else "")
        )
        run = verdicts.run
        write(f"run: {run.status}{' (' + run.reason + ')' if run.reason else ''}")
        write(f"seed: {settings.seed} (replay this run with --tokcap-seed={settings.seed})")
        if "fence" in verdicts.observations:
            write(f"observed fence: {verdicts.observations['fence']}")
        costs = verdicts.costs.as_lines()
        if costs:
            from conformance._budget import shown

            budget = shown(settings.budget) if settings.budget else "none (COST not claimed)"
            write(f"costs, measured as the checks ran (budget: {budget}):")
            for line in costs:
                write(line)
        for path in (settings.report, settings.report_md):
            if path is not None:
                write(f"report written to {path}")


def conclude(session: pytest.Session, verdicts: Verdicts) -> None:
    """Stamp how far the run got, fail it when a clause failed, and tell junit the same."""
    hooks = session.config.pluginmanager.get_plugin("tokcap-verdict")
    assert isinstance(hooks, VerdictHooks)
    status = int(session.exitstatus)
    if status == pytest.ExitCode.INTERRUPTED:
        verdicts.run.finish("interrupted", "interrupted by the user")
    elif status == pytest.ExitCode.INTERNAL_ERROR:
        verdicts.run.finish("interrupted", "internal error")
    elif session.shouldfail or session.shouldstop:
        verdicts.run.finish("partial", str(session.shouldfail or session.shouldstop))
    elif not hooks.selected or _selection(hooks, verdicts):
        verdicts.run.finish("partial", "a selection of the kit's checks ran")
    else:
        verdicts.run.finish("complete")
    if verdicts.failed and status == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    xml = _junit(session.config)
    if xml is not None:
        xml.add_global_property("tokcap_status", verdicts.run.status)
        xml.add_global_property("tokcap_failed_clauses", " ".join(verdicts.failed))
        xml.add_global_property("tokcap_kit_version", verdicts.kit_version)
        xml.add_global_property("tokcap_spec", verdicts.spec)


def _selection(hooks: VerdictHooks, verdicts: Verdicts) -> bool:
    """Whether only some of the kit's checks ran: a ``-k``/``-m`` selection or node ids."""
    from conformance._registry import all_checks

    unreported = hooks.selected - verdicts.reported
    contract = verdicts.settings.contract
    judged = [found for found in all_checks() if found.contract == contract]
    return bool(hooks.deselected or unreported or len(hooks.selected) < len(judged))


@functools.cache
def _check_of(item: pytest.Item) -> Check | None:
    """The check a collected kit test runs: its ``tokcap_check`` parameter."""
    callspec = getattr(item, "callspec", None)
    found = callspec.params.get("tokcap_check") if callspec is not None else None
    return found if _KIT_MODULE in item.nodeid and found is not None else None


def _runs_early(item: pytest.Item, budgeted: bool) -> bool:
    from conformance._registry import runs_early

    found = _check_of(item)
    return found is not None and runs_early(found, budgeted=budgeted)


def _registered() -> dict[str, Check]:
    """Every registered check by id, read once per process."""
    from conformance._registry import checks_by_id

    return checks_by_id()


def _junit(config: pytest.Config) -> Any:
    from _pytest.junitxml import xml_key

    return config.stash.get(xml_key, None)


def scrub_report(report: pytest.TestReport) -> None:
    """Mask every secret in a report's traceback, captured output and properties."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        path, line, reason = longrepr
        report.longrepr = (path, line, scrub(reason))
    elif longrepr is not None:
        text = str(longrepr)
        cleaned = scrub(text)
        if cleaned != text:
            report.longrepr = cleaned
    report.sections = [(title, scrub(content)) for title, content in report.sections]
    report.user_properties = [
        (key, scrub(value) if isinstance(value, str) else value)
        for key, value in report.user_properties
    ]


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return _first_line(str(longrepr))


def _first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")
