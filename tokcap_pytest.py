"""The pytest entry point of tokcap: inert until a ``--tokcap-*`` target is configured.

This module declares the kit's options and nothing else until the run names a target (a
sink, a source or a Gym config, on the command line, in the environment or in an ini file).
Only then does it import the kit, after making sure that ``conformance`` (and ``reference``,
when a target names it) are tokcap's own modules and not a project's of the same name.
Installing tokcap therefore changes nothing for a suite that does not use it.

Load it explicitly with ``pytest -p tokcap_pytest``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pluggy import HookimplMarker

if TYPE_CHECKING:
    import pytest

# pytest itself is imported only where a hook needs it: the kit's spawned workers read the
# option defaults below and must not pay for importing pytest.
hookimpl = HookimplMarker("pytest")

__all__ = [
    "DEFAULT_CONTRACT",
    "DEFAULT_ENTRY_CLASS",
    "DEFAULT_FENCE",
    "DEFAULT_PROFILE",
    "DEFAULT_SEED",
    "DEFAULT_STAGING_CLASSES",
    "DEFAULT_TIMEOUTS",
    "OPTIONS",
    "Option",
    "pytest_addoption",
    "pytest_configure",
]

# Each option's default lives here alone: the settings, the Python call and --help read it.
DEFAULT_CONTRACT = "capture"
DEFAULT_SEED = 1729
DEFAULT_ENTRY_CLASS = "tokcap_spec.records:TokenEntry"
DEFAULT_STAGING_CLASSES = "tokcap"
DEFAULT_FENCE: Final = "any"
DEFAULT_PROFILE = "ci"
DEFAULT_TIMEOUTS = {"quick": 30.0, "ci": 30.0, "thorough": 120.0}
"""Seconds one call into the implementation may take under each profile: far beyond what a
correct network store needs, and small enough that a hang costs a CI job minutes, not hours."""

_HOME = Path(__file__).resolve().parent
_TARGETS = ("sink", "source", "config", "contract", "staging-sink", "staging-source")
_KIT_PLUGIN = "conformance._pytest_wing.plugin"


@dataclass(frozen=True)
class Option:
    """One kit option in its three spellings: flag, environment variable and ini key."""

    name: str
    help: str
    default: str = ""
    metavar: str = "VALUE"
    multiple: bool = False
    choices: tuple[str, ...] = ()
    """The values the option takes, when it takes one of a few; ``--help`` shows them."""
    switch: bool = False
    """A flag without a value on the command line; ``true`` or ``false`` elsewhere."""
    path: bool = False
    """A file path: from an ini file it is relative to that file's folder."""

    @property
    def flag(self) -> str:
        return f"--tokcap-{self.name}"

    @property
    def env(self) -> str:
        return "TOKCAP_" + self.name.upper().replace("-", "_")

    @property
    def ini(self) -> str:
        return "tokcap_" + self.name.replace("-", "_")

    @property
    def dest(self) -> str:
        return "tokcap_" + self.name.replace("-", "_")

    @property
    def shown(self) -> str:
        """What ``--help`` shows for the value: its choices, or what kind of value it is."""
        return "{" + ",".join(self.choices) + "}" if self.choices else self.metavar

    def describe(self) -> str:
        """The help text: what the option does, its default and its environment variable."""
        default = f"default: {self.default}; " if self.default else ""
        relative = ", relative to the ini file's folder" if self.path else ""
        return f"{self.help} ({default}env {self.env}, ini {self.ini}{relative})"


