"""What the kit is asked to judge, resolved from the command line, the environment and ini files.

Every option has three spellings: ``--tokcap-sink`` on the command line, ``TOKCAP_SINK`` in
the environment and ``tokcap_sink`` in an ini file. The first one given wins, in that order.
A bad value is refused with an error naming where it came from. Kwarg *values* never appear
in an error: they may hold credentials.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tokcap_pytest import (
    DEFAULT_CONTRACT,
    DEFAULT_ENTRY_CLASS,
    DEFAULT_FENCE,
    DEFAULT_PROFILE,
    DEFAULT_SEED,
    DEFAULT_STAGING_CLASSES,
    DEFAULT_TIMEOUTS,
    OPTIONS,
    Option,
)

__all__ = [
    "CAPABILITIES",
    "CONTRACTS",
    "DEFAULT_CONTRACT",
    "DEFAULT_ENTRY_CLASS",
    "DEFAULT_FENCE",
    "DEFAULT_PROFILE",
    "DEFAULT_SEED",
    "DEFAULT_STAGING_CLASSES",
    "FENCES",
    "OPTIONS",
    "PROFILES",
    "KitSettings",
    "Option",
    "SettingsError",
    "resolve_settings",
]

_CHOICES = {option.name: option.choices for option in OPTIONS}
CAPABILITIES = _CHOICES["capability"]
CONTRACTS = _CHOICES["contract"]
FENCES = _CHOICES["fence"]
PROFILES = _CHOICES["profile"]
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


class SettingsError(ValueError):
    """A ``--tokcap-*`` value is unusable; the message names the option and where it came from."""


@dataclass(frozen=True)
class KitSettings:
    """The resolved target and the rules it is judged by. Immutable for the whole run."""

    sink: str
    sink_kwargs: Mapping[str, Any] = field(default_factory=dict, repr=False)
    source: str = ""
    source_kwargs: Mapping[str, Any] = field(default_factory=dict, repr=False)
    lineage: str = ""
    """The lineage resolver to judge, or ``""``: the LINEAGE family is then not claimed."""
    lineage_kwargs: Mapping[str, Any] = field(default_factory=dict, repr=False)
    fence: Literal["any", "strict"] = DEFAULT_FENCE
    capabilities: frozenset[str] = frozenset()
    seed: int = DEFAULT_SEED
    seed_given: bool = False
    """Whether the user named the seed; a run without one draws its own (and prints it)."""
    profile: str = DEFAULT_PROFILE
    report: Path | None = None
    report_md: Path | None = None
    config: Path | None = None
    entry_class: str = DEFAULT_ENTRY_CLASS
    timeout: float = DEFAULT_TIMEOUTS[DEFAULT_PROFILE]
    """Seconds any one call into the implementation may take."""
    real_store: bool = False
    """Whether the sink is a store a Gym config names, judged where it points: the kit's test
    rollouts (their ids unique to this run) stay in it."""
    tmp_path: str = ""
    """The folder ``{tmp_path}`` in the kwargs became, or ``""`` when they do not use it."""
    contract: str = DEFAULT_CONTRACT
    """The contract judged. Under ``staging-v2``, ``sink`` and ``source`` (and their kwargs)
    are the staging sink and source the run names."""
    staging_classes: str = DEFAULT_STAGING_CLASSES
    """The staging classes records are staged as and results must be instances of
    (``staging-v2`` only): ``tokcap``, ``gym`` or a module path."""
    budget: Mapping[str, float] = field(default_factory=dict)
    """The cost limits in seconds by key (:mod:`conformance._budget`); empty: COST is not
    claimed."""

    def __post_init__(self) -> None:
        if not self.source:
            object.__setattr__(self, "source", self.sink)
            object.__setattr__(self, "source_kwargs", self.sink_kwargs)

    @property
    def judged_directory(self) -> Path | None:
        """The folder the kit made inside a Gym config's bare ``dir``, removed after the run."""
        root = self.sink_kwargs.get("root")
        if self.config is None or not isinstance(root, str):
            return None
        path = Path(root)
        return path if path.name.startswith(".tokcap-conformance-") else None

    def fresh_store_kwargs(self, name: str) -> dict[str, Any] | None:
        """The sink kwargs with ``{tmp_path}`` a new empty folder ``name`` inside it: a store
        nothing was ever built on. None when the kwargs do not use ``{tmp_path}``."""
        if not self.tmp_path:
            return None
        folder = Path(self.tmp_path) / name
        folder.mkdir()
        fresh: dict[str, Any] = _replaced(dict(self.sink_kwargs), self.tmp_path, folder)
        return fresh

    @property
    def secrets(self) -> dict[str, Any]:
        """Every kwarg the run was given, for redaction."""
        return {
            "sink": dict(self.sink_kwargs),
            "source": dict(self.source_kwargs),
            "lineage": dict(self.lineage_kwargs),
        }

    @property
    def staging(self) -> bool:
        """Whether the run judges the staging contract rather than the capture contract."""
        return self.contract != DEFAULT_CONTRACT

    def roles(self) -> list[tuple[str, str]]:
        """``(role, target)`` of every implementation the run judges: sink, source, lineage
        (``staging-sink`` and ``staging-source`` under the staging contract); a role is also
        the name of the option that names it."""
        if self.staging:
            return [("staging-sink", self.sink), ("staging-source", self.source)]
        roles = [("sink", self.sink), ("source", self.source)]
        return [*roles, ("lineage", self.lineage)] if self.lineage else roles

    def targets(self) -> list[tuple[str, str, Mapping[str, Any]]]:
        """``(role, target, kwargs)`` of every implementation the run judges, as :meth:`roles`."""
        kwargs = {
            "sink": self.sink_kwargs,
            "source": self.source_kwargs,
            "lineage": self.lineage_kwargs,
        }
        return [
            (role, target, kwargs[role.removeprefix("staging-")]) for role, target in self.roles()
        ]

    def claims(self, capability: str) -> bool:
        """Return whether the user declared ``capability``."""
        return capability in self.capabilities


