"""The conformance kit, run as a user would run it, against RedisTokenStore on a real server."""

from __future__ import annotations

import json

import pytest
from conftest import RedisServer


@pytest.mark.slow
def test_the_kit_passes_every_clause(pytester: pytest.Pytester, redis_server: RedisServer) -> None:
    """`pytest --tokcap-sink=reference.redis_store:RedisTokenStore` passes with a strict fence."""
    kwargs = json.dumps({"url": redis_server.url})
    result = pytester.runpytest_subprocess(
        "--tokcap-sink=reference.redis_store:RedisTokenStore",
        f"--tokcap-sink-kwargs={kwargs}",
        "-p",
        "no:cacheprovider",
        timeout=600,
    )
    outcomes = result.parseoutcomes()
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert set(outcomes) <= {"passed", "warnings"}, outcomes
    assert outcomes["passed"] > 0
    result.stdout.fnmatch_lines(["clauses: * passed, 0 failed, 0 skipped, 0 not claimed"])
    result.stdout.fnmatch_lines(["observed fence: strict"])