OPTIONS = (
    Option(
        "contract",
        "the contract to judge: capture (TokenSink and TokenSource) or staging-v2 (NeMo Gym "
        "0.7.0's StagingSink and StagingSource)",
        DEFAULT_CONTRACT,
        choices=(DEFAULT_CONTRACT, "staging-v2"),
    ),
    Option(
        "sink",
        "the TokenSink to judge, as module.path:ClassName",
        "none: the kit is inert",
        metavar="MODULE:CLASS",
    ),
    Option(
        "source",
        "the TokenSource to judge, as module.path:ClassName",
        "the sink target, for one class that is both",
        metavar="MODULE:CLASS",
    ),
    Option(
        "sink-kwargs",
        "JSON object of keyword arguments for the sink; '{tmp_path}' is replaced by a fresh "
        "directory",
        "{}",
        metavar="JSON",
    ),
    Option(
        "source-kwargs",
        "JSON object of keyword arguments for the source",
        "the sink kwargs",
        metavar="JSON",
    ),
    Option(
        "lineage",
        "the LineageResolver to judge (over the sink's store), as module.path:ClassName",
        "the lineage_store of a --tokcap-config; else none: LINEAGE is not claimed",
        metavar="MODULE:CLASS",
    ),
    Option(
        "lineage-kwargs",
        "JSON object of keyword arguments for the lineage resolver",
        "the sink kwargs",
        metavar="JSON",
    ),
    Option(
        "staging-sink",
        "the StagingSink to judge under --tokcap-contract=staging-v2, as module.path:ClassName",
        "none",
        metavar="MODULE:CLASS",
    ),
    Option(
        "staging-sink-kwargs",
        "JSON object of keyword arguments for the staging sink; '{tmp_path}' is replaced by a "
        "fresh directory",
        "{}",
        metavar="JSON",
    ),
    Option(
        "staging-source",
        "the StagingSource to judge, as module.path:ClassName",
        "the staging sink target, for one class that is both",
        metavar="MODULE:CLASS",
    ),
    Option(
        "staging-source-kwargs",
        "JSON object of keyword arguments for the staging source",
        "the staging sink kwargs",
        metavar="JSON",
    ),
    Option(
        "staging-classes",
        "the staging classes the kit stages records of and requires stage results of: tokcap "
        "(tokcap_spec.staging's, any result read by its fields), gym (NeMo Gym 0.7.0's, as "
        "Gym's capture passes and checks them) or a module path defining StagedCallRecord, "
        "StagedCallBaseSnapshot and StageResult",
        DEFAULT_STAGING_CLASSES,
        metavar="tokcap|gym|MODULE",
    ),
    Option(
        "budget",
        "cost limits that fail the COST clauses when exceeded, such as "
        "loop-hold=5ms,put-p99=20ms,freeze-mib=50ms, or default (see docs/clauses.md, COST)",
        "none: the COST family is not claimed",
        metavar="KEY=DURATION,...",
    ),
    Option(
        "config",
        "a Gym config file whose token_id_capture block names the sink",
        "none",
        metavar="FILE",
        path=True,
    ),
    Option(
        "allow-real-store",
        "judge the store a --tokcap-config names although it is not the reference file store "
        "in a scratch folder: the kit's test rollouts stay in it",
        "false",
        switch=True,
    ),
    Option(
        "fence",
        "the fence to require: any (strict or relaxed) or strict",
        DEFAULT_FENCE,
        choices=("any", "strict"),
    ),
    Option(
        "capability",
        "declare a capability (repeatable)",
        "none",
        multiple=True,
        choices=("no-delete", "process-local", "read-back"),
    ),
    Option(
        "seed",
        "seed of the generated entries (an integer)",
        "a new one each run, printed in the summary",
        metavar="INT",
    ),
    Option(
        "profile",
        "budget of the concurrency checks",
        DEFAULT_PROFILE,
        choices=("quick", "ci", "thorough"),
    ),
    Option(
        "timeout",
        "seconds any one call into the implementation may take before its clause fails",
        ", ".join(f"{seconds:g} ({profile})" for profile, seconds in DEFAULT_TIMEOUTS.items()),
        metavar="SECONDS",
    ),
    Option(
        "report",
        "write the JSON conformance report to this path",
        "no report",
        metavar="PATH",
        path=True,
    ),
    Option(
        "report-md",
        "write the conformance report as markdown to this path",
        "no report",
        metavar="PATH",
        path=True,
    ),
    Option(
        "entry-class",
        "the record class the kit builds the entries it puts with, as module.path:ClassName",
        DEFAULT_ENTRY_CLASS,
        metavar="MODULE:CLASS",
    ),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Declare every option in its command-line and ini spellings."""
    group = parser.getgroup("tokcap", "tokcap token-capture conformance kit")
    for option in OPTIONS:
        if option.multiple:
            group.addoption(
                option.flag,
                action="append",
                default=[],
                dest=option.dest,
                metavar=option.shown,
                help=option.describe(),
            )
            parser.addini(option.ini, option.describe(), type="args", default=[])
        elif option.switch:
            group.addoption(
                option.flag,
                action="store_true",
                default=None,
                dest=option.dest,
                help=option.describe(),
            )
            parser.addini(option.ini, option.describe(), type="string", default="")
        else:
            group.addoption(
                option.flag,
                default=None,
                dest=option.dest,
                metavar=option.shown,
                help=option.describe(),
            )
            parser.addini(option.ini, option.describe(), type="string", default="")


@hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Load the kit when the run names a target; stay inert otherwise."""
    targets = [_given(config, name) for name in _TARGETS]
    if not any(targets):
        return
    named = " ".join(str(target) for target in targets if target)
    _refuse_shadowed("conformance")
    if any(part.split(":", 1)[0].split(".", 1)[0] == "reference" for part in named.split()):
        _refuse_shadowed("reference")
    kit = importlib.import_module(_KIT_PLUGIN)
    if not config.pluginmanager.is_registered(kit):
        config.pluginmanager.register(kit, _KIT_PLUGIN)


def _given(config: pytest.Config, name: str) -> Any:
    option = next(option for option in OPTIONS if option.name == name)
    return config.getoption(option.dest) or os.environ.get(option.env) or config.getini(option.ini)


def _refuse_shadowed(package: str) -> None:
    """Stop with a usage error when ``package`` is not the one installed beside this module."""
    ours = _HOME / package
    loaded = sys.modules.get(package)
    origin = getattr(loaded, "__file__", None) if loaded is not None else None
    if loaded is None:
        spec = importlib.util.find_spec(package)
        origin = spec.origin if spec is not None else None
    if origin is not None and Path(origin).resolve().parent == ours:
        return
    import pytest

    found = origin or "nothing importable"
    raise pytest.UsageError(
        f"tokcap: the module {package!r} resolves to {found}, not to tokcap's {ours}; "
        f"a {package!r} package or module of your project shadows the kit's. Rename yours, or "
        "run the kit from a directory where it is not importable (python -m pytest puts the "
        "current directory first on sys.path; plain pytest does not)"
    )
