"""The kit's pytest hooks, registered by :mod:`tokcap_pytest` once a target is configured.

Resolves the settings, refuses a target that cannot be built as a usage error, collects the
kit's own tests, names the target in the header, summarises the verdict per clause family and
writes the JSON / markdown reports on every way a run can end. Everything the run prints or
writes passes through :mod:`conformance._secrecy`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable, Generator
from multiprocessing import resource_tracker
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from conformance import _channels as channels
from conformance import _constructions as constructions
from conformance import _costs as costs
from conformance import _interrupt as interrupt
from conformance import _secrecy as secrecy
from conformance import _tempdir as tempdir
from conformance._engine import keep_hypothesis_out_of_the_project
from conformance._leftovers import WorkingDirectory, become_subreaper, live_children
from conformance._notices import header_notices
from conformance._probe import (
    TargetError,
    distribution_of,
    expected_duration,
    kit_version,
    probe_target,
)
from conformance._pytest_wing import outcomes
from conformance._report import Verdicts
from conformance._settings import KitSettings, Option, SettingsError, resolve_settings

if TYPE_CHECKING:
    from conformance._registry import Check

__all__ = ["SETTINGS_KEY", "SUITE", "VERDICTS_KEY", "tokcap_run"]

SETTINGS_KEY = pytest.StashKey[KitSettings]()
VERDICTS_KEY = pytest.StashKey[Verdicts]()
SCRATCH_KEY = pytest.StashKey[Path]()
CWD_KEY = pytest.StashKey[WorkingDirectory]()
WRITTEN_KEY = pytest.StashKey[bool]()
WORKER_PIDS_KEY = pytest.StashKey[list[int]]()
WORKER_LEFTOVERS_KEY = pytest.StashKey[list[str]]()
_PID_OUTPUT = "tokcap_pid"
_LEFTOVERS_OUTPUT = "tokcap_leftovers"
BUILT = "tokcap-constructions"
"""The property of a test's report that counts the constructions it made."""
COSTS = "tokcap-costs"
"""The property of a test's report that carries the costs it measured (JSON)."""
SUITE = Path(__file__).with_name("suite") / "test_contract.py"


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    def from_cli(option: Option) -> tuple[Any, str]:
        return config.getoption(option.dest), f"command line {option.flag}"

    def from_ini(option: Option) -> tuple[Any, str]:
        where = f"ini key {option.ini} in {config.inipath}" if config.inipath else option.ini
        value = config.getini(option.ini)
        if option.path and value and config.inipath is not None:
            value = os.path.join(config.inipath.parent, os.path.expanduser(value))
        return value, where

    try:
        settings = resolve_settings(from_cli, os.environ, from_ini, lambda: _scratch(config))
    except SettingsError as exc:
        raise pytest.UsageError(f"tokcap: {exc}") from None
    if settings is None:
        return
    settings = _with_run_seed(config, settings)
    secrecy.keep(settings.secrets)
    from tokcap_spec import SPEC_REVISION

    verdicts = Verdicts(settings, kit_version(), SPEC_REVISION)
    config.stash[SETTINGS_KEY] = settings
    config.stash[VERDICTS_KEY] = verdicts
    # From here on an interrupt writes the reports: through a cleanup, not a hook, since an
    # interrupt during this function stops pluggy registering the hooks that follow it.
    config.add_cleanup(lambda: _finish_unfinished(config))
    interrupt.install()
    config.add_cleanup(channels.mask_hooks())
    keep_hypothesis_out_of_the_project()
    verdicts.distributions = {role: distribution_of(target) for role, target in settings.roles()}
    if not config.option.collectonly:
        _keep_the_target_in_scratch(config)
    if not config.option.collectonly and not hasattr(config, "workerinput"):
        try:
            expectation = expected_duration(settings, probe_target(settings))
            if expectation:
                sys.stderr.write(expectation + "\n")
        except TargetError as refused:
            verdicts.run.finish("interrupted", "usage error: the target cannot be built")
            _write_reports(config, verdicts, settings)
            raise pytest.UsageError(str(refused)) from None
    _collect_suite(config)
    from conformance._pytest_wing.verdict import VerdictHooks

    config.pluginmanager.register(VerdictHooks(config, verdicts), "tokcap-verdict")
    config.pluginmanager.register(_Constructions(verdicts), "tokcap-constructions")


