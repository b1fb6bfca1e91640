"""What ``conformance`` promises to keep: a curated set of names and a few public modules."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import conformance

PUBLIC_MODULES = {"catalog", "clauses", "clauses_doc", "revision", "strategies"}


def test_every_exported_name_resolves() -> None:
    """Each name in ``conformance.__all__`` is importable from the package itself."""
    for name in conformance.__all__:
        assert getattr(conformance, name) is not None, name


def test_unknown_names_raise_attribute_error() -> None:
    """A name the package does not export is an AttributeError naming it, not a KeyError."""
    with pytest.raises(AttributeError, match="'basics'"):
        conformance.basics  # noqa: B018


def test_every_other_module_is_marked_internal() -> None:
    """A module or package of ``conformance`` is public only when listed; the rest start with _."""
    names = {found.name for found in pkgutil.iter_modules(conformance.__path__)}
    assert names >= PUBLIC_MODULES
    assert sorted(name for name in names - PUBLIC_MODULES if not name.startswith("_")) == []


def test_importing_the_package_imports_nothing_else() -> None:
    """``import conformance`` loads no other module, so a suite that never asks pays nothing."""
    code = (
        "import sys, conformance; "
        "print(sorted(m for m in sys.modules if m.startswith(('conformance.', 'tokcap_spec'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"


def test_the_export_table_and_all_agree() -> None:
    """Every exported name has one home module, and ``__all__`` lists exactly those names."""
    homes = [name for names in conformance._EXPORTED_FROM.values() for name in names]
    assert sorted(homes) == sorted(conformance.__all__)
