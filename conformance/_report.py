"""The conformance verdict per clause, and the JSON and markdown reports built from it.

A clause *failed* if any of its tests failed, *blocked* if none failed but one could not
judge it because a more basic clause broke, *passed* if at least one passed and none failed
or was blocked, *not-claimed* if its tests were skipped because the target declared a
capability under which they do not apply, and *skipped* otherwise. Reports say whether the
run was complete, partial or interrupted, and carry target names, never kwarg values.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from conformance._budget import shown
from conformance._costs import CostLedger
from conformance._notices import REAL_STORE
from conformance._registry import family_of
from conformance._secrecy import scrub
from conformance._settings import KitSettings
from conformance.catalog import families_of, position

__all__ = ["OUTCOMES", "REPORT_FORMAT", "STATUSES", "ClauseRecord", "Run", "Verdicts"]

OUTCOMES = ("passed", "failed", "skipped", "not-claimed", "blocked")
_PRECEDENCE = ("failed", "blocked", "passed", "not-claimed")
REPORT_FORMAT = 2
"""Version of the JSON report's layout; keys are only ever added."""
STATUSES = ("complete", "partial", "interrupted")


@dataclass
class Run:
    """When the run happened and how far it got."""

    started: float = field(default_factory=time.time)
    clock: float = field(default_factory=time.monotonic)
    finished: float | None = None
    duration: float | None = None
    status: str = "interrupted"
    """``complete``, ``partial`` (a selection, ``-x``) or ``interrupted``; until the run ends
    it is ``interrupted``, which is what a report written by a dying run says."""
    reason: str = ""

    def finish(self, status: str, reason: str = "") -> None:
        """Stamp the end of the run and how far it got."""
        self.finished = time.time()
        self.duration = round(time.monotonic() - self.clock, 3)
        self.status, self.reason = status, reason

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "started": _stamp(self.started),
            "finished": _stamp(self.finished) if self.finished is not None else None,
            "duration_seconds": self.duration,
        }


def _stamp(moment: float) -> str:
    return datetime.fromtimestamp(moment, timezone.utc).isoformat(timespec="seconds")


