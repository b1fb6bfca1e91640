"""Before any check runs: can the target be imported and built at all, and where is it from?

A target whose module does not import, whose name is missing or whose constructor raises is
a mistake in how the kit was invoked, not a contract violation: :func:`probe_target` refuses
it with a :class:`TargetError` that shows the frame of the user's own code where it went wrong
(the plugin makes it a usage error, exit code 4). What the contract says about bad targets
(BUILD-2) the checks judge themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import sys
import sysconfig
import time
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any

from conformance import _constructions as constructions
from conformance._channels import fd_output_masked
from conformance._deadline import Overrun, Watch, watched
from conformance._hints import module_lookup
from conformance._secrecy import scrub
from conformance._settings import KitSettings
from conformance._targets import Unresolved, resolve

__all__ = ["CONSTRUCTIONS", "SLOW_BUILD", "TargetError", "distribution_of", "expected_duration"]
__all__ += ["kit_version", "probe_target"]

SLOW_BUILD = 1.0
"""Seconds of one construction from which the kit says what they will cost the run."""

CONSTRUCTIONS = {"quick": 211, "ci": 268, "thorough": 1009}
"""How many times a run of each profile builds the target: the reference file store's count
under the default seed (tests/conformance/test_constructions.py keeps it true); other seeds
differ by a few percent (244 and 264 under ci for seeds 99 and 5), and Hypothesis' caches
by a tenth or so."""

_KIT = tuple(
    str(Path(__file__).resolve().parents[1] / name)
    for name in ("conformance", "tokcap_spec", "tokcap_pytest.py")
)
_STDLIB = sysconfig.get_paths()["stdlib"]


class TargetError(Exception):
    """The target cannot be imported or built; the message says where and what to do."""


def kit_version() -> str:
    """The installed version of tokcap, or ``unknown`` when it runs from a plain checkout."""
    try:
        return metadata.version("tokcap")
    except metadata.PackageNotFoundError:
        return "unknown"


def distribution_of(target: str) -> dict[str, str]:
    """The distribution a ``module:Class`` target is installed from: ``name`` and ``version``."""
    top = target.split(":", 1)[0].split(".", 1)[0]
    for name in metadata.packages_distributions().get(top, []):
        try:
            return {"name": name, "version": metadata.version(name)}
        except metadata.PackageNotFoundError:
            continue
    return {"name": "", "version": "not from an installed distribution"}


def probe_target(settings: KitSettings) -> float:
    """Import and build the sink, the source and any lineage resolver once; raise
    :class:`TargetError` if one fails.

    Return the seconds the slowest of these constructions took.

    What the target prints or writes meanwhile, its child processes included, is passed on
    with the run's secrets masked: no test has started, so a runner's capture would show it as
    it is.
    """
    printed = io.StringIO()
    try:
        with (
            fd_output_masked(),
            contextlib.redirect_stdout(printed),
            contextlib.redirect_stderr(printed),
        ):
            return _probe(settings)
    finally:
        if printed.getvalue():
            sys.stderr.write(scrub(printed.getvalue()))


def _probe(settings: KitSettings) -> float:
    seen = set()
    slowest = 0.0
    for role, target, kwargs in settings.targets():
        if (target, repr(sorted(kwargs.items()))) in seen:
            continue
        seen.add((target, repr(sorted(kwargs.items()))))
        slowest = max(slowest, _build_once(role, target, dict(kwargs), settings.timeout))
    return slowest


def expected_duration(settings: KitSettings, build_seconds: float) -> str:
    """What a slow constructor means for the run's duration, or ``""`` for a fast one."""
    if build_seconds < SLOW_BUILD:
        return ""
    times = CONSTRUCTIONS[settings.profile]
    hours, rest = divmod(int(build_seconds * times), 3600)
    spent = f"{hours} h {rest // 60} min" if hours else f"{rest // 60} min {rest % 60} s"
    return (
        f"tokcap: building the target took {build_seconds:.1f} s; a {settings.profile} run "
        f"builds it about {times} times, so expect the run to take at least {spent}"
    )


def _build_once(role: str, target: str, kwargs: dict[str, Any], seconds: float) -> float:
    flag = f"--tokcap-{role}={target}"
    try:
        factory = resolve(target)
    except Unresolved as unresolved:
        module_name = unresolved.module
        if unresolved.cause is not None:
            what = f"{flag}: module {module_name!r} cannot be imported"
            _refuse(what, unresolved.cause, module_lookup(module_name, unresolved.cause))
        where = getattr(unresolved.holder, "__file__", "?")
        raise TargetError(
            f"tokcap: {flag}: module {module_name!r} ({where}) has no attribute "
            f"{unresolved.missing!r}; name a class it defines"
        ) from None
    watch = Watch(seconds)
    took: list[float] = []

    def build() -> Any:
        with watch.call([f"{constructions.PREFIX}{target}"]):
            started = time.monotonic()
            built = factory(**kwargs)
            took.append(time.monotonic() - started)
            return built

    try:
        built = watched(build, watch)
    except Overrun as overrun:
        raise TargetError(f"tokcap: {flag}: {overrun}") from None
    except Exception as exc:
        names = ", ".join(sorted(kwargs)) or "none"
        _refuse(f"{flag}: the constructor raised with kwargs named {names}", exc)
    close = getattr(built, "close", None)
    if callable(close):
        # How close behaves is for the CLOSE checks to judge; here it only releases.
        with contextlib.suppress(Exception, Overrun):
            watched(lambda: _close(close, watch), watch)
    return took[0]


def _close(close: Any, watch: Watch) -> None:
    with watch.call(["close"]):
        result = close()
        if inspect.isawaitable(result):
            asyncio.run(_awaited(result))


async def _awaited(awaitable: Any) -> None:
    await awaitable


def _refuse(what: str, exc: BaseException, hint: str = "") -> Any:
    """Raise a usage error naming ``what``, the error, the user's frame that raised it and
    ``hint``, what to do about it."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if _is_users(f.filename)]
    where = ""
    if own:
        frame = own[-1]
        where = f"\n  at {frame.filename}:{frame.lineno} in {frame.name}"
        if frame.line:
            where += f"\n    {frame.line}"
    if hint:
        where += f"\n  {hint}"
    message = scrub(f"tokcap: {what}: {type(exc).__name__}: {exc}{where}")
    raise TargetError(message) from None


def _is_users(filename: str) -> bool:
    if filename.startswith("<") or filename.startswith(_KIT):
        return False
    return not filename.startswith(_STDLIB) or "site-packages" in filename
