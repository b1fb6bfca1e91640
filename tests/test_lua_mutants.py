"""The Lua mutants the mutation tool runs against the Redis store: each is one line changed in
one Lua script, every operator reaches the real scripts, and no mutant splits a statement."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "reference" / "_redis_scripts.py"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


LUA = _load("lua_mutants")

MODULE = '''
"""A docstring that mentions redis.call( but is no script."""
PLAIN = """
some text
with == and and
"""
SCRIPT = """
-- a comment == 1
local known = redis.call('HGET', KEYS[1], ARGV[1])
if known == '1' and not frozen then return 1 end
local long = redis.call('HMGET', KEYS[1], 'a',
  'b')
redis.call('HINCRBY', KEYS[1], 'n', 1)
"""
'''


def test_only_code_lines_of_lua_strings_are_mutated() -> None:
    """Lines of strings without Redis calls, comments and quote lines are left alone."""
    lines = MODULE.splitlines()
    chosen = [lines[number - 1].strip() for number in LUA.lua_lines(MODULE)]
    assert chosen == [
        "local known = redis.call('HGET', KEYS[1], ARGV[1])",
        "if known == '1' and not frozen then return 1 end",
        "local long = redis.call('HMGET', KEYS[1], 'a',",
        "'b')",
        "redis.call('HINCRBY', KEYS[1], 'n', 1)",
    ]


def test_each_mutant_changes_one_line() -> None:
    """A mutant's text is the module with exactly its own line replaced."""
    original = MODULE.splitlines()
    made = LUA.mutants(MODULE)
    assert made
    for mutant in made:
        changed = mutant.text.splitlines()
        assert len(changed) == len(original)
        differing = [n for n, (a, b) in enumerate(zip(original, changed, strict=True), 1) if a != b]
        assert differing == [mutant.line], mutant
        assert mutant.mutant == changed[mutant.line - 1].strip()


def test_the_operators_on_one_line() -> None:
    """Every operator that applies to the if line makes its mutant there, once per occurrence."""
    made = {
        (mutant.operator, mutant.mutant)
        for mutant in LUA.mutants(MODULE)
        if mutant.source.startswith("if known")
    }
    assert made == {
        ("lua/ReplaceComparison", "if known ~= '1' and not frozen then return 1 end"),
        ("lua/ReplaceFlag", "if known == '0' and not frozen then return 1 end"),
        ("lua/ReplaceLogic", "if known == '1' or not frozen then return 1 end"),
        ("lua/RemoveNot", "if known == '1' and frozen then return 1 end"),
        ("lua/ReplaceNumber", "if known == '1' and not frozen then return 2 end"),
        ("lua/RemoveStatement", ""),
    }


def test_no_statement_is_cut_in_half() -> None:
    """A statement over two lines is never removed one line at a time."""
    removed = {m.source for m in LUA.mutants(MODULE) if m.operator == "lua/RemoveStatement"}
    assert removed == {
        "local known = redis.call('HGET', KEYS[1], ARGV[1])",
        "if known == '1' and not frozen then return 1 end",
        "redis.call('HINCRBY', KEYS[1], 'n', 1)",
    }


def test_the_redis_scripts_have_mutants_of_every_operator() -> None:
    """The store's own scripts give every operator something to change."""
    operators = {mutant.operator for mutant in LUA.mutants(SCRIPTS.read_text(encoding="utf-8"))}
    assert operators == {
        "lua/ReplaceComparison",
        "lua/ReplaceLogic",
        "lua/RemoveNot",
        "lua/ReplaceFlag",
        "lua/ReplaceBoolean",
        "lua/ReplaceNumber",
        "lua/ReplaceArithmetic",
        "lua/RemoveStatement",
    }
