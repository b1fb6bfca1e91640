"""Every construction of the target gets a deadline of its own, and is counted.

A call the kit marks as building the target (``the constructor of module:Class``) may build it
more than once (``build_sink()`` twice in BUILD-1): while such a call runs, a profile hook on
the check's thread sees each entry into the target's own constructor code, restarts the
deadline there and counts one construction. A target whose constructor is not Python code
counts once per marked call. Spawned workers' constructions are counted as their parent
hears of them.
"""

from __future__ import annotations

import sys
import threading
from types import CodeType, FrameType, FunctionType
from typing import TYPE_CHECKING, Any

from conformance._targets import resolve

if TYPE_CHECKING:
    from conformance._deadline import Watch

__all__ = ["PREFIX", "Span", "count", "counted", "take"]

PREFIX = "the constructor of "
"""How a watch names building a target: ``the constructor of module:Class``."""

_lock = threading.Lock()
_counts = {"total": 0, "untaken": 0}
_codes: dict[str, frozenset[CodeType]] = {}


def count() -> None:
    """Count one construction of the target."""
    with _lock:
        _counts["total"] += 1
        _counts["untaken"] += 1


def counted() -> int:
    """Constructions counted in this process so far."""
    return _counts["total"]


def take() -> int:
    """Constructions counted since the last call of ``take``."""
    with _lock:
        taken, _counts["untaken"] = _counts["untaken"], 0
    return taken


def _constructor_codes(target: str) -> frozenset[CodeType]:
    """The code objects whose entry starts one construction of ``target``, if Python code."""
    if target not in _codes:
        found: frozenset[CodeType] = frozenset()
        try:
            factory = resolve(target)
            if isinstance(factory, type):
                for name in ("__init__", "__new__"):
                    method = getattr(factory, name, None)
                    if isinstance(method, FunctionType):
                        found = frozenset({method.__code__})
                        break
            elif isinstance(factory, FunctionType):
                found = frozenset({factory.__code__})
        except Exception:  # a target that does not import is for the call itself to report
            found = frozenset()
        _codes[target] = found
    return _codes[target]


class Span:
    """The span of a marked call that builds the target; see the module docstring."""

    def __init__(self, watch: Watch, name: str) -> None:
        self.watch = watch
        self.name = name
        self.codes = _constructor_codes(name.removeprefix(PREFIX))
        self.previous: Any = None

    def __enter__(self) -> None:
        self.watch.rearm(self.name)
        if not self.codes:
            count()
            return
        self.previous = sys.getprofile()
        sys.setprofile(self._seen)

    def _seen(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in self.codes:
            self.watch.rearm(self.name)
            count()
        if self.previous is not None:
            self.previous(frame, event, arg)

    def __exit__(self, *exc_info: object) -> None:
        if self.codes:
            sys.setprofile(self.previous)
        self.watch.rearm(None)
