"""Fixtures of the kit's own tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conformance._deadline import breaker


@pytest.fixture(autouse=True)
def _fresh_breaker() -> Iterator[None]:
    """Each test starts with no operation stopped, as each run of the kit does."""
    breaker.reset()
    yield
    breaker.reset()
