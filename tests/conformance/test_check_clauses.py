"""A check states its clause once, in its decorator; every clause id the kit names exists."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import conformance
from conformance import _steps as step
from conformance._kit import Kit
from conformance._registry import Check, all_checks
from conformance._runner import run_check
from conformance._settings import KitSettings
from conformance._violation import ClauseViolation
from conformance.catalog import clause

PACKAGE = Path(conformance.__file__).parent
CHECK_MODULES = sorted((PACKAGE / "_checks").glob("*.py"))
CLAUSE_ID = re.compile(r"(?:EXT-[A-Z]+|[A-Z]+)-\d+")


def decorated_checks(tree: ast.Module) -> Iterator[tuple[ast.FunctionDef, str | None]]:
    """Each function decorated with ``@check(...)``, with the clause it names, if a literal."""
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            if (
                isinstance(decorator, ast.Call)
                and isinstance(decorator.func, ast.Name)
                and decorator.func.id == "check"
            ):
                first = decorator.args[0] if decorator.args else None
                own = first.value if isinstance(first, ast.Constant) else None
                yield node, own if isinstance(own, str) else None


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


class TestOneFact:
    def test_the_scan_sees_every_registered_check(self) -> None:
        """Every registered check is a decorated function the scan below reads."""
        scanned = {
            (f"conformance._checks.{path.stem}", function.name)
            for path in CHECK_MODULES
            for function, _ in decorated_checks(parsed(path))
        }
        registered = {(each.function.__module__, each.function.__name__) for each in all_checks()}
        assert registered <= scanned

    @pytest.mark.parametrize("path", CHECK_MODULES, ids=lambda path: path.stem)
    def test_no_check_restates_its_own_clause(self, path: Path) -> None:
        """Below its decorator a check never names its own clause: its steps blame it unasked."""
        restated = [
            f"{path.name}:{node.lineno}: {function.name} names {own!r}"
            for function, own in decorated_checks(parsed(path))
            if own is not None
            for node in ast.walk(ast.Module(body=function.body, type_ignores=[]))
            if isinstance(node, ast.Constant) and node.value == own
        ]
        assert restated == []

    def test_every_clause_literal_is_a_catalog_clause(self) -> None:
        """Each string that looks like a clause id, in the checks and the basics, is one."""
        named = {
            (path.name, node.lineno, node.value)
            for path in [*CHECK_MODULES, PACKAGE / "_basics.py"]
            for node in ast.walk(parsed(path))
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and CLAUSE_ID.fullmatch(node.value)
        }
        assert named, "the scan found no clause id at all"
        unknown = []
        for where, line, found in sorted(named):
            try:
                clause(found)
            except KeyError as error:
                unknown.append(f"{where}:{line}: {error}")
        assert unknown == []


def kit_of(clause_id: str | None) -> Kit:
    return Kit(KitSettings(sink="m:C"), "TEST-probe", clause_id)


class TestKitClause:
    def test_the_runner_hands_the_check_its_clause(self) -> None:
        """run_check builds the check's kit with the check's clause."""
        seen: list[str | None] = []
        run_check(
            KitSettings(sink="m:C"), Check("DROP-3", "probe", lambda kit: seen.append(kit.clause))
        )
        assert seen == ["DROP-3"]

    def test_blame_and_fail_default_to_the_kit_clause(self) -> None:
        """A step's clause is the kit's unless it names another."""
        kit = kit_of("PUT-3")
        try:
            assert kit.blame() == "PUT-3"
            assert kit.blame("SHAPE-2") == "SHAPE-2"
            with pytest.raises(ClauseViolation) as own:
                kit.fail(expected="e", observed="o", hint="h")
            with pytest.raises(ClauseViolation) as other:
                kit.fail(expected="e", observed="o", hint="h", clause="DROP-2")
        finally:
            kit.close()
        assert (own.value.clause, other.value.clause) == ("PUT-3", "DROP-2")

    def test_a_kit_of_no_single_clause_wants_each_step_named(self) -> None:
        """With no clause of its own a kit refuses to guess, before any call is made."""
        kit = kit_of(None)
        try:
            message = "check TEST-probe judges no single clause: name the clause this step serves"
            with pytest.raises(TypeError, match=f"^{message}$"):
                kit.blame()
            with pytest.raises(TypeError, match="judges no single clause"):
                kit.fail(expected="e", observed="o", hint="h")
            with pytest.raises(TypeError, match="judges no single clause"):
                step.put(kit, object(), object())  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="judges no single clause"):
                step.freeze(kit, object(), "r")  # type: ignore[arg-type]
            with pytest.raises(ClauseViolation) as named:
                kit.fail(expected="e", observed="o", hint="h", clause="MASK-2")
        finally:
            kit.close()
        assert named.value.clause == "MASK-2"
