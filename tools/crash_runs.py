"""Run many crash trials of the file store: SIGKILLed writers must lose no acknowledged entry.

What one trial does, and what it checks afterwards, is in ``tests/reference/crash_harness.py``.

    python tools/crash_runs.py --runs 200 [--seed 1] [--root DIR]

prints one line per failed run and a summary: runs, acks, acked entries lost (must be 0), runs with
problems (must be 0), writers killed by the parent, writers that died mid-record, and torn tails
left for the final freeze to cut. It exits 1 on any loss or problem.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The harness and the store are imported by name here and in every spawned writer.
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "reference")]

from crash_harness import RunResult, crash_run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Run the crash trials the command line asks for; print a summary; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="how many trials (default 200)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first trial (default 1)")
    parser.add_argument("--root", help="directory for the stores (default: a temporary one)")
    args = parser.parse_args(argv)
    base = tempfile.mkdtemp(prefix="tokcap-crash-", dir=args.root)
    totals = RunResult(seed=args.seed)
    failed = 0
    started = time.monotonic()
    try:
        for seed in range(args.seed, args.seed + args.runs):
            root = os.path.join(base, f"run-{seed}")
            result = crash_run(seed, root)
            totals.acked += result.acked
            totals.lost += result.lost
            totals.torn_tails += result.torn_tails
            totals.torn_writers += result.torn_writers
            totals.killed_writers += result.killed_writers
            if result.ok:
                shutil.rmtree(root)
            else:
                failed += 1
                detail = "; ".join([*(f"lost {x}" for x in result.lost), *result.problems])
                print(f"run seed={seed} FAILED (kept in {root}): {detail}", flush=True)
    finally:
        if not failed:
            shutil.rmtree(base, ignore_errors=True)
    print(
        f"runs: {args.runs}  acks: {totals.acked}  acked entries lost: {len(totals.lost)}  "
        f"runs with problems: {failed}\n"
        f"writers killed by SIGKILL from the parent: {totals.killed_writers}  "
        f"writers that tore a record and SIGKILLed themselves: {totals.torn_writers}  "
        f"torn tails left for the final freeze to cut: {totals.torn_tails}  "
        f"({time.monotonic() - started:.0f} s)"
    )
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
