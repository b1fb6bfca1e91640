"""Measure the kit on a batch of stores written from the docs alone: how many it kills, on clause.

    python tools/blind_round.py MANIFEST [--jobs 2] [--seeds 1] [--redis-url URL] [--only NAME]

A blind batch lives outside the repository: a folder holding importable modules and a
``manifest.json`` listing each store as ``{"target": "pkg.module:Class", "kwargs": {...},
"clause": "PUT-4" or null, "capabilities": [...], "fence": "any" | "strict", "bug": "..."}``,
with ``"lineage": "pkg.module:Class"`` for a lineage resolver judged over the store's kwargs,
``"contract": "staging-v2"`` for a staging store (the capture contract otherwise),
``"staging_classes": "gym"`` for one typed against NeMo Gym's staging classes and
``"budget": "default"`` for one judged on what it costs (COST).
The writer's brief comes from ``tools/blind_brief.py`` (each clause's promise and NeMo Gym's
protocol text, nothing of how the kit checks); ``--read`` records its files with the round.
A store with a clause is a mutant that breaks it; one with null is a correct store the kit must
pass. Each store gets full kit runs under the ci profile (no ``-p zoo_fast``), each on a seed
drawn for it and printed, exactly as a framework author's CI would run it. A mutant is
*killed* when a run fails, and *killed on its clause* when its declared clause is among the
failed ones; a correct store is *flagged* when any clause fails or is blocked. ``{redis_url}``
in kwargs is replaced by ``--redis-url``.

Prints a markdown table and the rates; exits 1 when a correct store is flagged.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT / "tests" / "mutants"))

from zoo import JudgedStore, KitRun, run_kit  # noqa: E402


@dataclass(frozen=True)
class BlindStore:
    """One entry of a blind manifest."""

    name: str
    target: str
    kwargs: str
    clause: str | None
    flags: tuple[str, ...]
    bug: str
    contract: str = "capture"


def load(manifest: Path, redis_url: str | None) -> list[BlindStore]:
    """Read the manifest; refuse a store that needs a Redis URL none was given for."""
    stores = []
    for item in json.loads(manifest.read_text(encoding="utf-8")):
        kwargs = json.dumps(item.get("kwargs", {}))
        if "{redis_url}" in kwargs:
            if redis_url is None:
                raise SystemExit(f"{item['target']} needs --redis-url")
            kwargs = kwargs.replace("{redis_url}", redis_url)
        flags = [f"--tokcap-capability={name}" for name in item.get("capabilities", [])]
        if item.get("fence", "any") == "strict":
            flags.append("--tokcap-fence=strict")
        if item.get("lineage"):
            flags.append(f"--tokcap-lineage={item['lineage']}")
        if item.get("staging_classes"):
            flags.append(f"--tokcap-staging-classes={item['staging_classes']}")
        if item.get("budget"):
            flags.append(f"--tokcap-budget={item['budget']}")
        name = item["target"].rsplit(":", 1)[1]
        stores.append(
            BlindStore(
                name,
                item["target"],
                kwargs,
                item.get("clause"),
                tuple(flags),
                item["bug"],
                item.get("contract", "capture"),
            )
        )
    return stores


class AsShipped(JudgedStore):
    """A target judged exactly as a user's run judges it: no quality-run plugin."""

    def arguments(self, report: str) -> list[str]:
        arguments = super().arguments(report)
        at = arguments.index("zoo_fast")
        return arguments[: at - 1] + arguments[at + 1 :]


def judge(store: BlindStore, seed: int) -> KitRun:
    """Run the whole kit, ci profile, on ``store`` with ``seed``."""
    target = AsShipped(store.name, store.target, store.flags, store.kwargs, store.contract)
    arguments = ["--tokcap-profile=ci", f"--tokcap-seed={seed}"]
    return run_kit(target, arguments)


