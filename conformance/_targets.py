"""Resolving a ``module.path:ClassName`` target to the object it names, the one way the kit does.

The module is imported and the attribute path after the colon walked from it, so a nested
class (``module:Outer.Inner``) resolves too. The target's form (one colon, both sides
non-empty) is checked where the settings are read.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Unresolved", "resolve"]


class Unresolved(Exception):
    """The target names nothing.

    Either its module cannot be imported (``cause`` is the import's error) or the module has
    no attribute ``missing`` along the path (``cause`` is None; ``holder`` is where it is
    missing).
    """

    def __init__(
        self,
        target: str,
        module: str,
        cause: Exception | None = None,
        missing: str = "",
        holder: Any = None,
    ) -> None:
        self.target, self.module, self.cause = target, module, cause
        self.missing, self.holder = missing, holder
        what = f"cannot be imported ({type(cause).__name__})" if cause else f"has no {missing!r}"
        super().__init__(f"{target}: module {module!r} {what}")


def resolve(target: str) -> Any:
    """Return what ``module.path:Name`` names; raise :class:`Unresolved` if it names nothing."""
    module_name, _, path = target.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise Unresolved(target, module_name, exc) from exc
    for part in path.split("."):
        if not hasattr(found, part):
            raise Unresolved(target, module_name, missing=part, holder=found)
        found = getattr(found, part)
    return found
