"""NeMo Gym's own file store, from the pinned release, as a peer the benchmark measures against.

``TokenCaptureStore`` is the store a framework author would otherwise keep: it is what Gym uses
when no custom sink is configured. It is loaded from the same pinned wheel the interop tests
judge (``constraints.txt`` pins it by sha256), fetched once into pytest's cache folder and never
copied into the repository. Its entries are Gym's own ``TokenEntry``, converted before the clock
starts, as Gym's capture path hands them to it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from tokcap_spec.records import TokenEntry

__all__ = ["gym_entries", "gym_modules", "open_gym_store"]

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".pytest_cache" / "d" / "tokcap-interop"


@cache
def gym_modules() -> tuple[Any, Any]:
    """Return Gym's ``store`` and ``records`` modules, fetching the pinned wheel if need be.

    Raises ``RuntimeError`` saying why when the wheel cannot be had (no network, another build).
    """
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from interop.gym_release import fetch_wheel, pinned_wheel, unpack

    pin = pinned_wheel()
    unpacked = str(unpack(fetch_wheel(pin, CACHE), pin, CACHE))
    if unpacked not in sys.path:
        # Spawned writers inherit the parent's sys.path, so they find it too.
        sys.path.insert(0, unpacked)
    import importlib

    store = importlib.import_module("nemo_gym.token_id_capture.store")
    records = importlib.import_module("nemo_gym.token_id_capture.records")
    return store, records


def open_gym_store(root: str) -> Any:
    """Return Gym's ``TokenCaptureStore`` writing in ``root``."""
    store, _ = gym_modules()
    return store.TokenCaptureStore(root)


def gym_entries(batches: Sequence[Sequence[TokenEntry]]) -> list[list[Any]]:
    """Return ``batches`` as Gym's own ``TokenEntry`` records, the fields unchanged."""
    _, records = gym_modules()
    convert = records.TokenEntry.model_validate
    return [[convert(each.model_dump()) for each in batch] for batch in batches]
