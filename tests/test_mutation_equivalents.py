"""The recorded survivors of the mutation runs still name real lines of the reference modules.

``tools/mutation_score.py`` matches each survivor to an entry of
``docs/mutation-equivalents.json`` by module, operator, line and the line's text; an entry
whose line moved or changed no longer matches anything. No mutant is run here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conformance.catalog import CLAUSES

ROOT = Path(__file__).resolve().parent.parent


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "mutation_score", ROOT / "tools" / "mutation_score.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutation_score", module)
    spec.loader.exec_module(module)
    return module


TOOL = _tool()
ENTRIES = TOOL.load_explanations()


def test_the_file_records_survivors() -> None:
    """The equivalents file parses into entries, each a reason or a clause with a witness."""
    assert ENTRIES


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: f"{entry.module}:{entry.line}")
def test_an_entry_names_an_existing_line_by_its_text(entry: Any) -> None:
    """Each entry's module exists and its line holds exactly the source text it records."""
    path = ROOT / entry.module
    assert path.is_file(), entry
    lines = path.read_text(encoding="utf-8").splitlines()
    assert 1 <= entry.line <= len(lines), entry
    assert lines[entry.line - 1].strip() == entry.source, entry
    assert entry.mutant != entry.source, entry
    assert entry.operator.startswith(("core/", "lua/")), entry


def test_every_entry_names_a_store_the_tool_knows() -> None:
    """Every recorded module is one the tool can judge with the kit."""
    for entry in ENTRIES:
        assert TOOL.target_options(entry.module)


def test_a_blind_spot_names_a_clause_of_the_catalog() -> None:
    """A survivor recorded as a blind spot names a clause id the catalog has."""
    known = {found.id for found in CLAUSES}
    assert {entry.clause for entry in ENTRIES if entry.clause} <= known


def test_no_mutant_is_recorded_twice() -> None:
    """No two entries name the same mutant."""
    keys = [(e.module, e.operator, e.line, e.source, e.mutant) for e in ENTRIES]
    assert len(keys) == len(set(keys))


def test_an_entry_that_says_too_little_is_refused(tmp_path: Path) -> None:
    """An entry with neither a reason nor a clause and witness does not load."""
    bad = tmp_path / "equivalents.json"
    bad.write_text(
        '{"survivors": [{"module": "reference/memory_store.py", "operator": "core/AddNot", '
        '"line": 1, "source": "x", "mutant": "y"}]}',
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match="reason"):
        TOOL.load_explanations(bad)


def test_a_store_outside_the_packages_is_judged_from_its_copy(tmp_path: Path) -> None:
    """The first sink's mutants are judged from the scratch copy, where the mutant is, never
    from the repo's file."""
    module = "examples/first_sink/mysink.py"
    TOOL.make_copy(tmp_path / "copy", module)
    assert (tmp_path / "copy" / module).read_bytes() == (ROOT / module).read_bytes()
    command = TOOL.kit_command("python3", module, 7)
    assert command[:3] == ["env", "PYTHONPATH=examples/first_sink", "python3"]
    assert "--tokcap-sink=mysink:SqliteSink" in command


def test_mutants_in_postponed_annotations_are_left_out() -> None:
    """Only the parameter and return annotations of a module that postpones them are spans."""
    source = (
        "from __future__ import annotations\n"
        "def f(a: int | None, *, b: str = 'x') -> bytes | None:\n"
        "    c: int | None = a | 1\n"
        "    return c\n"
    )
    spans = TOOL.annotation_spans(source)
    assert spans == [((2, 9), (2, 19)), ((2, 27), (2, 30)), ((2, 41), (2, 53))]
    assert TOOL.annotation_spans(source.split("\n", 1)[1]) == []


def test_shared_staging_modules_are_judged_on_gyms_classes_too() -> None:
    """A staging module both stores share is judged on tokcap_spec's classes, then on NeMo
    Gym's with the store as it comes and built for them, Gym's modules on the import path."""
    command = TOOL.kit_command("python3", "reference/_staging_rules.py", 7, gym_root="/gym")
    assert command[:2] == ["sh", "-c"]
    script = command[2]
    assert script.count("--tokcap-contract=staging-v2") == 3
    assert script.count("--tokcap-staging-classes=gym") == 2
    assert script.count("PYTHONPATH=/gym") == 2
    assert '"classes": "gym"' in script
