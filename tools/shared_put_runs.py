"""Run many trials of spawned workers putting into one shared rollout of the file store: every
put must return, and within the store's lock timeout.

Each trial spawns ``--workers`` interpreters; each puts ``--calls`` entries into a rollout all
of them share and as many into one of its own, for ``--rounds`` fresh rollouts. A put still
pending after ``--deadline`` seconds makes its worker write where its threads are
(``put-stuck-PID.txt`` in the current folder) and exit 3; a put that raises ends its worker
with exit 1.

    python tools/shared_put_runs.py --runs 150 [--workers 8] [--deadline 35]

prints a line per trial that had such a worker, then the trials, the slowest put and how many
puts took over a second. It exits 1 if any put hung or failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import multiprocessing
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _worker(root: str, number: int, rounds: int, calls: int, deadline: float, out: Any) -> None:
    sys.path.insert(0, str(ROOT))
    from reference import FileTokenStore
    from tokcap_spec import TokenEntry

    pending: list[float] = []

    def watch() -> None:
        while True:
            time.sleep(0.25)
            if pending and time.monotonic() - pending[0] > deadline:
                with open(f"put-stuck-{os.getpid()}.txt", "w", encoding="utf-8") as trace:
                    faulthandler.dump_traceback(trace, all_threads=True)
                os._exit(3)

    threading.Thread(target=watch, daemon=True).start()
    slowest, slow = 0.0, 0

    async def main() -> None:
        nonlocal slowest, slow
        store: Any = FileTokenStore(root=root)
        for round_ in range(rounds):
            for call in range(calls):
                for rollout in (f"shared-{round_}", f"own{number}-{round_}"):
                    entry = TokenEntry(
                        rollout_id=rollout,
                        model_call_id=f"w{number}-{call}",
                        prompt_token_ids=[1, 2, 3],
                        generation_token_ids=[4],
                        generation_log_probs=[-0.5],
                    )
                    pending.append(time.monotonic())
                    await store.put(entry)
                    took = time.monotonic() - pending.pop()
                    slowest, slow = max(slowest, took), slow + (took > 1.0)
        await store.close()

    asyncio.run(main())
    out.put((slowest, slow))


def main(argv: list[str] | None = None) -> int:
    """Run the trials the command line asks for; print a summary; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=150, help="how many trials (default 150)")
    parser.add_argument("--workers", type=int, default=8, help="workers a trial (default 8)")
    parser.add_argument("--rounds", type=int, default=20, help="shared rollouts (default 20)")
    parser.add_argument("--calls", type=int, default=8, help="puts a rollout (default 8)")
    parser.add_argument("--deadline", type=float, default=35.0, help="seconds a put may take")
    args = parser.parse_args(argv)
    spawn = multiprocessing.get_context("spawn")
    bad, slowest, slow = 0, 0.0, 0
    started = time.monotonic()
    for run in range(args.runs):
        root = tempfile.mkdtemp(prefix="tokcap-shared-puts-")
        out = spawn.Queue()
        work = (args.rounds, args.calls, args.deadline, out)
        workers = [
            spawn.Process(target=_worker, args=(root, n, *work)) for n in range(args.workers)
        ]
        for worker in workers:
            worker.start()
        codes = []
        for worker in workers:
            # A worker that exits puts its figures first; reading them lets it end.
            while worker.is_alive() or not out.empty():
                with contextlib.suppress(queue.Empty):
                    took, over = out.get(timeout=0.1)
                    slowest, slow = max(slowest, took), slow + over
            worker.join()
            codes.append(worker.exitcode)
        if any(code != 0 for code in codes):
            bad += 1
            print(f"trial {run}: worker exit codes {codes}", flush=True)
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"{args.runs} trials in {time.monotonic() - started:.0f} s: {bad} with a put that hung or "
        f"failed; slowest put {slowest:.2f} s; {slow} puts over 1 s"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
