"""What the kit measures each store costs the serving loop, three stores side by side in one run.

Runs the whole kit (``conformance.run_conformance``, the default budget) on tokcap's
``FileTokenStore`` and ``MemoryTokenStore`` and on NeMo Gym 0.7.0's own ``TokenCaptureStore``
(its own record class, from the pinned wheel ``benchmarks/gym_peer.py`` loads), one after
another on this machine, and prints the report's ``costs`` of each in one table, with the COST
verdicts. Figures are what the checks' own calls cost, not a load test: ``workload.py`` is that.

    python benchmarks/kit_costs.py [--profile quick|ci|thorough] [--seed N]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))

GYM_STORE = "nemo_gym.token_id_capture.store:TokenCaptureStore"
GYM_ENTRY = "nemo_gym.token_id_capture.records:TokenEntry"

ROWS = (
    ("put p50 ms", ("calls", "put", "p50_ms")),
    ("put p99 ms", ("calls", "put", "p99_ms")),
    ("mark_incomplete p99 ms", ("calls", "mark_incomplete", "p99_ms")),
    ("freeze p50 ms", ("calls", "freeze", "p50_ms")),
    ("freeze p99 ms", ("calls", "freeze", "p99_ms")),
    ("drop p99 ms", ("calls", "drop", "p99_ms")),
    ("loop hold p50 ms", ("loop_hold", "p50_ms")),
    ("loop hold p99 ms", ("loop_hold", "p99_ms")),
    ("loop hold max ms", ("loop_hold", "max_ms")),
    ("freeze ms per MiB", ("freeze", "ms_per_mib")),
)


def _targets() -> list[tuple[str, dict[str, Any]]]:
    from gym_peer import gym_modules

    # Imported before gym_modules puts tests/ (with its own tests/reference) on sys.path.
    importlib.import_module("reference")
    gym_modules()  # puts the pinned release on sys.path, for this process and spawned ones
    root = {"root": "{tmp_path}"}
    return [
        ("tokcap FileTokenStore", {"sink": "reference:FileTokenStore", "sink_kwargs": root}),
        (
            "tokcap MemoryTokenStore",
            {"sink": "reference:MemoryTokenStore", "capabilities": ["process-local"]},
        ),
        (
            "Gym TokenCaptureStore",
            {"sink": GYM_STORE, "sink_kwargs": root, "entry_class": GYM_ENTRY},
        ),
    ]


def _value(costs: dict[str, Any], path: tuple[str, ...]) -> str:
    found: Any = costs
    for key in path:
        if not isinstance(found, dict) or key not in found:
            return "-"
        found = found[key]
    return f"{found:.3f}" if isinstance(found, float) else str(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="ci", choices=("quick", "ci", "thorough"))
    parser.add_argument("--seed", type=int, default=1729)
    args = parser.parse_args(argv)
    from conformance import run_conformance

    columns: list[tuple[str, dict[str, Any], dict[str, str]]] = []
    for name, target in _targets():
        with tempfile.TemporaryDirectory() as scratch:
            verdicts = run_conformance(
                **target,
                profile=args.profile,
                seed=args.seed,
                budget="default",
                report=Path(scratch) / "report.json",
            )
        data = verdicts.as_json()
        cost_outcomes = {
            c: e["outcome"] for c, e in data["clauses"].items() if c.startswith("COST")
        }
        columns.append((name, data["costs"], cost_outcomes))
        print(f"judged {name}: {data['run']['duration_seconds']} s", flush=True)
    width = max(len(name) for name, _, _ in columns)
    print()
    print(f"budget: {columns[0][1]['budget']}; profile {args.profile}, seed {args.seed}")
    print(f"{'':24} " + " ".join(f"{name:>{width}}" for name, _, _ in columns))
    for label, path in ROWS:
        values = " ".join(f"{_value(costs, path):>{width}}" for _, costs, _ in columns)
        print(f"{label:24} {values}")
    for clause in ("COST-1", "COST-2", "COST-3"):
        values = " ".join(f"{outcomes.get(clause, '-'):>{width}}" for _, _, outcomes in columns)
        print(f"{clause:24} {values}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
