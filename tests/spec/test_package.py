"""Tests of the ``tokcap_spec`` package itself: every public name resolves, each on first use."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import tokcap_spec


@pytest.mark.parametrize("name", tokcap_spec.__all__)
def test_every_public_name_is_the_object_its_module_defines(name: str) -> None:
    """``tokcap_spec.X`` is the very object its home module holds, and shows in ``dir``."""
    value = getattr(tokcap_spec, name)
    if name != "SPEC_REVISION":
        home = tokcap_spec._HOMES[name]
        assert value is getattr(importlib.import_module(home), name)
    assert name in dir(tokcap_spec)


def test_an_unknown_name_is_an_attribute_error() -> None:
    """A name the package does not have raises AttributeError naming it, as any module does."""
    with pytest.raises(AttributeError, match="'tokcap_spec' has no attribute 'Nope'"):
        tokcap_spec.Nope  # noqa: B018


def test_reading_records_builds_no_config_models() -> None:
    """A process that imports the records and builds endpoints imports no config module."""
    probe = (
        "import sys, tokcap_spec.records, tokcap_spec.endpoints, tokcap_spec.protocols; "
        "print('tokcap_spec.config' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False"


def test_the_config_module_offers_the_same_builder() -> None:
    """``tokcap_spec.config.build_endpoint`` stays the name it always was, for the same function."""
    from tokcap_spec.config import build_endpoint as from_config
    from tokcap_spec.endpoints import build_endpoint

    assert from_config is build_endpoint
