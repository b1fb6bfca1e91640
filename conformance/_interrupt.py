"""SIGTERM and SIGHUP end a run as SIGINT does: as a ``KeyboardInterrupt`` of the main thread.

CI runners send SIGTERM when a job times out or is cancelled, and a closed terminal sends
SIGHUP; left at their default, either kills the interpreter before it writes a report or
stops the processes it started. Mapped onto ``KeyboardInterrupt``, they take pytest's own
path for an interrupt: the session finishes, the reports say ``interrupted`` and name the
signal, and the kit stops what it started. Once the run winds down, later signals are only
counted, so that the reports are written whole.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

__all__ = ["install", "received", "restore", "wind_down"]

_NAMES = ("SIGTERM", "SIGHUP")

_received: list[str] = []
_previous: dict[int, Any] = {}
_winding_down = False


def install() -> None:
    """Handle SIGTERM and SIGHUP in this process as the kit handles SIGINT (main thread only)."""
    global _winding_down
    if threading.current_thread() is not threading.main_thread() or _previous:
        return
    _received.clear()
    _winding_down = False
    for name in _NAMES:
        number = getattr(signal, name, None)
        if number is not None:
            _previous[number] = signal.signal(number, _handle)


def restore() -> None:
    """Give the signals back the handlers they had before :func:`install`."""
    if threading.current_thread() is not threading.main_thread():
        return
    for number, handler in _previous.items():
        signal.signal(number, handler)
    _previous.clear()


def wind_down() -> None:
    """From now on a signal no longer interrupts: the run is writing what it found.

    SIGINT too, while it has Python's default handler: a second Ctrl-C would cut a report.
    """
    global _winding_down
    _winding_down = True
    on_main = threading.current_thread() is threading.main_thread()
    if on_main and _previous and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        _previous[signal.SIGINT] = signal.signal(signal.SIGINT, _handle)


def received() -> str:
    """The name of the first signal that ended the run, or ``""``."""
    return _received[0] if _received else ""


def _handle(number: int, frame: FrameType | None) -> None:
    name = signal.Signals(number).name
    if number != signal.SIGINT:
        _received.append(name)
    if not _winding_down:
        raise KeyboardInterrupt(f"terminated by {name}")
