"""The pytest plugin: ``pytest --tokcap-sink=module:Class`` judges a TokenSink / TokenSource.

Inert unless a target is given (``--tokcap-sink``, ``--tokcap-config`` or their environment and
ini spellings): it then collects the kit's own tests, names the target in the header,
summarises the verdict per clause family and writes the JSON / markdown reports.
Only the standard library and pytest are imported until the kit is active.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Generator
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from conformance.report import Verdicts
from conformance.settings import OPTIONS, KitSettings, Option, SettingsError, resolve_settings

if TYPE_CHECKING:
    from conformance.registry import Check

SETTINGS_KEY = pytest.StashKey[KitSettings]()
VERDICTS_KEY = pytest.StashKey[Verdicts]()
SUITE = Path(__file__).with_name("suite") / "test_contract.py"
_NOT_OBSERVATIONS = ("tokcap_message", "tokcap_clause", "tokcap_covers", "tokcap_blocked_by")
_CLAUSE_IN_PARAM = re.compile(r"\[((?:EXT-[A-Z]+|[A-Z]+)-\d+)-[^\]]*\]$")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tokcap", "tokcap token-capture conformance kit")
    for option in OPTIONS:
        dest = _dest(option)
        if option.multiple:
            group.addoption(option.flag, action="append", default=[], dest=dest, help=option.help)
            parser.addini(option.ini, option.help, type="args", default=[])
        else:
            group.addoption(option.flag, default=None, dest=dest, help=option.help)
            parser.addini(option.ini, option.help, type="string", default="")


def _dest(option: Option) -> str:
    return "tokcap_" + option.name.replace("-", "_")


def pytest_configure(config: pytest.Config) -> None:
    def from_cli(option: Option) -> tuple[Any, str]:
        return config.getoption(_dest(option)), f"command line {option.flag}"

    def from_ini(option: Option) -> tuple[Any, str]:
        where = f"ini key {option.ini} in {config.inipath}" if config.inipath else option.ini
        return config.getini(option.ini), where

    try:
        settings = resolve_settings(from_cli, os.environ, from_ini)
    except SettingsError as exc:
        raise pytest.UsageError(f"tokcap: {exc}") from None
    if settings is None:
        return
    config.stash[SETTINGS_KEY] = settings
    _collect_suite(config)
    from tokcap_spec import SPEC_REVISION

    config.stash[VERDICTS_KEY] = Verdicts(settings, _kit_version(), SPEC_REVISION)
    config.pluginmanager.register(_Verdict(config), "tokcap-verdict")


def _collect_suite(config: pytest.Config) -> None:
    """Make the kit's test module part of the run, alone unless the user named paths.

    The suite's folder, not its file, is passed so that node ids read
    ``test_contract.py::test_put[PUT-1-...]`` wherever the kit is installed.
    """
    suite = str(SUITE.parent)
    named = [arg for arg in config.args if arg.split("::", 1)[0].startswith(suite)]
    if config.args_source is pytest.Config.ArgsSource.ARGS:
        if not named:
            config.args.append(suite)
    else:
        config.args[:] = [suite]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """Collect the kit's module even where ``python_files`` would not match its name."""
    if file_path != SUITE or SETTINGS_KEY not in parent.config.stash:
        return None
    patterns = parent.config.getini("python_files")
    if any(fnmatch.fnmatch(file_path.name, pattern) for pattern in patterns):
        return None
    return pytest.Module.from_parent(parent, path=file_path)


def _kit_version() -> str:
    try:
        return metadata.version("tokcap")
    except metadata.PackageNotFoundError:
        return "unknown"


def _target_version(target: str) -> str:
    top = target.split(":", 1)[0].split(".", 1)[0]
    for distribution in metadata.packages_distributions().get(top, []):
        try:
            return f"{distribution} {metadata.version(distribution)}"
        except metadata.PackageNotFoundError:
            continue
    return "not from an installed distribution"


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return None
    from tokcap_spec import SPEC_REVISION

    lines = [
        f"tokcap {_kit_version()} (spec {SPEC_REVISION}): judging "
        f"sink {settings.sink} [{_target_version(settings.sink)}]",
        f"tokcap: source {settings.source} [{_target_version(settings.source)}]",
        f"tokcap: fence={settings.fence}"
        f" capabilities={','.join(sorted(settings.capabilities)) or 'none'}"
        f" seed={settings.seed} profile={settings.profile}"
        f" sink-kwargs={','.join(sorted(settings.sink_kwargs)) or 'none'}",
    ]
    if settings.config is not None:
        lines.append(f"tokcap: sink read from Gym config {settings.config}")
    return lines