Lookup = Callable[[Option], "tuple[str | list[str] | None, str]"]


def resolve_settings(
    cli: Lookup, env: Mapping[str, str], ini: Lookup, scratch: Callable[[], Path]
) -> KitSettings | None:
    """Resolve every option (CLI, then environment, then ini); None when no target is given.

    ``cli`` and ``ini`` return ``(value, where)``; a value of None or ``[]`` means not given.
    ``scratch`` makes the directory ``{tmp_path}`` stands for; it is called only when a kwarg
    uses it.
    """
    raw: dict[str, tuple[Any, str]] = {}
    for option in OPTIONS:
        for lookup in (cli, lambda o: _from_env(o, env), ini):
            value, where = lookup(option)
            if value not in (None, "", []):
                raw[option.name] = (value, where)
                break
    if "sink" not in raw and "config" not in raw and "staging-sink" not in raw:
        for orphan, needs in (
            ("source", "--tokcap-sink or --tokcap-config"),
            ("staging-source", "--tokcap-staging-sink"),
        ):
            if orphan in raw:
                raise SettingsError(f"--tokcap-{orphan} (from {raw[orphan][1]}) needs {needs}")
        if _choice(raw, "contract", CONTRACTS, DEFAULT_CONTRACT) != DEFAULT_CONTRACT:
            contract, where = raw["contract"]
            raise SettingsError(
                f"--tokcap-contract={contract} (from {where}) needs the staging sink to judge: "
                "pass --tokcap-staging-sink=module.path:ClassName"
            )
        return None
    return _build(raw, _Scratch(scratch))


def _from_env(option: Option, env: Mapping[str, str]) -> tuple[str | list[str] | None, str]:
    value = env.get(option.env)
    if value is None:
        return None, ""
    if option.multiple:
        return [
            part for part in value.replace(",", " ").split() if part
        ], f"environment {option.env}"
    return value, f"environment variable {option.env}"


class _Scratch:
    """The ``{tmp_path}`` directory, made on first use."""

    def __init__(self, make: Callable[[], Path]) -> None:
        self._make = make
        self._path: Path | None = None

    def __str__(self) -> str:
        if self._path is None:
            self._path = self._make()
        return str(self._path)

    @property
    def made(self) -> str:
        """The directory, if a kwarg used it; else ``""``."""
        return "" if self._path is None else str(self._path)