def _with_run_seed(config: pytest.Config, settings: KitSettings) -> KitSettings:
    """A run without ``--tokcap-seed`` explores a new seed each time, the same in every worker.

    The seed is printed in the header and the reports, so ``--tokcap-seed`` replays the run.
    """
    if settings.seed_given:
        return settings
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and _SEED_INPUT in workerinput:
        return dataclasses.replace(settings, seed=int(workerinput[_SEED_INPUT]))
    return dataclasses.replace(settings, seed=secrets.randbelow(2**31))


_SEED_INPUT = "tokcap_seed"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Hand an xdist worker the controller's seed, so all of them explore one run."""
    settings = node.config.stash.get(SETTINGS_KEY, None)
    if settings is not None:
        node.workerinput[_SEED_INPUT] = settings.seed


def _scratch(config: pytest.Config) -> Path:
    """A directory for the run under pytest's basetemp, so pytest's retention applies."""
    if SCRATCH_KEY not in config.stash:
        factory = getattr(config, "_tmp_path_factory", None)
        if factory is not None:
            config.stash[SCRATCH_KEY] = factory.mktemp("tokcap", numbered=True)
        else:  # the tmpdir plugin is disabled: a directory of our own, removed at the end
            config.stash[SCRATCH_KEY] = Path(tempfile.mkdtemp(prefix="tokcap-"))
            config.add_cleanup(lambda: shutil.rmtree(config.stash[SCRATCH_KEY], True))
    return config.stash[SCRATCH_KEY]