@pytest.fixture
def tokcap_run(request: pytest.FixtureRequest) -> Callable[[Check], None]:
    """Run one registered check against the target named on the command line."""
    settings = request.config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        pytest.fail("tokcap_run needs a target: pass --tokcap-sink=module:Class", pytrace=False)

    def run(check: Check) -> None:
        __tracebackhide__ = True
        from conformance.runner import CheckBlocked, CheckSkipped, run_check
        from conformance.violation import ClauseViolation

        if check.covers:
            request.node.user_properties.append(("tokcap_covers", " ".join(check.covers)))
        try:
            observations = run_check(settings, check)
        except CheckSkipped as exc:
            pytest.skip(exc.reason)
        except CheckBlocked as exc:
            request.node.user_properties.append(("tokcap_blocked_by", exc.blocked_by))
            request.node.user_properties.append(("tokcap_message", str(exc.violation)))
            pytest.skip(exc.reason)
        except ClauseViolation as exc:
            request.node.user_properties.append(("tokcap_message", str(exc)))
            request.node.user_properties.append(("tokcap_clause", exc.clause))
            raise
        for key, value in observations.items():
            request.node.user_properties.append((f"tokcap_{key}", value))

    return run


class _Verdict:
    """Gathers test outcomes per clause; registered only while the kit is active."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Under xdist this runs on the controller too, so the verdict sees every worker.
        match = _CLAUSE_IN_PARAM.search(report.nodeid)
        if match is None or "test_contract.py::" not in report.nodeid:
            return
        verdicts = self.config.stash[VERDICTS_KEY]
        properties = dict(report.user_properties)
        for key, value in properties.items():
            if key.startswith("tokcap_") and key not in _NOT_OBSERVATIONS:
                verdicts.observations[key.removeprefix("tokcap_")] = str(value)
        clause = match.group(1)
        # A check proving many clauses that stops on one of them leaves the others unproven,
        # which must not outweigh a check of its own that passed.
        soft = bool(properties.get("tokcap_covers"))
        if report.failed:
            message = str(properties.get("tokcap_message") or _first_line(report.longreprtext))
            violated = str(properties.get("tokcap_clause") or clause)
            verdicts.record(violated, report.nodeid, "failed", message)
            if violated != clause:
                verdicts.record(clause, report.nodeid, "blocked", message, violated, soft=soft)
        elif report.skipped and "tokcap_blocked_by" in properties:
            blocker = str(properties["tokcap_blocked_by"])
            verdicts.record(
                clause, report.nodeid, "blocked", _skip_reason(report), blocker, soft=soft
            )
            verdicts.record(blocker, report.nodeid, "failed", str(properties["tokcap_message"]))
        elif report.skipped:
            reason = _skip_reason(report)
            outcome = "not-claimed" if reason.startswith("not claimed") else "skipped"
            verdicts.record(clause, report.nodeid, outcome, reason)
        elif report.when == "call":
            for proven in (clause, *str(properties.get("tokcap_covers", "")).split()):
                verdicts.record(proven, report.nodeid, "passed")


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return _first_line(str(longrepr))


def _first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, None, None]:
    yield
    config = session.config
    if VERDICTS_KEY not in config.stash or hasattr(config, "workerinput"):
        return
    verdicts = config.stash[VERDICTS_KEY]
    settings = config.stash[SETTINGS_KEY]
    if verdicts.summary()["failed"] and session.exitstatus == pytest.ExitCode.OK:
        # A clause can fail only through the evidence a blocked check carried.
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if settings.report is not None:
        verdicts.write_json(settings.report)
    if settings.report_md is not None:
        verdicts.write_markdown(settings.report_md)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if VERDICTS_KEY not in config.stash or hasattr(config, "workerinput"):
        return
    verdicts = config.stash[VERDICTS_KEY]
    settings = config.stash[SETTINGS_KEY]
    write = terminalreporter.write_line
    terminalreporter.section("tokcap conformance")
    write(f"{'family':<8} {'passed':>7} {'failed':>7} {'skipped':>8} {'not claimed':>12}")
    for family, counts in verdicts.by_family().items():
        write(
            f"{family:<8} {counts['passed']:>7} {counts['failed']:>7} {counts['skipped']:>8} "
            f"{counts['not-claimed']:>12}"
        )
    failed = [c for c, e in verdicts.clauses.items() if e.outcome == "failed"]
    summary = verdicts.summary()
    write(
        f"clauses: {summary['passed']} passed, {summary['failed']} failed, "
        f"{summary['skipped']} skipped, {summary['not-claimed']} not claimed, "
        f"{summary['blocked']} blocked" + (f" (failed: {', '.join(failed)})" if failed else "")
    )
    if "fence" in verdicts.observations:
        write(f"observed fence: {verdicts.observations['fence']}")
    for path in (settings.report, settings.report_md):
        if path is not None:
            write(f"report written to {path}")
