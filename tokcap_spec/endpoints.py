"""Building a sink or source from its ``module:Class`` target and JSON kwargs (BUILD-2).

Kept apart from the config models so that a process that only builds endpoints (a spawned
worker) imports no more than the records and protocols.
"""

from __future__ import annotations

import importlib
from typing import Any

from tokcap_spec.errors import EndpointError
from tokcap_spec.protocols import protocol_problems
from tokcap_spec.redaction import redact

__all__ = ["build_endpoint", "split_target"]


def split_target(target: str, kind: str) -> tuple[str, str]:
    """Return the module and attribute path of a ``module.path:ClassName`` target."""
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise EndpointError(f"token {kind} {target!r} must have the form 'module.path:ClassName'")
    return module_name, attr_path


def build_endpoint(target: str, kwargs: dict[str, Any], protocol: type, kind: str) -> Any:
    """Import ``target``, call it with ``kwargs`` and check the result against ``protocol``.

    Raises :class:`EndpointError` for every way this can fail (BUILD-2). The message names
    the target and the kwarg names, never the kwarg values.
    """
    module_name, attr_path = split_target(target, kind)
    names = ", ".join(sorted(kwargs)) or "none"
    # Each failure is raised outside its except block: a chained __context__ would carry
    # the original message, and with it any kwarg value the constructor echoed.
    failure: str | None = None
    module: Any = None
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        failure = (
            f"token {kind} {target!r}: module {module_name!r} cannot be imported "
            f"({type(exc).__name__}: {redact(str(exc), kwargs)}); make it importable in "
            "every serving process"
        )
    if failure is not None:
        raise EndpointError(failure)
    factory: Any = module
    for part in attr_path.split("."):
        if not hasattr(factory, part):
            raise EndpointError(
                f"token {kind} {target!r}: {module_name!r} has no attribute {attr_path!r}"
            )
        factory = getattr(factory, part)
    if not callable(factory):
        raise EndpointError(f"token {kind} {target!r}: {attr_path!r} is not callable")
    endpoint: Any = None
    try:
        endpoint = factory(**kwargs)
    except Exception as exc:
        failure = (
            f"token {kind} {target!r} refused its keyword arguments ({names}): "
            f"{type(exc).__name__}: {redact(str(exc), kwargs)}"
        )
    if failure is not None:
        raise EndpointError(failure)
    problems = protocol_problems(endpoint, protocol)
    if problems:
        raise EndpointError(
            f"token {kind} {target!r} does not satisfy {protocol.__name__}: " + "; ".join(problems)
        )
    return endpoint