def _build(raw: dict[str, tuple[Any, str]], tmp_root: _Scratch) -> KitSettings:
    if _choice(raw, "contract", CONTRACTS, DEFAULT_CONTRACT) != DEFAULT_CONTRACT:
        return _build_staging(raw, tmp_root)
    for name in _STAGING_ONLY:
        if name in raw:
            raise SettingsError(
                f"--tokcap-{name} (from {raw[name][1]}) names what the staging contract judges: "
                "pass --tokcap-contract=staging-v2 (env TOKCAP_CONTRACT, ini tokcap_contract) "
                "with it"
            )
    staging_capabilities = sorted(_capabilities(raw) & set(_STAGING_CAPABILITIES))
    if staging_capabilities:
        raise SettingsError(
            f"--tokcap-capability={staging_capabilities[0]} (from {raw['capability'][1]}) is a "
            "capability of a staging store: pass --tokcap-contract=staging-v2 with it"
        )
    allow_real_store = _switch(raw, "allow-real-store")
    sink, sink_kwargs, config_path, real_store = _sink_target(raw, tmp_root, allow_real_store)
    source = _target(raw, "source") if "source" in raw else ""
    lineage, lineage_kwargs = _lineage_target(raw, tmp_root, sink_kwargs)
    return _shared(
        raw,
        tmp_root,
        sink=sink,
        sink_kwargs=sink_kwargs,
        source=source or sink,
        source_kwargs=_source_kwargs(raw, "source-kwargs", tmp_root, sink_kwargs),
        lineage=lineage,
        lineage_kwargs=lineage_kwargs,
        fence=_choice(raw, "fence", FENCES, DEFAULT_FENCE),
        config=config_path,
        entry_class=_entry_class(raw),
        real_store=real_store,
        budget=_budget(raw),
    )


_STAGING_ONLY = (
    "staging-sink",
    "staging-sink-kwargs",
    "staging-source",
    "staging-source-kwargs",
    "staging-classes",
)
_STAGING_CAPABILITIES = ("read-back",)
"""Capabilities only a staging store declares."""
_CAPTURE_ONLY = (
    "sink",
    "sink-kwargs",
    "source",
    "source-kwargs",
    "lineage",
    "lineage-kwargs",
    "config",
    "allow-real-store",
    "fence",
    "entry-class",
    "budget",
)


def _build_staging(raw: dict[str, tuple[Any, str]], tmp_root: _Scratch) -> KitSettings:
    """The settings of a staging-v2 run: the staging sink and source, and the shared rules."""
    contract, where = raw["contract"]
    for name in _CAPTURE_ONLY:
        if name in raw:
            raise SettingsError(
                f"--tokcap-{name} (from {raw[name][1]}) is a setting of the capture contract, "
                f"but --tokcap-contract={contract} (from {where}) judges a staging sink: name "
                "it with --tokcap-staging-sink and --tokcap-staging-sink-kwargs"
            )
    if "staging-sink" not in raw:
        raise SettingsError(
            f"--tokcap-contract={contract} (from {where}) needs the staging sink to judge: "
            "pass --tokcap-staging-sink=module.path:ClassName"
        )
    sink = _target(raw, "staging-sink")
    sink_kwargs = _kwargs(raw, "staging-sink-kwargs", tmp_root)
    source = _target(raw, "staging-source") if "staging-source" in raw else sink
    return _shared(
        raw,
        tmp_root,
        sink=sink,
        sink_kwargs=sink_kwargs,
        source=source,
        source_kwargs=_source_kwargs(raw, "staging-source-kwargs", tmp_root, sink_kwargs),
        contract=str(contract),
        staging_classes=_staging_classes(raw),
    )


def _staging_classes(raw: dict[str, tuple[Any, str]]) -> str:
    if "staging-classes" not in raw:
        return DEFAULT_STAGING_CLASSES
    value, where = raw["staging-classes"]
    from tokcap_spec.staging.classes import WireClassesError, wire_classes

    try:
        wire_classes(str(value).strip())
    except WireClassesError as exc:
        raise SettingsError(f"--tokcap-staging-classes={value!r} (from {where}): {exc}") from None
    return str(value).strip()