@dataclass
class ClauseRecord:
    """Every test of one clause and what happened to it."""

    tests: list[str] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    blocked_by: list[str] = field(default_factory=list)
    soft: list[bool] = field(default_factory=list)
    """Per test: blocked within a check proving many clauses, outweighed by any pass."""

    @property
    def outcome(self) -> str:
        hard = {o for o, soft in zip(self.outcomes, self.soft, strict=True) if not soft}
        for outcome in _PRECEDENCE:
            if outcome in hard:
                return outcome
        return "blocked" if "blocked" in self.outcomes else "skipped"

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
    run: Run = field(default_factory=Run)
    distributions: dict[str, dict[str, str]] = field(default_factory=dict)
    """The installed distribution (name, version) each target comes from, by role."""
    reported: set[str] = field(default_factory=set)
    """Node ids of the kit's tests that reported an outcome."""
    warnings: list[str] = field(default_factory=list)
    """What the target left behind outside the kit's scratch: files, live processes."""
    constructions: int = 0
    """How many times the kit built the target in this process (spawned workers apart)."""
    tests: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Each kit test that ran: its status (passed, failed, skipped, not-claimed) and message."""
    costs: CostLedger = field(default_factory=CostLedger)
    """What the target's calls cost the checks' event loops, measured as the checks ran."""

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
        if blocked_by and blocked_by not in entry.blocked_by:
            entry.blocked_by.append(blocked_by)
        if nodeid in entry.tests:
            index = entry.tests.index(nodeid)
            if _rank(outcome) < _rank(entry.outcomes[index]):
                entry.outcomes[index], entry.messages[index] = outcome, message
                entry.soft[index] = soft and outcome == "blocked"
            return
        entry.tests.append(nodeid)
        entry.outcomes.append(outcome)
        entry.messages.append(message)
        entry.soft.append(soft and outcome == "blocked")

    @property
    def succeeded(self) -> bool:
        """Whether every check ran and no clause failed or was blocked: what exit code 0 means."""
        summary = self.summary()
        return self.run.status == "complete" and not summary["failed"] and not summary["blocked"]

    @property
    def failed(self) -> list[str]:
        """The clauses that failed, in catalog order."""
        return [c for c in sorted(self.clauses, key=_order) if self.clauses[c].outcome == "failed"]

    def summary(self) -> dict[str, int]:
        """Count clauses by outcome."""
        counts = dict.fromkeys(OUTCOMES, 0)
        for entry in self.clauses.values():
            counts[entry.outcome] += 1
        return counts

    def by_family(self) -> dict[str, dict[str, int]]:
        """Count clauses by outcome within each family, in catalog order."""
        table: dict[str, dict[str, int]] = {}
        for family in families_of(self.settings.contract):
            members = [e for c, e in self.clauses.items() if family_of(c) == family]
            if members:
                table[family] = {o: sum(e.outcome == o for e in members) for o in OUTCOMES}
        return table

    def as_json(self) -> dict[str, Any]:
        """The report: run, kit version, spec, target, per-clause outcomes and a summary."""
        target: dict[str, Any] = {
            "sink": self.settings.sink,
            "source": self.settings.source,
            "capabilities": sorted(self.settings.capabilities),
            "fence": self.settings.fence,
            "entry_class": self.settings.entry_class,
            "distributions": self.distributions,
            "real_store": self.settings.real_store,
        }
        if "fence" in self.observations:
            target["observed_fence"] = self.observations["fence"]
        if self.settings.lineage:
            target["lineage"] = self.settings.lineage
        if self.settings.staging:
            target["staging_classes"] = self.settings.staging_classes
        clauses = {}
        for clause, e in sorted(self.clauses.items(), key=lambda item: _order(item[0])):
            clauses[clause] = {"outcome": e.outcome, "tests": list(e.tests), "message": e.message}
            if e.outcome == "blocked":
                clauses[clause]["blocked_by"] = e.blocked_by[0] if e.blocked_by else ""
        return {
            "report_format": REPORT_FORMAT,
            "run": self.run.as_json(),
            "kit_version": self.kit_version,
            "spec": self.spec,
            "contract": self.settings.contract,
            "contract_revision": self.spec,
            "profile": self.settings.profile,
            "timeout_seconds": self.settings.timeout,
            "target": target,
            "seed": self.settings.seed,
            "clauses": clauses,
            "summary": self.summary(),
            "warnings": list(self.warnings),
            "constructions": self.constructions,
            "costs": self._costs(),
        }

    def _costs(self) -> dict[str, Any]:
        measured = self.costs.as_json()
        measured["budget"] = shown(self.settings.budget) if self.settings.budget else None
        return measured

    def write_json(self, path: Path) -> None:
        text = json.dumps(self.as_json(), indent=2, ensure_ascii=False) + "\n"
        _write(path, text)

    def as_markdown(self) -> str:
        """The report as markdown for a CI job summary: a table, then every failure in full."""
        data = self.as_json()
        run = data["run"]
        versions = ", ".join(
            f"{role} from {found['name']} {found['version']}"
            for role, found in data["target"]["distributions"].items()
        )
        lines = [
            f"### tokcap conformance: `{data['target']['sink']}`",
            "",
            f"run {run['status']}{' (' + run['reason'] + ')' if run['reason'] else ''}, "
            f"started {run['started']}, {run['duration_seconds']} s; profile "
            f"{data['profile']}, seed {data['seed']}, timeout {data['timeout_seconds']:g} s",
            "",
            f"kit {data['kit_version']}, contract {data['contract']} revision "
            f"{data['contract_revision']}, report format "
            f"{data['report_format']}, fence {data['target']['fence']}, "
            f"capabilities: {', '.join(data['target']['capabilities']) or 'none'}"
            + (f"; {versions}" if versions else ""),
            "",
            *([f"**{REAL_STORE}**", ""] if data["target"]["real_store"] else []),
            "| clause | outcome | tests | message |",
            "| --- | --- | --- | --- |",
        ]
        for clause, entry in data["clauses"].items():
            message = entry["message"].splitlines()[0] if entry["message"] else ""
            message = message.replace("|", "\\|")
            lines.append(f"| {clause} | {entry['outcome']} | {len(entry['tests'])} | {message} |")
        counts = data["summary"]
        lines += ["", ", ".join(f"{count} {outcome}" for outcome, count in counts.items())]
        explained = [(c, e) for c, e in data["clauses"].items() if e["outcome"] == "failed"]
        if explained:
            lines += ["", "#### Failures"]
        for clause, entry in explained:
            lines += ["", f"**{clause}** (`{entry['tests'][0]}`)", "", "```", entry["message"]]
            lines += ["```"]
        if data["warnings"]:
            lines += ["", "#### Warnings", ""] + [f"- {warning}" for warning in data["warnings"]]
        costs = self.costs.as_markdown()
        if costs:
            budget = data["costs"]["budget"]
            lines += ["", "#### Costs", "", f"budget: {budget or 'none (COST not claimed)'}", ""]
            lines += costs
        return "\n".join(lines) + "\n"

    def write_markdown(self, path: Path) -> None:
        _write(path, self.as_markdown())

    def as_junit(self, *, ended_early: str = "") -> str:
        """The kit's tests as a junit XML document: one test case per check that ran.

        ``ended_early`` says why a run ended before its checks did; it becomes one more test
        case, in error, so that a junit reader does not take the run for a pass.
        """
        counts = Counter(
            "skipped" if status == "not-claimed" else status for status, _ in self.tests.values()
        )
        suite = ElementTree.Element(
            "testsuite",
            name="tokcap",
            tests=str(len(self.tests) + bool(ended_early)),
            failures=str(counts["failed"]),
            errors=str(int(bool(ended_early))),
            skipped=str(counts["skipped"]),
            time=f"{self.run.duration or 0:.3f}",
        )
        if ended_early:
            case = ElementTree.SubElement(suite, "testcase", classname="tokcap", name="run")
            ElementTree.SubElement(case, "error", message=f"run interrupted: {ended_early}")
        for name, (status, message) in self.tests.items():
            module, _, test = name.partition("::")
            case = ElementTree.SubElement(
                suite, "testcase", classname=module.removesuffix(".py"), name=test
            )
            if status == "failed":
                failure = ElementTree.SubElement(case, "failure", message=_first(message))
                failure.text = message
            elif status in ("skipped", "not-claimed"):
                ElementTree.SubElement(case, "skipped", message=_first(message))
        tree = ElementTree.Element("testsuites")
        tree.append(suite)
        return ElementTree.tostring(tree, encoding="unicode", xml_declaration=True) + "\n"

    def write_junit(self, path: Path, *, ended_early: str = "") -> None:
        _write(path, self.as_junit(ended_early=ended_early))


def _write(path: Path, text: str) -> None:
    """Write a report whole, secrets masked: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(scrub(text), "utf-8")
    partial.replace(path)


def _first(message: str) -> str:
    return message.splitlines()[0] if message else ""


def _rank(outcome: str) -> int:
    return _PRECEDENCE.index(outcome) if outcome in _PRECEDENCE else len(_PRECEDENCE)


def _order(clause: str) -> tuple[int, str]:
    return (position(clause), clause)
