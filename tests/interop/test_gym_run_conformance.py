"""NeMo Gym's own ``run_conformance``, from the released wheel, passes every reference store.

Gym's checks run without a lineage resolver, so its two lineage checks are not run; every
other check it has, ``begin_call`` custody included, must pass.
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
    "begin_call_custody",
]
"""Every check of Gym's ``run_conformance`` that needs no lineage resolver, in its order."""


def passed_checks(gym: SimpleNamespace, factory: Callable[[], Any]) -> list[str]:
    """Run Gym's checks with ``factory`` as sink and source factory; return what passed."""
    passed: list[str] = asyncio.run(gym.conformance.run_conformance(factory, factory))
    return passed


def test_file_store_passes(gym: SimpleNamespace, tmp_path: Path) -> None:
    """Fresh FileTokenStore instances on one root pass every check Gym runs."""
    assert passed_checks(gym, lambda: FileTokenStore(root=tmp_path)) == GYM_CHECKS


def test_memory_store_passes(gym: SimpleNamespace) -> None:
    """Fresh MemoryTokenStore instances of one namespace pass every check Gym runs."""
    namespace = f"gym-{uuid.uuid4().hex}"
    assert passed_checks(gym, lambda: MemoryTokenStore(namespace=namespace)) == GYM_CHECKS


@pytest.mark.usefixtures("gym_root")
def test_redis_store_passes(gym: SimpleNamespace, start_redis: Any) -> None:
    """Fresh RedisTokenStore clients of a server the test starts pass every check Gym runs."""
    server = start_redis()
    namespace = f"gym-{uuid.uuid4().hex[:8]}"
    assert passed_checks(gym, lambda: RedisTokenStore(server.url, namespace=namespace)) == (
        GYM_CHECKS
    )


def test_a_broken_store_fails_gym_checks(gym: SimpleNamespace, tmp_path: Path) -> None:
    """The harness can fail: a store that forgets every mark fails Gym's marker check."""

    class ForgetsMarks(FileTokenStore):
        async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
            return None

    with pytest.raises(gym.conformance.ConformanceError, match="mark_incomplete_durability"):
        passed_checks(gym, lambda: ForgetsMarks(root=tmp_path))