def _keep_the_target_in_scratch(config: pytest.Config) -> None:
    """Point the target's temporary files into the run's basetemp, and note the working
    directory's files and adopt orphaned processes, to name what the target leaves behind."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        folder = factory.mktemp("tokcap-tmp")
    else:  # the tmpdir plugin is disabled: a directory of our own, removed at the end
        folder = Path(tempfile.mkdtemp(prefix="tokcap-tmp-"))
        config.add_cleanup(lambda: shutil.rmtree(folder, True))
    config.add_cleanup(tempdir.redirect(folder))
    config.stash[CWD_KEY] = WorkingDirectory(Path.cwd())
    become_subreaper()


def _left_behind(config: pytest.Config, settings: KitSettings) -> list[str]:
    """Warnings about files the run made in the working directory outside its own outputs,
    and about processes still running that the kit did not start."""
    found: list[str] = []
    before = config.stash.get(CWD_KEY, None)
    if before is not None:
        outputs = [p for p in (settings.report, settings.report_md) if p is not None]
        outputs += [p.parent / f".{p.name}.partial" for p in outputs]
        for option in ("xmlpath", "log_file"):
            if getattr(config.option, option, None):
                outputs.append(Path(getattr(config.option, option)))
        factory = getattr(config, "_tmp_path_factory", None)
        if factory is not None:
            outputs.append(factory.getbasetemp())
        if settings.report is not None:  # timelines of failed concurrency checks
            outputs += settings.report.parent.glob("*-timeline.html")
        for name in before.new_files(outputs):
            found.append(f"the target left {name} in the working directory {before.root}")
    # An xdist controller's own children are its workers: each says its pid on the way down.
    found += _still_running(config.stash.get(WORKER_PIDS_KEY, []))
    heard: list[str] = config.stash.get(WORKER_LEFTOVERS_KEY, [])
    return found + heard


def _still_running(ignored: list[int]) -> list[str]:
    """The processes this one started (or adopted) that still run, the kit's own apart."""
    tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
    ignored = [*ignored, *([tracker] if tracker else [])]
    return [f"{process} was still running when the run ended" for process in live_children(ignored)]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """Hear from an xdist worker what it left running, and which process it was."""
    output = getattr(node, "workeroutput", {})
    config = node.config
    config.stash.setdefault(WORKER_PIDS_KEY, []).append(int(output.get(_PID_OUTPUT, 0)))
    config.stash.setdefault(WORKER_LEFTOVERS_KEY, []).extend(output.get(_LEFTOVERS_OUTPUT, []))


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


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> Any:
    """Collect, of the kit's own test functions, those of the contract the run judges."""
    settings = collector.config.stash.get(SETTINGS_KEY, None)
    if settings is None or collector.path != SUITE:
        return None
    contract = getattr(obj, "tokcap_contract", settings.contract)
    return [] if contract != settings.contract else None


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """Collect the kit's module even where ``python_files`` would not match its name."""
    if file_path != SUITE or SETTINGS_KEY not in parent.config.stash:
        return None
    patterns = parent.config.getini("python_files")
    if any(fnmatch.fnmatch(file_path.name, pattern) for pattern in patterns):
        return None
    return pytest.Module.from_parent(parent, path=file_path)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return None
    verdicts = config.stash[VERDICTS_KEY]

    def version(role: str) -> str:
        found = verdicts.distributions[role]
        return f"{found['name']} {found['version']}" if found["name"] else found["version"]

    (sink_role, _), (source_role, _) = settings.roles()[:2]
    lines = [
        f"tokcap {verdicts.kit_version} (spec {verdicts.spec}, contract {settings.contract}): "
        f"judging {sink_role.replace('-', ' ')} {settings.sink} [{version(sink_role)}]",
        f"tokcap: {source_role.replace('-', ' ')} {settings.source} [{version(source_role)}]",
        *(
            [f"tokcap: lineage {settings.lineage} [{version('lineage')}]"]
            if settings.lineage
            else []
        ),
        ("tokcap:" if settings.staging else f"tokcap: fence={settings.fence}")
        + f" capabilities={','.join(sorted(settings.capabilities)) or 'none'}"
        f" seed={settings.seed} profile={settings.profile} timeout={settings.timeout:g}s"
        + (
            f" staging-classes={settings.staging_classes}"
            if settings.staging
            else f" entry-class={settings.entry_class}"
        )
        + f" {sink_role}-kwargs={','.join(sorted(settings.sink_kwargs)) or 'none'}",
    ]
    if settings.config is not None:
        lines.append(f"tokcap: sink read from Gym config {settings.config}")
    return lines + header_notices(settings, config.option.collectonly)


