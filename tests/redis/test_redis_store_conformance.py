"""The conformance kit, run as a user would run it, against RedisTokenStore on real servers."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(params=["node", "cluster"])
def redis_url(request: pytest.FixtureRequest) -> str:
    """The URL of one durable redis server, or of the first node of a three-master cluster."""
    fixture = "redis_server" if request.param == "node" else "redis_cluster"
    return str(request.getfixturevalue(fixture).url)


@pytest.mark.slow
def test_the_kit_passes_every_clause(pytester: pytest.Pytester, redis_url: str) -> None:
    """`pytest --tokcap-sink=reference.redis_store:RedisTokenStore` passes with a strict fence
    and the default cost budget, and its lineage resolver passes the LINEAGE family.

    On a cluster the store finds out by itself that the URL names a cluster node.
    """
    kwargs = json.dumps({"url": redis_url})
    result = pytester.runpytest_subprocess(
        "--tokcap-sink=reference.redis_store:RedisTokenStore",
        f"--tokcap-sink-kwargs={kwargs}",
        "--tokcap-lineage=reference.lineage:RedisLineageResolver",
        "--tokcap-budget=default",
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


@pytest.mark.slow
def test_the_kit_passes_the_redis_staging_store(pytester: pytest.Pytester, redis_url: str) -> None:
    """`--tokcap-contract=staging-v2` passes RedisStagingStore on one node and on a cluster,
    its spawned-process checks and the read-back of extras and attachments included."""
    kwargs = json.dumps({"url": redis_url, "namespace": "kit"})
    result = pytester.runpytest_subprocess(
        "--tokcap-contract=staging-v2",
        "--tokcap-staging-sink=reference.staging_redis:RedisStagingStore",
        f"--tokcap-staging-sink-kwargs={kwargs}",
        "--tokcap-capability=read-back",
        "-p",
        "no:cacheprovider",
        timeout=600,
    )
    outcomes = result.parseoutcomes()
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert set(outcomes) <= {"passed", "warnings"}, outcomes
    result.stdout.fnmatch_lines(["clauses: 11 passed, 0 failed, 0 skipped, 0 not claimed"])