def verdict(store: BlindStore, run: KitRun) -> str:
    """``killed on clause``, ``killed elsewhere``, ``survived``; ``passed`` or ``flagged``."""
    if store.clause is None:
        return "passed" if not run.failed and not run.blocked and not run.problem else "flagged"
    # A clause failed before a run was cut short is failed for good: a later check only adds.
    if store.clause in run.failed:
        return "killed on clause"
    if run.failed:
        return "killed elsewhere"
    return f"no verdict ({run.problem})" if run.problem else "survived"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=1, help="kit runs per store, new seed each")
    parser.add_argument("--redis-url")
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument(
        "--record", metavar="ROUND", help="add the figures to docs/blind-rounds.json"
    )
    parser.add_argument("--fresh", action="store_true", help="the kit never changed for this batch")
    parser.add_argument("--note", default="", help="what the batch holds and what it missed")
    parser.add_argument(
        "--read",
        type=Path,
        default=None,
        help="the brief's read.json (tools/blind_brief.py): every file the writer was given",
    )
    options = parser.parse_args()
    folder = str(options.manifest.resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, os.environ.get("PYTHONPATH")]))
    stores = [
        store
        for store in load(options.manifest, options.redis_url)
        if not options.only or store.name in options.only
    ]
    draw = random.Random()
    jobs = [(store, draw.randrange(2**31)) for store in stores for _ in range(options.seeds)]
    with ThreadPoolExecutor(options.jobs) as pool:
        runs = list(pool.map(lambda job: (job[0], job[1], judge(*job)), jobs))
    print("| store | clause | seed | verdict | failed | blocked | s |")
    print("| --- | --- | ---: | --- | --- | --- | ---: |")
    for store, seed, run in runs:
        print(
            f"| {store.name} | {store.clause or 'correct'} | {seed} | {verdict(store, run)} | "
            f"{', '.join(run.failed)} | {', '.join(run.blocked)} | {run.seconds:.0f} |"
        )
    mutant_runs = [(store, run) for store, _, run in runs if store.clause is not None]
    killed = sum(bool(run.failed) for _, run in mutant_runs)
    on_clause = sum(verdict(store, run) == "killed on clause" for store, run in mutant_runs)
    flagged = [store.name for store, _, run in runs if verdict(store, run) == "flagged"]
    total = max(1, len(mutant_runs))
    print()
    print(
        f"mutant runs: {len(mutant_runs)}; killed {killed} ({100 * killed / total:.0f}%), "
        f"on their clause {on_clause} ({100 * on_clause / total:.0f}%); "
        f"correct stores flagged: {', '.join(flagged) or 'none'}"
    )
    if options.seeds > 1:
        print()
        print(steadiness(mutant_runs))
    if options.record:
        record(options, len(mutant_runs), killed, on_clause, len(runs) - len(mutant_runs), flagged)
    return 1 if flagged else 0


def steadiness(mutant_runs: list[tuple[BlindStore, KitRun]]) -> str:
    """Per mutant over its seeds: runs on clause, and whether every run failed the same set."""
    by_store: dict[str, list[tuple[BlindStore, KitRun]]] = {}
    for store, run in mutant_runs:
        by_store.setdefault(store.name, []).append((store, run))
    lines = ["| mutant | clause | runs | on clause | same failed set every run |"]
    lines.append("| --- | --- | ---: | ---: | --- |")
    for name, pairs in by_store.items():
        on_clause = sum(verdict(store, run) == "killed on clause" for store, run in pairs)
        same = len({tuple(run.failed) for _, run in pairs}) == 1
        lines.append(
            f"| {name} | {pairs[0][0].clause} | {len(pairs)} | {on_clause} | "
            f"{'yes' if same else 'no'} |"
        )
    return "\n".join(lines)


def record(
    options: argparse.Namespace,
    mutants: int,
    killed: int,
    on_clause: int,
    correct: int,
    flagged: list[str],
) -> None:
    """Append this round's figures to the file the kill matrix renders them from."""
    path = PROJECT / "docs" / "blind-rounds.json"
    rounds = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT, capture_output=True, text=True
    ).stdout.strip()
    rounds.append(
        {
            "round": options.record,
            "measured": datetime.date.today().isoformat(),
            "kit": commit,
            "fresh": options.fresh,
            "mutants": mutants,
            "killed": killed,
            "killed_pct": round(100 * killed / max(1, mutants)),
            "on_clause": on_clause,
            "on_clause_pct": round(100 * on_clause / max(1, mutants)),
            "correct": correct,
            "flagged": flagged,
            "note": options.note,
        }
    )
    if options.read is not None:
        rounds[-1]["read"] = sorted(json.loads(options.read.read_text(encoding="utf-8")))
    path.write_text(json.dumps(rounds, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