@pytest.fixture
def tokcap_run(request: pytest.FixtureRequest) -> Callable[[Check], None]:
    """Run one registered check against the target named on the command line."""
    settings = request.config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        pytest.fail("tokcap_run needs a target: pass --tokcap-sink=module:Class", pytrace=False)

    def run(check: Check) -> None:
        __tracebackhide__ = True
        outcomes.judge(settings, check, request.node.user_properties)

    return run


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Name what the target left behind, after the verdict."""
    verdicts = config.stash.get(VERDICTS_KEY, None)
    for warning in verdicts.warnings if verdicts is not None else []:
        terminalreporter.write_line(f"tokcap warning: {secrecy.scrub(warning)}")


@pytest.hookimpl(tryfirst=True)
def pytest_warning_recorded(warning_message: Any) -> None:
    """Mask every secret in a warning (pytest's about thread and unraisable exceptions too)."""
    channels.mask_warning(warning_message)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Mask every secret in what the logging handlers pytest installed emit."""
    channels.mask_logging(session.config.pluginmanager.get_plugin("logging-plugin"))


@pytest.hookimpl(tryfirst=True)
def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """Mask every secret in the message of an interrupt before the terminal shows it."""
    channels.mask_exception(excinfo.value)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Mask every secret in what a test's report carries to the terminal, junit and xdist."""
    report = yield
    from conformance._pytest_wing.verdict import scrub_report

    scrub_report(report)
    built = constructions.take()
    if built:  # this report's own list: the item's is shared by its three phases
        report.user_properties = [*report.user_properties, (BUILT, built)]
    measured = costs.take()
    if measured:
        report.user_properties = [*report.user_properties, (COSTS, json.dumps(measured))]
    return report


class _Constructions:
    """Adds up the constructions each test reports, here or on an xdist worker."""

    def __init__(self, verdicts: Verdicts) -> None:
        self.verdicts = verdicts

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.verdicts.constructions += sum(
            int(str(value)) for key, value in report.user_properties if key == BUILT
        )
        for key, value in report.user_properties:
            if key == COSTS:
                self.verdicts.costs.add(json.loads(str(value)))


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
    config = session.config
    verdicts = config.stash.get(VERDICTS_KEY, None)
    if verdicts is not None:
        interrupt.wind_down()
        _stop_what_the_kit_started()
    if verdicts is not None and hasattr(config, "workeroutput"):
        config.workeroutput[_PID_OUTPUT] = os.getpid()
        config.workeroutput[_LEFTOVERS_OUTPUT] = _still_running([])
    if verdicts is not None and not hasattr(config, "workerinput"):
        from conformance._pytest_wing.verdict import conclude

        verdicts.warnings += _left_behind(config, config.stash[SETTINGS_KEY])
        verdicts.constructions += constructions.take()
        verdicts.costs.add(costs.take())
        conclude(session, verdicts)
        if interrupt.received():
            verdicts.run.finish("interrupted", f"terminated by {interrupt.received()}")
    try:
        return (yield)
    finally:
        settings = config.stash.get(SETTINGS_KEY, None)
        written = not config.option.collectonly and not hasattr(config, "workerinput")
        if verdicts is not None and settings is not None and written:
            _write_reports(config, verdicts, settings)
        judged = settings.judged_directory if settings is not None else None
        if judged is not None:
            shutil.rmtree(judged, ignore_errors=True)


def _finish_unfinished(config: pytest.Config) -> None:
    """A run interrupted before its session finished (while the target was being built, say)
    still writes its reports, stops what it started and gives the signals back."""
    verdicts = config.stash.get(VERDICTS_KEY, None)
    settings = config.stash.get(SETTINGS_KEY, None)
    if verdicts is not None and settings is not None:
        interrupt.wind_down()
        _stop_what_the_kit_started()
        unwritten = not config.stash.get(WRITTEN_KEY, False) and not config.option.collectonly
        if unwritten and not hasattr(config, "workerinput"):
            signal = interrupt.received()
            reason = f"terminated by {signal}" if signal else "interrupted before the checks ran"
            verdicts.run.finish("interrupted", reason)
            _write_reports(config, verdicts, settings)
            junit = config.option.xmlpath
            path = Path(config.invocation_params.dir, os.path.expanduser(junit or "."))
            if junit and not _written_since(path, verdicts.run.started):
                # The session never ran, so pytest wrote no junit: the kit writes its own.
                verdicts.write_junit(path, ended_early=reason)
    interrupt.restore()


def _written_since(path: Path, started: float) -> bool:
    try:
        return path.stat().st_mtime >= started
    except OSError:
        return False


def _stop_what_the_kit_started() -> None:
    """Stop every check thread and spawned worker still running: none runs on after the verdict."""
    if "conformance._deadline" in sys.modules:
        from conformance._deadline import stop_checks

        stop_checks()


def _write_reports(config: pytest.Config, verdicts: Verdicts, settings: KitSettings) -> None:
    config.stash[WRITTEN_KEY] = True
    if settings.report is not None:
        verdicts.write_json(settings.report)
    if settings.report_md is not None:
        verdicts.write_markdown(settings.report_md)
