"""Hostile targets as modules on disk, importable here and in spawned children."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest


def importable(folder: Path, monkeypatch: pytest.MonkeyPatch, **modules: str) -> None:
    """Write each module's source into ``folder``, importable here and in spawned children."""
    folder.mkdir()
    for name, source in modules.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(folder))
