"""No RedisTokenStore call outlasts call_timeout, even against a server that never answers."""

from __future__ import annotations

import asyncio
import inspect
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference.redis_store import RedisTokenStore
from tokcap_spec.errors import StoreWriteError
from tokcap_spec.records import TokenEntry

DOCS = Path(__file__).parents[2] / "docs" / "redis.md"


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A loopback port whose kernel completes every connection and nothing ever replies."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"redis://:pw-never-shown@127.0.0.1:{listener.getsockname()[1]}/0"


def timed_put(store: RedisTokenStore) -> tuple[float, str]:
    """Return how long a put took to raise StoreWriteError, and the error's message."""

    async def main() -> None:
        try:
            await store.put(TokenEntry(rollout_id="r", model_call_id="c"))
        finally:
            await store.close()

    started = time.monotonic()
    with pytest.raises(StoreWriteError) as caught:
        asyncio.run(main())
    elapsed = time.monotonic() - started
    assert "pw-never-shown" not in str(caught.value)
    return elapsed, str(caught.value)


def test_a_call_ends_at_call_timeout_whatever_the_socket_timeout(silent_url: str) -> None:
    """With the default 10 s socket timeout and 3 retries, call_timeout=1 ends the put in 1 s."""
    elapsed, message = timed_put(RedisTokenStore(silent_url, call_timeout=1.0))
    # Far below the 80 s that four attempts of two 10 s timeouts could take.
    assert 1.0 <= elapsed < 5.0
    assert "put on rollout 'r' failed (not done within call_timeout=1 s)" in message


def test_each_attempt_ends_at_the_socket_timeout(silent_url: str) -> None:
    """Short socket timeouts end the call after every retry has timed out, before call_timeout."""
    elapsed, message = timed_put(RedisTokenStore(silent_url, socket_timeout=0.2, retries=1))
    assert 0.4 <= elapsed < 5.0
    assert "(TimeoutError" in message


def test_the_documented_worst_case_is_the_default_call_timeout() -> None:
    """docs/redis.md states the default call_timeout as the worst-case time of one call."""
    default = inspect.signature(RedisTokenStore).parameters["call_timeout"].default
    stated = re.search(r"\| `call_timeout` \| `([0-9.]+)` \|", DOCS.read_text())
    assert stated is not None, "expected a call_timeout row in the kwargs table"
    assert float(stated.group(1)) == default
    assert f"at most {default:g} s" in DOCS.read_text()
