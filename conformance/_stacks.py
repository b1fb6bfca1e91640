"""Where a spawned child's threads were when it overran: asked for before it is killed.

A child arms :func:`arm` as it starts: on ``SIGUSR1`` the interpreter writes every thread's
stack to a file the parent named, from its C signal handler, so even a child whose threads
are all blocked in C code answers. Before the parent kills a child that overran its deadline,
:func:`where_threads_were` signals it, reads the dump and sums it up in one line: for each
thread, its innermost frame outside the standard library and the kit (the implementation's
own code, where a thread is in it).
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import sysconfig
import time
from pathlib import Path
from typing import IO

__all__ = ["arm", "where_threads_were"]

ANSWER_WAIT = 2.0
"""Seconds the parent waits for a signalled child's dump before it kills the child anyway."""

_POLL = 0.02
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<function>.*)$')
_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+")
_PATHS = sysconfig.get_paths()
_LIBRARY = tuple({str(Path(_PATHS[name]).resolve()) for name in ("stdlib", "platstdlib")})
_INSTALLED = tuple({str(Path(_PATHS[name]).resolve()) for name in ("purelib", "platlib")})
_KIT = str(Path(__file__).resolve().parent) + os.sep
_armed: list[IO[str]] = []


def arm(path: str) -> None:
    """In a child: write every thread's stack to ``path`` whenever ``SIGUSR1`` arrives."""
    if not hasattr(signal, "SIGUSR1"):
        return
    # Kept open for the child's life: the handler writes to it from C, at any moment.
    dump = open(path, "w", encoding="utf-8")  # noqa: SIM115
    _armed.append(dump)
    faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True, chain=False)


def where_threads_were(pid: int, path: str) -> str:
    """Signal the child ``pid`` armed with ``path``; return its threads' frames, or ``""``."""
    if not hasattr(signal, "SIGUSR1"):
        return ""
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        return ""
    until = time.monotonic() + ANSWER_WAIT
    seen = ""
    while time.monotonic() < until:
        time.sleep(_POLL)
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        if text and text == seen:
            return summary(text)
        seen = text
    return summary(seen)


def summary(dump: str) -> str:
    """One line naming where the threads of a faulthandler ``dump`` were.

    A thread is named by its innermost frame outside the standard library and the kit; threads
    with no such frame (idle pools, the kit's own watch) are left out, unless every thread is
    one, and then each is named by its innermost frame.
    """
    threads: list[list[tuple[str, str, str]]] = []
    for line in dump.splitlines():
        if _THREAD.match(line):
            threads.append([])
        elif threads and (frame := _FRAME.match(line)):
            threads[-1].append((frame["file"], frame["line"], frame["function"]))
    telling = [
        [frame for frame in frames if not _library_or_kit(frame[0])][:1] for frames in threads
    ]
    if not any(telling):
        telling = [frames[:1] for frames in threads]
    counts: dict[str, int] = {}
    for frames in telling:
        for file, line, function in frames:
            place = f"{function} ({_short(file)}:{line})"
            counts[place] = counts.get(place, 0) + 1
    return "; ".join(place if n == 1 else f"{place} (\u00d7{n})" for place, n in counts.items())


def _library_or_kit(file: str) -> bool:
    if file.startswith("<"):
        return True  # frozen importlib and the like
    resolved = str(Path(file).resolve())
    if resolved.startswith(_KIT):
        return True
    return resolved.startswith(_LIBRARY) and not resolved.startswith(_INSTALLED)


def _short(file: str) -> str:
    parts = Path(file).parts
    return "/".join(parts[-2:])
