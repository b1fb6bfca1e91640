"""Kill the kit with a signal at a random moment, many times; count the reports and leftovers.

    python tools/sigterm_runs.py [--runs 20] [--signal TERM] [--seed N] [-- KIT OPTIONS...]

Each run starts the kit against the reference file store (or the options after ``--``) in a
fresh directory, waits until the kit is loaded (it handles SIGTERM: its ``SigCgt`` in
``/proc``), then a random delay drawn from the rest of an unkilled run, and sends the signal.
A run counts as good when its JSON and markdown reports exist and say ``interrupted``, and
when, five seconds after the kit ended, no process that inherited the run's mark in its
environment (workers, resource trackers, whatever the target started) is still alive; for
SIGKILL, which leaves no report, only the second. Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

MARK = "TOKCAP_SIGNAL_RUN_MARK"
LINGER = 5.0
"""Seconds after the kit ended within which every process of the run must be gone."""
DEFAULT_KIT = [
    "--tokcap-sink=reference:FileTokenStore",
    '--tokcap-sink-kwargs={"root": "{tmp_path}"}',
]


def kit_command(folder: Path, kit: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--basetemp={folder / 'tmp'}",
        f"--tokcap-report={folder / 'r.json'}",
        f"--tokcap-report-md={folder / 'r.md'}",
        f"--junitxml={folder / 'junit.xml'}",
        *kit,
    ]


def handles(pid: int, number: int) -> bool:
    """Whether process ``pid`` catches signal ``number`` (its handler is installed)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (number - 1) & 1)


def marked(mark: str) -> list[int]:
    """Every live process whose environment carries ``mark``."""
    found = []
    needle = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def run_once(kit: list[str], number: int, delay: float | None) -> dict[str, object]:
    """One run of the kit, sent signal ``number`` ``delay`` seconds after it handles it."""
    mark = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="tokcap-signal-") as name:
        folder = Path(name)
        env = {**os.environ, MARK: mark}
        started = time.monotonic()
        process = subprocess.Popen(
            kit_command(folder, kit),
            cwd=folder,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        sent_at = None
        # Whatever the signal, the moment counts from when the kit is loaded: it handles
        # SIGTERM from its first hook on.
        while not handles(process.pid, signal.SIGTERM) and process.poll() is None:
            time.sleep(0.005)
        handled_at = time.monotonic() - started
        if delay is not None:
            time.sleep(delay)
            if process.poll() is None:
                sent_at = time.monotonic() - started
                process.send_signal(number)
        code = process.wait()
        ended = time.monotonic()
        left = marked(mark)
        while left and time.monotonic() - ended < LINGER:
            time.sleep(0.1)
            left = marked(mark)
        statuses = {}
        for report in ("r.json", "r.md"):
            path = folder / report
            if not path.exists():
                statuses[report] = "missing"
            elif report == "r.json":
                run = json.loads(path.read_text())["run"]
                statuses[report] = f"{run['status']} ({run['reason']})"
            else:
                statuses[report] = "interrupted" if "run interrupted" in path.read_text() else "?"
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        return {
            "exit": code,
            "signal_at": sent_at,
            "handled_at": handled_at,
            "duration": ended - started,
            "reports": statuses,
            "junit": (folder / "junit.xml").exists(),
            "left_running": left,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--signal", default="TERM", help="TERM, HUP, INT or KILL")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("kit", nargs="*", help="kit options after --")
    args = parser.parse_args()
    number = int(getattr(signal, f"SIG{args.signal}"))
    kit = args.kit or DEFAULT_KIT
    rng = random.Random(args.seed)
    unkilled = run_once(kit, number, None)
    length = float(unkilled["duration"]) - float(unkilled["handled_at"])  # type: ignore[arg-type]
    print(
        f"an unkilled run takes {float(unkilled['duration']):.1f} s "  # type: ignore[arg-type]
        f"({length:.1f} s after the kit handles the signal), exit {unkilled['exit']}"
    )
    good = index = 0
    while index < args.runs:
        outcome = run_once(kit, number, rng.uniform(0.0, length))
        if outcome["signal_at"] is None:
            print("     the run ended before its signal: drawn again")
            continue
        reports = outcome["reports"]
        assert isinstance(reports, dict)
        if outcome["exit"] == -number and str(reports["r.json"]).startswith("complete"):
            # The signal came once the run had written its final reports, as it exited.
            print(
                f"     SIG{args.signal} came after the complete reports were written: drawn again"
            )
            continue
        index += 1
        ok = (
            all(str(status).startswith("interrupted") for status in reports.values())
            and not (outcome["left_running"])
        )
        if number == signal.SIGKILL:
            ok = not outcome["left_running"]
        good += ok
        when = f"{outcome['signal_at']:5.2f} s"
        print(
            f"run {index:2}: SIG{args.signal} at {when}, exit {outcome['exit']}, "
            f"json {reports['r.json']}, md {reports['r.md']}, junit {outcome['junit']}, "
            f"left running {outcome['left_running'] or 'none'}{'' if ok else '  <-- BAD'}"
        )
    promise = "reports interrupted and " if number != signal.SIGKILL else ""
    print(f"{good} of {args.runs} runs: {promise}nothing left running")
    return 0 if good == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
