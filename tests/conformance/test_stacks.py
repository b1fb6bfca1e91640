"""How a hung child's threads are summed up: the implementation's frames, idle threads left out."""

from __future__ import annotations

import sysconfig
from pathlib import Path

from conformance._stacks import summary

LIBRARY = sysconfig.get_paths()["stdlib"]
KIT = str(Path(__file__).resolve().parents[2] / "conformance")


def _thread(*frames: tuple[str, int, str], current: bool = False) -> str:
    head = "Current thread 0x00007f01" if current else "Thread 0x00007f02"
    lines = [f'  File "{file}", line {line} in {function}' for file, line, function in frames]
    return "\n".join([f"{head} (most recent call first):", *lines, ""])


POOL = _thread(
    (f"{LIBRARY}/concurrent/futures/thread.py", 81, "_worker"),
    (f"{LIBRARY}/threading.py", 982, "run"),
)
WRITER = _thread(
    (f"{LIBRARY}/queue.py", 180, "get"),
    ("/srv/app/store/writer.py", 293, "_serve"),
    (f"{LIBRARY}/threading.py", 982, "run"),
)
LOOP = _thread(
    (f"{LIBRARY}/selectors.py", 468, "select"),
    (f"{KIT}/_workers.py", 570, "_child_main"),
    current=True,
)


def test_each_busy_thread_is_named_by_its_innermost_own_frame() -> None:
    """Frames of the standard library and the kit are passed over; idle threads left out."""
    assert summary(POOL + WRITER + POOL + LOOP) == "_serve (store/writer.py:293)"


def test_threads_stuck_on_one_line_are_counted_once() -> None:
    """Threads stuck on the same line read as one place with how many were there."""
    assert summary(WRITER + WRITER) == "_serve (store/writer.py:293) (\u00d72)"


def test_a_dump_of_idle_threads_names_their_innermost_frames() -> None:
    """With no thread in the implementation's code, each is named where it waits."""
    assert (
        summary(POOL + LOOP)
        == "_worker (futures/thread.py:81); select (python3.11/selectors.py:468)"
    )


def test_installed_packages_are_the_implementations_code() -> None:
    """A sink installed into site-packages is not mistaken for the standard library."""
    installed = sysconfig.get_paths()["purelib"]
    dump = POOL + _thread(
        (f"{LIBRARY}/socket.py", 700, "recv"), (f"{installed}/sink/io.py", 12, "read")
    )
    assert summary(dump) == "read (sink/io.py:12)"


def test_an_empty_dump_says_nothing() -> None:
    """A child that never answered leaves the report as it was."""
    assert summary("") == ""
