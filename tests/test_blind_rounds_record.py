"""The blind rounds' record has the shape the kill matrix renders it from."""

from __future__ import annotations

import json
from pathlib import Path

RECORD = Path(__file__).resolve().parent.parent / "docs" / "blind-rounds.json"
FIELDS = {
    "round": str,
    "measured": str,
    "kit": str,
    "fresh": bool,
    "mutants": int,
    "killed": int,
    "killed_pct": int,
    "on_clause": int,
    "on_clause_pct": int,
    "correct": int,
    "flagged": list,
    "note": str,
}
OPTIONAL = {"read": list}
"""Fields a round may have: ``read``, every file its writer was given (rounds from 6 on)."""


def test_every_round_has_every_field_with_its_type() -> None:
    """Each entry holds exactly the fields the matrix reads, each of its type; counts add up."""
    for entry in json.loads(RECORD.read_text(encoding="utf-8")):
        assert set(FIELDS) <= set(entry) <= set(FIELDS) | set(OPTIONAL), entry.get("round")
        for name, kind in {**FIELDS, **OPTIONAL}.items():
            if name in entry:
                assert isinstance(entry[name], kind), (entry["round"], name)
        assert all(isinstance(name, str) for name in entry.get("read", []))
        assert entry["on_clause"] <= entry["killed"] <= entry["mutants"]
        assert entry["killed_pct"] == round(100 * entry["killed"] / entry["mutants"])
        assert all(isinstance(name, str) for name in entry["flagged"])
