"""Fixtures of the interop tests: the released NeMo Gym modules, importable in this interpreter.

The wheel is fetched once into pytest's cache dir and reused by later runs. A wheel that
cannot be fetched, or is not the pinned build, fails every test that needs it: never a skip.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from interop.gym_release import PinnedWheel, WheelUnavailable, fetch_wheel, pinned_wheel, unpack

GYM_MODULES = ("records", "protocols", "store", "config", "conformance")


def _cache_dir(config: pytest.Config) -> Path:
    cache = getattr(config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("tokcap-interop"))
    # Run with -p no:cacheprovider: the same folder the cache plugin would use.
    return config.rootpath / ".pytest_cache" / "d" / "tokcap-interop"


@pytest.fixture(scope="session")
def gym_pin() -> PinnedWheel:
    """The pinned NeMo Gym release."""
    return pinned_wheel()


@pytest.fixture(scope="session")
def gym_cache(request: pytest.FixtureRequest) -> Path:
    """The folder the fetched wheel and its unpacked modules live in."""
    return _cache_dir(request.config)


@pytest.fixture(scope="session")
def gym_wheel(gym_pin: PinnedWheel, gym_cache: Path) -> Path:
    """The pinned wheel, fetched unless a good copy is cached."""
    try:
        return fetch_wheel(gym_pin, gym_cache)
    except WheelUnavailable as exc:
        pytest.fail(f"the pinned NeMo Gym wheel is unavailable: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def gym_root(gym_wheel: Path, gym_pin: PinnedWheel, gym_cache: Path) -> Iterator[Path]:
    """The folder holding the unpacked ``nemo_gym.token_id_capture``, on ``sys.path``."""
    root = unpack(gym_wheel, gym_pin, gym_cache)
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))


@pytest.fixture(scope="session")
def gym(gym_root: Path) -> SimpleNamespace:
    """The released modules, by short name: ``gym.records``, ``gym.store``, ``gym.conformance``."""
    modules: dict[str, ModuleType] = {
        name: importlib.import_module(f"nemo_gym.token_id_capture.{name}") for name in GYM_MODULES
    }
    return SimpleNamespace(**modules)


@pytest.fixture
def gym_pythonpath(gym_root: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Put the unpacked release on ``PYTHONPATH`` for kit runs in fresh interpreters."""
    value = os.pathsep.join(filter(None, [str(gym_root), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", value)
    return value
