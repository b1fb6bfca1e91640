"""Fixtures shared by the tests of tokcap_spec."""

from __future__ import annotations

import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tokcap_spec.protocols import (
    install_token_sink,
    install_token_source,
    installed_token_sink,
    installed_token_source,
)


@pytest.fixture
def clean_install() -> Iterator[None]:
    """Start with no sink or source installed; restore what was installed afterwards."""
    sink, source = installed_token_sink(), installed_token_source()
    install_token_sink(None)
    install_token_source(None)
    yield
    install_token_sink(sink)
    install_token_source(source)


@pytest.fixture
def targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Return the name of a fresh, importable copy of ``fake_targets``."""
    name = f"tokcap_fake_targets_{uuid.uuid4().hex}"
    shutil.copy(Path(__file__).with_name("fake_targets.py"), tmp_path / f"{name}.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
