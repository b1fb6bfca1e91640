"""The kit as a Python call: :func:`run_conformance` and :func:`run_conformance_async`.

They judge a target exactly as ``pytest -p tokcap_pytest --tokcap-sink=...`` does, through the
same engine (:mod:`conformance._engine`): the same checks in the same order, every call into
the target under the run's deadline, the same verdict per clause. They return the report the
plugin writes as JSON, and write it (and its markdown and junit forms) where asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import secrets
import shutil
import tempfile
import threading
import warnings
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, ParamSpec

from conformance import _constructions as constructions
from conformance import _costs as costs
from conformance import _secrecy as secrecy
from conformance import _tempdir as tempdir
from conformance._deadline import stop_checks
from conformance._engine import evaluate, keep_hypothesis_out_of_the_project, tally, test_name
from conformance._probe import TargetError, distribution_of, kit_version, probe_target
from conformance._registry import Check, all_checks, runs_early
from conformance._report import Verdicts
from conformance._settings import (
    DEFAULT_CONTRACT,
    DEFAULT_FENCE,
    DEFAULT_PROFILE,
    KitSettings,
    Option,
    SettingsError,
    resolve_settings,
)
from conformance.catalog import CLAUSES, KIT, KIT_FAMILIES

__all__ = ["TargetError", "run_conformance", "run_conformance_async"]

_WHERE = "argument {} of run_conformance"
P = ParamSpec("P")


def run_conformance(
    sink: str,
    *,
    sink_kwargs: Mapping[str, Any] | None = None,
    source: str | None = None,
    source_kwargs: Mapping[str, Any] | None = None,
    lineage: str | None = None,
    lineage_kwargs: Mapping[str, Any] | None = None,
    fence: str = DEFAULT_FENCE,
    capabilities: Iterable[str] = (),
    profile: str = DEFAULT_PROFILE,
    seed: int | None = None,
    timeout: float | None = None,
    entry_class: str | None = None,
    select: Iterable[str] = (),
    report: str | Path | None = None,
    report_md: str | Path | None = None,
    junit: str | Path | None = None,
    contract: str = DEFAULT_CONTRACT,
    staging_classes: str | None = None,
    budget: str | None = None,
) -> Verdicts:
    """Judge ``sink`` (``"module.path:ClassName"``) and return the conformance report.

    The arguments are the plugin's options: ``sink_kwargs`` and ``source_kwargs`` are the
    constructor's keyword arguments (``"{tmp_path}"`` in a string becomes a fresh folder,
    removed afterwards), ``source`` defaults to the sink, ``lineage`` names the lineage
    resolver to judge (its kwargs default to the sink's), ``capabilities`` are the declared
    ones (``"process-local"``, ``"no-delete"``), ``seed`` None draws a new one (the report
    names it). ``select`` keeps only the checks named by check id, clause id or family (the
    run is then ``partial``). ``report``, ``report_md`` and ``junit`` are paths to write the
    JSON, markdown and junit reports to. With ``contract="staging-v2"``, ``sink`` and
    ``source`` (and their kwargs) name the staging sink and source, and the STAGE family is
    judged; ``lineage``, ``fence`` and ``entry_class`` belong to the capture contract, and
    ``staging_classes`` (``"tokcap"``, ``"gym"`` or a module path: the classes records are
    staged as and results must be) to the staging contract.

    Safe to call from a script with or without an ``if __name__ == "__main__"`` guard (spawned
    workers never run the caller's script) and from inside a running event loop (the checks
    then run on a thread of their own). Raises :class:`conformance.SettingsError` for an
    unusable argument and :class:`TargetError` for a target that cannot be imported or built;
    what the target does wrong is in the report, never raised. Kwarg values never appear in
    the report, in errors or in warnings.
    """
    arguments = dict(locals())
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run(arguments)
    found: list[Verdicts] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            found.append(_run(arguments))
        except BaseException as exc:  # handed back to the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=run, name="tokcap-run")
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
    return found[0]


def _awaitable(function: Callable[P, Verdicts]) -> Callable[P, Awaitable[Verdicts]]:
    @functools.wraps(function)  # help() and inspect show the arguments of ``function``
    async def awaitable(*args: P.args, **kwargs: P.kwargs) -> Verdicts:
        return await asyncio.to_thread(function, *args, **kwargs)

    return awaitable


run_conformance_async = _awaitable(run_conformance)
run_conformance_async.__name__ = run_conformance_async.__qualname__ = "run_conformance_async"
run_conformance_async.__doc__ = """:func:`run_conformance` as an awaitable, with the same
arguments: the checks run on a thread of their own, so the caller's event loop keeps running
meanwhile."""


def _run(arguments: dict[str, Any]) -> Verdicts:
    scratch = Path(tempfile.mkdtemp(prefix="tokcap-"))
    try:
        settings = _settings(arguments, scratch)
        chosen = _selected(arguments["select"], settings.contract)
        return _judge(settings, chosen, arguments, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _settings(arguments: dict[str, Any], scratch: Path) -> KitSettings:
    given: dict[str, Any] = {
        "sink": arguments["sink"],
        "source": arguments["source"],
        "sink-kwargs": _json(arguments["sink_kwargs"], "sink_kwargs"),
        "source-kwargs": _json(arguments["source_kwargs"], "source_kwargs"),
        "lineage": arguments["lineage"],
        "lineage-kwargs": _json(arguments["lineage_kwargs"], "lineage_kwargs"),
        "fence": arguments["fence"],
        "capability": _names(arguments["capabilities"], "capabilities"),
        "profile": arguments["profile"],
        "seed": None if arguments["seed"] is None else str(arguments["seed"]),
        "timeout": None if arguments["timeout"] is None else str(arguments["timeout"]),
        "entry-class": arguments["entry_class"],
        "staging-classes": arguments["staging_classes"],
        "budget": arguments["budget"],
        "report": None if arguments["report"] is None else str(arguments["report"]),
        "report-md": None if arguments["report_md"] is None else str(arguments["report_md"]),
    }
    if arguments["contract"] != DEFAULT_CONTRACT:
        given = _as_staging(given, arguments)
    target = given.get("staging-sink", given.get("sink"))
    if not isinstance(target, str) or not target:
        raise SettingsError("run_conformance needs sink='module.path:ClassName'")

    def lookup(option: Option) -> tuple[Any, str]:
        # Under staging-v2 the caller's ``sink`` is the option --tokcap-staging-sink.
        argument = option.name.removeprefix("staging-")
        return given.get(option.name), _WHERE.format(argument.replace("-", "_"))

    def nothing(option: Option) -> tuple[None, str]:
        return None, ""

    settings = resolve_settings(lookup, {}, nothing, lambda: _fresh(scratch, "tmp_path"))
    assert settings is not None  # a sink was given
    if not settings.seed_given:
        settings = replace(settings, seed=secrets.randbelow(2**31))
    return settings


def _as_staging(given: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """The options of a staging run: the targets under their staging names; the capture
    contract's settings only where the caller gave them (and the settings refuse them)."""
    staging = dict(given)
    for name in ("sink", "source", "sink-kwargs", "source-kwargs"):
        staging[f"staging-{name}"] = staging.pop(name)
    if arguments["fence"] == DEFAULT_FENCE:
        staging.pop("fence")
    staging["contract"] = arguments["contract"]
    return staging


def _json(value: Mapping[str, Any] | None, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise SettingsError(f"{_WHERE.format(name)} must be a mapping of keyword arguments")
    try:
        return json.dumps(dict(value))
    except (TypeError, ValueError):
        # Only the names: a value may be a credential.
        raise SettingsError(
            f"{_WHERE.format(name)} must hold JSON values (strings, numbers, booleans, null, "
            f"lists, mappings), as spawned workers receive them; keys: {', '.join(map(str, value))}"
        ) from None


def _names(values: Iterable[str], name: str) -> list[str]:
    if isinstance(values, str):
        return [values]
    listed = list(values)
    if not all(isinstance(value, str) for value in listed):
        raise SettingsError(f"{_WHERE.format(name)} must be names such as 'process-local'")
    return listed


def _fresh(scratch: Path, name: str) -> Path:
    folder = scratch / name
    folder.mkdir(exist_ok=True)
    return folder


def _contract_checks(contract: str) -> list[Check]:
    """Every check of ``contract``."""
    return [found for found in all_checks() if found.contract == contract]


def _selected(select: Iterable[str], contract: str) -> list[Check]:
    """The checks ``select`` names (check ids, clause ids, families); every check if none."""
    names = _names(select, "select")
    checks = _contract_checks(contract)
    if not names:
        return checks
    kit_clauses = {found.id for found in CLAUSES if found.checked_by == KIT}
    unknown = [
        name
        for name in names
        if name not in KIT_FAMILIES
        and name not in kit_clauses
        and not any(found.id == name for found in checks)
    ]
    if unknown:
        raise SettingsError(
            f"{_WHERE.format('select')} names no check, kit clause or family: "
            f"{', '.join(unknown)}; python -m conformance.clauses lists them"
        )
    return [
        found
        for found in checks
        if found.id in names
        or found.family in names
        or any(clause in names for clause in found.judges)
    ]


def _judge(
    settings: KitSettings, chosen: list[Check], arguments: dict[str, Any], scratch: Path
) -> Verdicts:
    from tokcap_spec import SPEC_REVISION

    secrecy.keep(settings.secrets)
    verdicts = Verdicts(settings, kit_version(), SPEC_REVISION)
    verdicts.distributions = {role: distribution_of(target) for role, target in settings.roles()}
    keep_hypothesis_out_of_the_project()
    restore = tempdir.redirect(_fresh(scratch, "tmp"))
    constructions.take()  # what earlier runs in this process built is theirs
    costs.take()  # and what they measured
    try:
        with _warnings_masked():
            try:
                probe_target(settings)
            except TargetError:
                verdicts.run.finish("interrupted", "usage error: the target cannot be built")
                _write(verdicts, arguments)
                raise
            for found in sorted(
                chosen, key=lambda found: not runs_early(found, budgeted=bool(settings.budget))
            ):
                tally(verdicts, found, test_name(found), evaluate(settings, found))
    except BaseException:
        if verdicts.run.finished is None:
            verdicts.run.finish("interrupted", "interrupted while the checks ran")
            _write(verdicts, arguments)
        raise
    finally:
        stop_checks()
        verdicts.constructions += constructions.take()
        verdicts.costs.add(costs.take())
        restore()
    complete = len(chosen) == len(_contract_checks(settings.contract))
    verdicts.run.finish(
        "complete" if complete else "partial", "" if complete else "a selection of the checks"
    )
    _write(verdicts, arguments)
    return verdicts


@contextlib.contextmanager
def _warnings_masked() -> Iterator[None]:
    """Pass on what the target and the checks warn, with the run's secrets masked."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            seen = caught[:]
    for warning in seen:
        warnings.warn_explicit(
            secrecy.scrub(str(warning.message)),
            warning.category,
            warning.filename,
            warning.lineno,
        )


def _write(verdicts: Verdicts, arguments: dict[str, Any]) -> None:
    settings = verdicts.settings
    if settings.report is not None:
        verdicts.write_json(settings.report)
    if settings.report_md is not None:
        verdicts.write_markdown(settings.report_md)
    if arguments["junit"] is not None:
        verdicts.write_junit(Path(arguments["junit"]))
