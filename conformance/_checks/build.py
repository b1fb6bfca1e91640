"""BUILD: the sink is built from a target string and plain kwargs, and refuses bad ones clearly."""

from __future__ import annotations

import json
import secrets
from typing import Any

from conformance import _steps as step
from conformance._kit import Kit, build_endpoint, unexpected_error
from conformance._registry import basic, check
from conformance._targets import resolve
from conformance._workers import constructor
from tokcap_spec.config import TokenIdCaptureConfig, TokenIdCaptureSettings
from tokcap_spec.errors import EndpointError


@check("BUILD-1", "config-build-sink")
def config_build_sink(kit: Kit) -> None:
    """TokenIdCaptureConfig.build_sink builds a new sink from the target and its kwargs."""
    kwargs = dict(kit.settings.sink_kwargs)
    if json.loads(json.dumps(kwargs)) != kwargs:
        kit.fail(
            expected="sink kwargs that are plain JSON data",
            observed=f"kwargs named {sorted(kwargs)} do not survive a JSON round trip",
            hint="pass only strings, numbers, booleans, lists and objects",
        )
    config = TokenIdCaptureConfig(
        token_id_capture=TokenIdCaptureSettings(
            enabled=True, sink=kit.settings.sink, sink_kwargs=kwargs
        )
    )
    try:
        with kit.watch.call([constructor(kit.settings.sink)]):
            first, second = config.build_sink(), config.build_sink()
    except EndpointError as exc:
        kit.fail(
            expected=f"build_sink() to build {kit.settings.sink}",
            observed=kit.redact(str(exc)),
            hint="the target must import and accept its kwargs",
        )
    assert first is not None
    assert second is not None
    try:
        expected_type = resolve(kit.settings.sink)
        if first is second:
            kit.fail(
                expected="each build_sink() call to return a new instance",
                observed="the same object twice",
                hint="every serving process builds its own sink; do not cache instances",
            )
        if isinstance(expected_type, type) and not isinstance(first, expected_type):
            kit.fail(
                expected=f"an instance of {kit.settings.sink}",
                observed=type(first).__qualname__,
                hint="the target names the class to build",
            )
    finally:
        for built in (first, second):
            step.close(kit, built)


@check("BUILD-2", "unknown-kwarg-secret")
def unknown_kwarg_secret(kit: Kit) -> None:
    """An unknown kwarg is refused or ignored, and its value never shows in the error."""
    canary = f"tokcap-canary-{secrets.token_hex(6)}"
    kwargs = {**kit.settings.sink_kwargs, "tokcap_unknown_option": canary}
    try:
        with kit.watch.call([constructor(kit.settings.sink)]):
            built = resolve(kit.settings.sink)(**kwargs)
    except Exception as exc:
        text = f"{exc!s} {exc!r}"
        if canary in text:
            kit.fail(
                expected="a construction error that names kwargs, not their values",
                observed=f"{type(exc).__name__} text contains the value passed as "
                "'tokcap_unknown_option'",
                hint="never format kwargs (or a URL with a password) into exception messages",
            )
    else:
        _used_as_built(kit, built, canary)
    try:
        with kit.watch.call([constructor(kit.settings.sink)]):
            endpoint = build_endpoint(kit.settings.sink, kwargs, "sink")
    except EndpointError as exc:
        if canary in str(exc) or kit.settings.sink not in str(exc):
            kit.fail(
                expected="an error naming the target and not the kwarg values",
                observed=kit.redact(str(exc)).replace(canary, "<canary>"),
                hint="errors should say which target and which kwarg names were refused",
            )
    else:
        step.close(kit, endpoint)


def _used_as_built(kit: Kit, built: Any, canary: str) -> None:
    """A sink that took the unknown kwarg at construction works, or it should have refused it
    then: a put and a freeze must not refuse it at first use, the value least of all."""
    rollout = kit.rollout_id("unknown-kwarg")
    calls: list[tuple[str, tuple[Any, ...]]] = [("put", (kit.entries.entry(rollout),))]
    if callable(getattr(built, "freeze", None)):
        calls.append(("freeze", (rollout,)))
    try:
        for name, arguments in calls:
            try:
                with kit.watch.call([name]):
                    kit.run(getattr(built, name)(*arguments))
            except Exception as exc:
                text = f"{exc!s} {exc!r}"
                shown = " and shows the value passed" if canary in text else ""
                kit.fail(
                    expected="a kwarg the constructor accepted to be taken, or refused at "
                    "construction, when the service starts",
                    observed=f"{name} on the sink built with 'tokcap_unknown_option' raised "
                    f"{type(exc).__name__}{shown}",
                    hint="validate kwargs in the constructor: an error at the first put reaches "
                    "a serving process mid-rollout, not the operator at startup",
                )
    finally:
        step.close(kit, built)


@basic("BUILD-1", "builds")
def basic_builds(kit: Kit) -> None:
    """BUILD-1: the sink and the source build from the target string and kwargs."""
    for build in (kit.sink, kit.source):
        try:
            build()
        except EndpointError as exc:
            raise unexpected_error(kit.blame(), "building the target", exc, kit) from None
