"""The conformance verdict per clause, and the JSON and markdown reports built from it.

A clause *failed* if any of its tests failed, *passed* if at least one passed and none
failed, *not-claimed* if its tests were skipped because the target declared a capability
under which they do not apply, and *skipped* otherwise. Reports carry target names,
never kwarg values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.registry import FAMILIES, family_of
from conformance.settings import KitSettings

__all__ = ["OUTCOMES", "ClauseRecord", "Verdicts"]

OUTCOMES = ("passed", "failed", "skipped", "not-claimed", "blocked")


@dataclass
class ClauseRecord:
    """Every test of one clause and what happened to it."""

    tests: list[str] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    soft: list[bool] = field(default_factory=list)
    """Per test: a block from a check proving many clauses, which a passing check outweighs."""

    @property
    def outcome(self) -> str:
        hard = [o for o, soft in zip(self.outcomes, self.soft, strict=True) if not soft]
        for outcome in ("failed", "blocked", "passed"):
            if outcome in hard:
                return outcome
        if "blocked" in self.outcomes:
            return "blocked"
        return "not-claimed" if "not-claimed" in self.outcomes else "skipped"

    @property
    def blocked_by(self) -> list[str]:
        """The clauses whose failure kept this clause's checks from judging it."""
        return sorted({b for b, o in zip(self.blockers, self.outcomes, strict=True) if b})

    @property
    def message(self) -> str:
        """The first message that explains the clause's outcome."""
        for outcome, message in zip(self.outcomes, self.messages, strict=True):
            if outcome == self.outcome and message:
                return message
        return ""


@dataclass
class Verdicts:
    """Test outcomes gathered per clause during a run."""

    settings: KitSettings
    kit_version: str
    spec: str
    clauses: dict[str, ClauseRecord] = field(default_factory=dict)
    observations: dict[str, str] = field(default_factory=dict)

    def record(
        self,
        clause: str,
        nodeid: str,
        outcome: str,
        message: str = "",
        blocked_by: str = "",
        *,
        soft: bool = False,
    ) -> None:
        """Add one test's outcome; a test reported twice keeps its worst outcome."""
        entry = self.clauses.setdefault(clause, ClauseRecord())
        if nodeid in entry.tests:
            index = entry.tests.index(nodeid)
            if outcome == "failed":
                entry.outcomes[index], entry.messages[index] = outcome, message
                entry.soft[index] = False
            return
        entry.tests.append(nodeid)
        entry.outcomes.append(outcome)
        entry.messages.append(message)
        entry.blockers.append(blocked_by)
        entry.soft.append(soft and outcome == "blocked")

    def summary(self) -> dict[str, int]:
        """Count clauses by outcome."""
        counts = dict.fromkeys(OUTCOMES, 0)
        for entry in self.clauses.values():
            counts[entry.outcome] += 1
        return counts

    def by_family(self) -> dict[str, dict[str, int]]:
        """Count clauses by outcome within each family, in catalog order."""
        table: dict[str, dict[str, int]] = {}
        for family in FAMILIES:
            members = [e for c, e in self.clauses.items() if family_of(c) == family]
            if members:
                table[family] = {o: sum(e.outcome == o for e in members) for o in OUTCOMES}
        return table

    def as_json(self) -> dict[str, Any]:
        """The report: kit version, spec, target, per-clause outcomes and a summary."""
        target = {
            "sink": self.settings.sink,
            "source": self.settings.source,
            "capabilities": sorted(self.settings.capabilities),
            "fence": self.settings.fence,
        }
        if "fence" in self.observations:
            target["observed_fence"] = self.observations["fence"]
        return {
            "kit_version": self.kit_version,
            "spec": self.spec,
            "target": target,
            "seed": self.settings.seed,
            "clauses": {
                clause: {
                    "outcome": e.outcome,
                    "tests": list(e.tests),
                    "message": e.message,
                    **({"blocked_by": e.blocked_by} if e.outcome == "blocked" else {}),
                }
                for clause, e in sorted(self.clauses.items(), key=lambda item: _order(item[0]))
            },
            "summary": self.summary(),
        }

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_json(), indent=2, ensure_ascii=False) + "\n", "utf-8")

    def as_markdown(self) -> str:
        """The report as a markdown table, fit for a CI job summary."""
        data = self.as_json()
        lines = [
            f"### tokcap conformance: `{data['target']['sink']}`",
            "",
            f"kit {data['kit_version']}, spec {data['spec']}, fence {data['target']['fence']}, "
            f"capabilities: {', '.join(data['target']['capabilities']) or 'none'}",
            "",
            "| clause | outcome | tests | message |",
            "| --- | --- | --- | --- |",
        ]
        for clause, entry in data["clauses"].items():
            message = entry["message"].splitlines()[0] if entry["message"] else ""
            message = message.replace("|", "\\|")
            lines.append(f"| {clause} | {entry['outcome']} | {len(entry['tests'])} | {message} |")
        counts = data["summary"]
        lines += ["", ", ".join(f"{count} {outcome}" for outcome, count in counts.items())]
        return "\n".join(lines) + "\n"

    def write_markdown(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.as_markdown(), "utf-8")


def _order(clause: str) -> tuple[int, str, int]:
    family, _, rest = clause.partition("-")
    head, _, number = rest.rpartition("-")
    return (
        FAMILIES.index(family) if family in FAMILIES else len(FAMILIES),
        head,
        int(number) if number.isdigit() else 0,
    )
