"""Mutants of the Lua a Python module carries in its string literals (Redis scripts).

cosmic-ray mutates Python only; the scripts that make each Redis state change atomic are
strings to it. This module finds every line of Lua in a module (the lines of the triple-quoted
strings whose text reads as Lua: ``local``, ``redis.call``, ``KEYS[``, ``ARGV[`` and their
kin) and makes, one change at a time, the mutants below. Each mutant is the whole module's
text with one line changed, so it is judged exactly as a Python mutant is.

Operators (one mutant per occurrence):

- ``lua/ReplaceComparison``: ``==`` and ``~=`` swapped; ``<`` and ``<=``, ``>`` and ``>=``
- ``lua/ReplaceLogic``: ``and`` and ``or`` swapped
- ``lua/RemoveNot``: a ``not`` dropped
- ``lua/ReplaceFlag``: the string flags ``'1'`` and ``'0'`` swapped
- ``lua/ReplaceBoolean``: ``true`` and ``false`` swapped
- ``lua/ReplaceNumber``: an integer literal ``n`` made ``n + 1``
- ``lua/ReplaceArithmetic``: ``+`` and ``-`` swapped
- ``lua/RemoveStatement``: a line that is one whole statement (a ``redis.call``, an
  assignment, a one-line ``if ... end`` or a ``return``) removed
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

_LUA = re.compile(r"redis\.call\(|\bKEYS\[|\bARGV\[")

_SWAPS: tuple[tuple[str, re.Pattern[str], dict[str, str]], ...] = (
    (
        "lua/ReplaceComparison",
        re.compile(r"==|~=|<=|>=|(?<![<>~=-])<(?![=])|(?<![-<>~=])>(?![=])"),
        {"==": "~=", "~=": "==", "<": "<=", "<=": "<", ">": ">=", ">=": ">"},
    ),
    ("lua/ReplaceLogic", re.compile(r"\b(?:and|or)\b"), {"and": "or", "or": "and"}),
    ("lua/RemoveNot", re.compile(r"\bnot "), {"not ": ""}),
    ("lua/ReplaceFlag", re.compile(r"'[01]'"), {"'1'": "'0'", "'0'": "'1'"}),
    ("lua/ReplaceBoolean", re.compile(r"\b(?:true|false)\b"), {"true": "false", "false": "true"}),
    ("lua/ReplaceArithmetic", re.compile(r"(?<=\s)[+-](?=\s)"), {"+": "-", "-": "+"}),
)
_NUMBER = re.compile(r"(?<![\w\[#.'])\d+(?![\w.'])")
_STRING = re.compile(r"'[^']*'")
_WHOLE_STATEMENT = re.compile(
    r"^\s*(?:[\w.]+\(.*\)|(?:local )?[\w\[\]#+ ,]+ = .+|if .+ then .+ end|return .+)$"
)
_CONTINUED = (",", " and", " or", "(", "{")


@dataclass(frozen=True)
class LuaMutant:
    """One changed line of Lua inside a module: where, how, and the module's whole new text."""

    operator: str
    occurrence: int
    line: int
    source: str
    mutant: str
    text: str


def lua_lines(module_text: str) -> list[int]:
    """Return the 1-based numbers of the code lines of the Lua strings of ``module_text``.

    A Lua string is a multi-line string literal that calls ``redis.call`` or reads ``KEYS`` or
    ``ARGV``; its comment and blank lines are left out.
    """
    found: set[int] = set()
    for node in ast.walk(ast.parse(module_text)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.end_lineno is None or node.end_lineno == node.lineno:
                continue
            if not _LUA.search(node.value):
                continue
            # The first and last lines hold the quotes, never Lua of their own.
            found.update(range(node.lineno + 1, node.end_lineno))
    lines = module_text.splitlines()
    return sorted(n for n in found if _code(lines[n - 1]).strip())


def _code(line: str) -> str:
    """The part of a Lua line before its comment."""
    return line.split("--", 1)[0] if not line.lstrip().startswith("--") else ""


def _outside_strings(line: str, start: int) -> bool:
    return not any(m.start() <= start < m.end() for m in _STRING.finditer(line))


def _removable(code: str, previous: str) -> bool:
    """Whether a line is one whole statement: not a function's header, nor part of a longer
    statement."""
    code, previous = code.rstrip(), previous.rstrip()
    return (
        bool(_WHOLE_STATEMENT.match(code))
        and not code.lstrip().startswith("local function")
        and not code.endswith(_CONTINUED)
        and not previous.endswith(_CONTINUED)
    )


def mutants(module_text: str) -> list[LuaMutant]:
    """Return every Lua mutant of ``module_text``, in line order."""
    lines = module_text.splitlines(keepends=True)
    made: list[LuaMutant] = []
    counts: dict[str, int] = {}

    def add(operator: str, number: int, new_line: str) -> None:
        occurrence = counts.get(operator, 0)
        counts[operator] = occurrence + 1
        changed = [*lines]
        changed[number - 1] = new_line
        made.append(
            LuaMutant(
                operator=operator,
                occurrence=occurrence,
                line=number,
                source=lines[number - 1].strip(),
                mutant=new_line.strip(),
                text="".join(changed),
            )
        )

    for number in lua_lines(module_text):
        line = lines[number - 1]
        code = _code(line)
        for operator, pattern, swap in _SWAPS:
            for found in pattern.finditer(code):
                if operator != "lua/ReplaceFlag" and not _outside_strings(code, found.start()):
                    continue
                replaced = swap[found.group()]
                add(operator, number, line[: found.start()] + replaced + line[found.end() :])
        for found in _NUMBER.finditer(code):
            if _outside_strings(code, found.start()):
                bigger = str(int(found.group()) + 1)
                changed = line[: found.start()] + bigger + line[found.end() :]
                add("lua/ReplaceNumber", number, changed)
        if _removable(code, _code(lines[number - 2]) if number > 1 else ""):
            add("lua/RemoveStatement", number, "\n")
    return made
