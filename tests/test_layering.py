"""The layout is the architecture: each package imports only the layers below it.

``tokcap_spec`` is what a framework imports and depends on nothing else of the project;
``reference`` (what passes) and ``conformance`` (what judges) import only ``tokcap_spec`` and
never each other, so the kit can never lean on the implementations it judges.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = {"tokcap_spec", "reference", "conformance", "tokcap_pytest"}
ALLOWED = {
    "tokcap_spec": {"tokcap_spec"},
    "reference": {"tokcap_spec", "reference"},
    "conformance": {"tokcap_spec", "conformance", "tokcap_pytest"},
}


def _imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found & PROJECT


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_layers_below(package: str) -> None:
    """No module of the package imports a project package outside its allowed layers."""
    strays = {
        str(path.relative_to(ROOT)): sorted(_imported(path) - ALLOWED[package])
        for path in sorted((ROOT / package).rglob("*.py"))
        if _imported(path) - ALLOWED[package]
    }
    assert strays == {}


def _modules_imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_checks_never_reach_back_up_to_the_basics_or_the_runner() -> None:
    """A family module imports the steps, not the machinery that decides failed or blocked."""
    above = {"conformance._basics", "conformance._runner", "conformance._pytest_wing.outcomes"}
    strays = {
        path.name: sorted(_modules_imported(path) & above)
        for path in sorted((ROOT / "conformance" / "_checks").glob("*.py"))
        if _modules_imported(path) & above
    }
    assert strays == {}


def test_the_catalog_imports_nothing_of_the_kit() -> None:
    """The clause catalog stands alone, so every module may read it without a cycle."""
    imported = _modules_imported(ROOT / "conformance" / "catalog.py")
    assert not {name for name in imported if name.startswith("conformance")}


def test_only_the_pytest_wing_imports_pytest() -> None:
    """The engine, the checks and the library call run without pytest: only the wing that
    translates their outcomes into tests imports it."""
    importers = sorted(
        str(path.relative_to(ROOT / "conformance"))
        for path in (ROOT / "conformance").rglob("*.py")
        if {"pytest", "_pytest"} & {name.split(".")[0] for name in _modules_imported(path)}
    )
    assert importers
    assert [path for path in importers if not path.startswith("_pytest_wing/")] == []
