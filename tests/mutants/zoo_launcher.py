"""A pytest plugin that plays the launcher: it installs a token sink in the kit's own process.

Used with ``-p zoo_launcher`` for the mutant that needs an installed sink. A spawned worker
imports nothing of this, exactly as a uvicorn worker inherits nothing from its launcher.
"""

from __future__ import annotations

import pytest

from tokcap_spec.protocols import install_token_sink
from tokcap_spec.records import TokenEntry


class LauncherConnection:
    """The launcher's own sink: it accepts calls and keeps nothing."""

    async def put(self, entry: TokenEntry) -> None:
        return None

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        return None

    async def close(self) -> None:
        return None


def pytest_configure(config: pytest.Config) -> None:
    install_token_sink(LauncherConnection())


def pytest_unconfigure(config: pytest.Config) -> None:
    install_token_sink(None)
