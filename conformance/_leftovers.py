"""What the target left behind outside the kit's scratch: files in the working directory and
processes still running when the run ends. Both are reported as warnings, never removed.

On Linux the kit's process becomes a child subreaper, so a daemon the target starts (double
forked, a new session) is still seen as its descendant when the run ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from conformance._secrecy import scrub

__all__ = ["LIMIT", "WorkingDirectory", "become_subreaper", "live_children"]

LIMIT = 20_000
"""Entries of the working directory the kit looks at, at most: a bound on the cost of a huge
checkout, past which new files may go unseen."""

_SKIPPED = frozenset(
    {".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
    | {".tox", ".nox", ".venv", "venv", "node_modules", ".hypothesis"}
)
_PR_SET_CHILD_SUBREAPER = 36


class WorkingDirectory:
    """The files under a directory when the run began, to name the ones that appeared since."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.before = _files(root)

    def new_files(self, outputs: Iterable[Path]) -> list[str]:
        """Files that appeared since, outside ``outputs`` (the run's own files and folders)."""
        mine = [path.resolve() for path in outputs]
        found = []
        for relative in sorted(_files(self.root) - self.before):
            path = (self.root / relative).resolve()
            if any(path == own or own in path.parents for own in mine):
                continue
            found.append(relative)
        return found


def _files(root: Path) -> set[str]:
    found: set[str] = set()
    seen = 0
    for folder, folders, files in os.walk(root):
        folders[:] = [name for name in folders if name not in _SKIPPED]
        for name in files:
            if name.startswith(".coverage"):  # coverage's data, written as the session ends
                continue
            seen += 1
            if seen > LIMIT:
                return found
            found.add(os.path.relpath(os.path.join(folder, name), root))
    return found


def become_subreaper() -> None:
    """Adopt every orphaned descendant (Linux), so that live_children sees daemons too."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def live_children(ignored: Iterable[int] = ()) -> list[str]:
    """Describe each child of this process still running; reap those that already ended."""
    skip = set(ignored)
    found = []
    for pid in _children():
        if pid in skip:
            continue
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()
        except OSError:
            continue
        if state == "Z":
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            continue
        found.append(f"process {pid} ({scrub(command.decode('utf-8', 'replace'))[:200]})")
    return found


def _children() -> list[int]:
    pids: list[int] = []
    tasks = Path(f"/proc/{os.getpid()}/task")
    if not tasks.is_dir():
        return pids
    for task in tasks.iterdir():
        with contextlib.suppress(OSError):
            pids += [int(pid) for pid in (task / "children").read_text().split()]
    return sorted(set(pids))
