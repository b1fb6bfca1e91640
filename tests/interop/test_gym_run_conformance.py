"""NeMo Gym's own ``run_conformance``, from the released wheel, passes every reference store.

Each store is judged with its reference lineage resolver, so all ten of Gym's checks run: its
two lineage checks (a resolver built before the put and one built after it) and every other,
``begin_call`` custody included.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reference.file_store import FileTokenStore
from reference.lineage import FileLineageResolver, MemoryLineageResolver, RedisLineageResolver
from reference.memory_store import MemoryTokenStore
from reference.redis_store import RedisTokenStore

GYM_CHECKS = [
    "put_then_freeze_visibility",
    "idempotent_reput",
    "conflicting_reput",
    "mark_incomplete_durability",
    "freeze_idempotency",
    "post_freeze_write_safety",
    "conditional_retirement",
    "lineage_visibility",
    "fresh_client_lineage_visibility",
    "begin_call_custody",
]
"""Every check of Gym's ``run_conformance``, in its order."""


def passed_checks(
    gym: SimpleNamespace, factory: Callable[[], Any], lineage: Callable[[], Any] | None = None
) -> list[str]:
    """Run Gym's checks with ``factory`` as sink and source factory; return what passed."""
    passed: list[str] = asyncio.run(gym.conformance.run_conformance(factory, factory, lineage))
    return passed


def test_file_store_passes(gym: SimpleNamespace, tmp_path: Path) -> None:
    """Fresh FileTokenStore instances on one root, with its resolver, pass all of Gym's checks."""
    checks = passed_checks(
        gym, lambda: FileTokenStore(root=tmp_path), lambda: FileLineageResolver(root=tmp_path)
    )
    assert checks == GYM_CHECKS


def test_memory_store_passes(gym: SimpleNamespace) -> None:
    """Fresh MemoryTokenStore instances of one namespace, with its resolver, pass them all."""
    namespace = f"gym-{uuid.uuid4().hex}"
    checks = passed_checks(
        gym,
        lambda: MemoryTokenStore(namespace=namespace),
        lambda: MemoryLineageResolver(namespace=namespace),
    )
    assert checks == GYM_CHECKS


@pytest.mark.usefixtures("gym_root")
def test_redis_store_passes(gym: SimpleNamespace, start_redis: Any) -> None:
    """Fresh RedisTokenStore clients of a server the test starts, with their resolver, pass."""
    server = start_redis()
    namespace = f"gym-{uuid.uuid4().hex[:8]}"
    checks = passed_checks(
        gym,
        lambda: RedisTokenStore(server.url, namespace=namespace),
        lambda: RedisLineageResolver(server.url, namespace=namespace),
    )
    assert checks == GYM_CHECKS


def test_a_resolver_that_guesses_nothing_fails_gyms_lineage_check(
    gym: SimpleNamespace, tmp_path: Path
) -> None:
    """The lineage checks can fail: a resolver that answers unresolved to everything fails."""

    class NeverResolves(FileLineageResolver):
        async def resolve(self, rollout_id: str, request_items: Any) -> Any:
            return gym.protocols.LineageResolution(gym.records.ParentResolutionStatus.UNRESOLVED)

    with pytest.raises(gym.conformance.ConformanceError, match="lineage_visibility"):
        passed_checks(
            gym, lambda: FileTokenStore(root=tmp_path), lambda: NeverResolves(root=tmp_path)
        )


def test_a_broken_store_fails_gym_checks(gym: SimpleNamespace, tmp_path: Path) -> None:
    """The harness can fail: a store that forgets every mark fails Gym's marker check."""

    class ForgetsMarks(FileTokenStore):
        async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
            return None

    with pytest.raises(gym.conformance.ConformanceError, match="mark_incomplete_durability"):
        passed_checks(gym, lambda: ForgetsMarks(root=tmp_path))