def _source_kwargs(
    raw: dict[str, tuple[Any, str]], name: str, tmp_root: _Scratch, sink_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The source's kwargs: given under ``name``, else the sink's."""
    return _kwargs(raw, name, tmp_root) if name in raw else dict(sink_kwargs)


def _shared(raw: dict[str, tuple[Any, str]], tmp_root: _Scratch, **fields: Any) -> KitSettings:
    """The settings with ``fields`` and the rules both contracts share."""
    profile = _choice(raw, "profile", PROFILES, DEFAULT_PROFILE)
    return KitSettings(
        capabilities=_capabilities(raw),
        seed=_seed(raw),
        seed_given="seed" in raw,
        profile=profile,
        report=_path(raw, "report"),
        report_md=_path(raw, "report-md"),
        timeout=_timeout(raw, profile),
        tmp_path=tmp_root.made,
        **fields,
    )


def _sink_target(
    raw: dict[str, tuple[Any, str]], tmp_root: _Scratch, allow_real_store: bool
) -> tuple[str, dict[str, Any], Path | None, bool]:
    """The sink, its kwargs, the Gym config it came from and whether it is a real store."""
    if "sink" in raw and "config" in raw:
        (sink, sink_where), (config, config_where) = raw["sink"], raw["config"]
        raise SettingsError(
            f"--tokcap-sink={sink!r} (from {sink_where}) and --tokcap-config={config!r} (from "
            f"{config_where}) both name the sink to judge; give one of them"
        )
    if "sink" in raw:
        return _target(raw, "sink"), _kwargs(raw, "sink-kwargs", tmp_root), None, False
    value, where = raw["config"]
    from conformance._gym_config import DIRECTORY_ONLY, sink_from_gym_config
    from tokcap_spec.config import FILE_STORE_TARGET

    path = Path(value)
    try:
        target, kwargs = sink_from_gym_config(path)
    except (OSError, ValueError) as exc:
        raise SettingsError(f"--tokcap-config={value!r} (from {where}): {exc}") from None
    if kwargs.pop(DIRECTORY_ONLY, False):
        # Test rollouts never go among real captures: a fresh folder inside, removed at the end.
        kwargs["root"] = str(Path(kwargs["root"]) / f".tokcap-conformance-{uuid.uuid4().hex[:12]}")
        return target, kwargs, path, False
    scratch = target == FILE_STORE_TARGET and "{tmp_path}" in str(kwargs.get("root", ""))
    if not scratch and not allow_real_store:
        raise SettingsError(
            f"--tokcap-config={value!r} (from {where}) names the sink {target}, which the kit "
            "would judge where the config points: its test rollouts (ids unique to this run) "
            "would stay in that store. Pass --tokcap-allow-real-store (env "
            "TOKCAP_ALLOW_REAL_STORE=true, ini tokcap_allow_real_store = true) to judge it "
            "there, or judge a scratch instance with --tokcap-sink and --tokcap-sink-kwargs"
        )
    return target, _substitute(kwargs, tmp_root), path, not scratch


def _lineage_target(
    raw: dict[str, tuple[Any, str]], tmp_root: _Scratch, sink_kwargs: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """The lineage resolver and its kwargs: given, else a Gym config's, else none."""
    if "lineage" in raw:
        kwargs = (
            _kwargs(raw, "lineage-kwargs", tmp_root)
            if "lineage-kwargs" in raw
            else dict(sink_kwargs)
        )
        return _target(raw, "lineage"), kwargs
    if "lineage-kwargs" in raw:
        raise SettingsError(
            f"--tokcap-lineage-kwargs (from {raw['lineage-kwargs'][1]}) needs --tokcap-lineage"
        )
    if "config" not in raw:
        return "", {}
    from conformance._gym_config import lineage_from_gym_config

    named = lineage_from_gym_config(Path(raw["config"][0]))
    if named is None:
        return "", {}
    target, kwargs = named
    sink_root = sink_kwargs.get("root")
    if "root" in kwargs and isinstance(sink_root, str) and ".tokcap-conformance-" in sink_root:
        # The sink is judged in a folder of its own inside the config's directory; the resolver
        # must read that folder, or it could never see what the checks put.
        kwargs["root"] = sink_root
    return target, _substitute(kwargs, tmp_root)


def _switch(raw: dict[str, tuple[Any, str]], name: str) -> bool:
    if name not in raw:
        return False
    value, where = raw[name]
    if value is True or str(value).strip().lower() in _TRUE:
        return True
    if value is False or str(value).strip().lower() in _FALSE:
        return False
    raise SettingsError(
        f"--tokcap-{name}={value!r} (from {where}) is not one of: {', '.join(_TRUE + _FALSE)}"
    )


def _target(raw: dict[str, tuple[Any, str]], name: str) -> str:
    value, where = raw[name]
    module, sep, attr = str(value).partition(":")
    if not sep or not module or not attr:
        raise SettingsError(
            f"--tokcap-{name}={value!r} (from {where}) must have the form 'module.path:ClassName'"
        )
    return str(value)


def _kwargs(raw: dict[str, tuple[Any, str]], name: str, tmp_root: _Scratch) -> dict[str, Any]:
    if name not in raw:
        return {}
    value, where = raw[name]
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        # The decoder's message names a position, never the text, so no value leaks here.
        raise SettingsError(
            f"--tokcap-{name} (from {where}) is not valid JSON: {exc.msg} at line {exc.lineno} "
            f'column {exc.colno}; pass a JSON object such as \'{{"root": "{{tmp_path}}"}}\''
        ) from None
    if not isinstance(parsed, dict):
        raise SettingsError(
            f"--tokcap-{name} (from {where}) must be a JSON object, got a JSON "
            f"{type(parsed).__name__}"
        )
    substituted: dict[str, Any] = _substitute(parsed, tmp_root)
    return substituted


def _substitute(data: Any, tmp_root: _Scratch) -> Any:
    """Replace ``{tmp_path}`` in every string by a fresh directory made for this run."""
    return _replaced(data, "{tmp_path}", tmp_root)


def _replaced(data: Any, old: str, new: object) -> Any:
    """``data`` with ``old`` replaced by ``str(new)`` in every string (``new`` is made into a
    string only where ``old`` occurs)."""
    if isinstance(data, str):
        return data.replace(old, str(new)) if old in data else data
    if isinstance(data, dict):
        return {key: _replaced(value, old, new) for key, value in data.items()}
    if isinstance(data, list):
        return [_replaced(value, old, new) for value in data]
    return data


def _choice(
    raw: dict[str, tuple[Any, str]], name: str, allowed: tuple[str, ...], default: str
) -> str:
    if name not in raw:
        return default
    value, where = raw[name]
    if value not in allowed:
        raise SettingsError(
            f"--tokcap-{name}={value!r} (from {where}) is not one of: {', '.join(allowed)}"
        )
    return str(value)


def _capabilities(raw: dict[str, tuple[Any, str]]) -> frozenset[str]:
    if "capability" not in raw:
        return frozenset()
    values, where = raw["capability"]
    names = [part for value in values for part in str(value).replace(",", " ").split()]
    unknown = sorted(set(names) - set(CAPABILITIES))
    if unknown:
        raise SettingsError(
            f"--tokcap-capability (from {where}) names unknown capabilities {', '.join(unknown)}; "
            f"known: {', '.join(CAPABILITIES)}"
        )
    return frozenset(names)


def _seed(raw: dict[str, tuple[Any, str]]) -> int:
    if "seed" not in raw:
        return DEFAULT_SEED
    value, where = raw["seed"]
    try:
        return int(value)
    except ValueError:
        raise SettingsError(f"--tokcap-seed={value!r} (from {where}) must be an integer") from None


def _path(raw: dict[str, tuple[Any, str]], name: str) -> Path | None:
    if name not in raw:
        return None
    return Path(os.path.expanduser(str(raw[name][0])))


def _budget(raw: dict[str, tuple[Any, str]]) -> dict[str, float]:
    if "budget" not in raw:
        return {}
    value, where = raw["budget"]
    from conformance._budget import BudgetError, parse_budget

    try:
        return parse_budget(str(value))
    except BudgetError as exc:
        raise SettingsError(f"--tokcap-budget={value!r} (from {where}): {exc}") from None


def _entry_class(raw: dict[str, tuple[Any, str]]) -> str:
    if "entry-class" not in raw:
        return DEFAULT_ENTRY_CLASS
    target = _target(raw, "entry-class")
    from conformance._entries import EntryClassError, load_entry_class

    try:
        load_entry_class(target)
    except EntryClassError as exc:
        raise SettingsError(
            f"--tokcap-entry-class={target!r} (from {raw['entry-class'][1]}): {exc}"
        ) from None
    return target


def _timeout(raw: dict[str, tuple[Any, str]], profile: str) -> float:
    if "timeout" not in raw:
        return DEFAULT_TIMEOUTS[profile]
    value, where = raw["timeout"]
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise SettingsError(
            f"--tokcap-timeout={value!r} (from {where}) must be a positive number of seconds"
        )
    return seconds
