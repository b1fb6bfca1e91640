"""A run ended by SIGTERM, SIGHUP or SIGINT writes its reports marked interrupted and leaves
nothing running; one killed with SIGKILL leaves no spawned worker behind."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TARGETS = '''
import os, socket, threading, multiprocessing
from reference import FileTokenStore

def tell(what):
    """Say ``what`` and this process's id to the test listening on TOKCAP_TEST_PORT."""
    port = int(os.environ["TOKCAP_TEST_PORT"])
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(f"{what} {os.getpid()}\\n".encode())

def in_worker():
    return multiprocessing.parent_process() is not None

class HangsBuilding(FileTokenStore):
    """Its constructor never returns: the run is stopped while the kit builds it."""
    def __init__(self, root):
        tell("building")
        threading.Event().wait()

class HangsInWorkers(FileTokenStore):
    """put never returns in a spawned worker: the run is stopped while the worker hangs."""
    async def put(self, entry):
        if in_worker():
            tell("worker")
            threading.Event().wait()
        await super().put(entry)

class PutsOn(FileTokenStore):
    """Tells the test at its fifth put, inside PUT-2's Hypothesis examples; notes every put
    that starts once the report exists."""
    puts = 0
    async def put(self, entry):
        type(self).puts += 1
        if type(self).puts == 5:
            tell("hypothesis")
        if os.path.exists("r.json"):
            with open("ran-on", "a") as notes:
                notes.write("a put after the report\\n")
        await super().put(entry)
'''

WAIT = 120.0
"""Seconds any step may take on a loaded machine before the test gives up on it."""
GONE_WITHIN = 5.0


@dataclass
class Run:
    process: subprocess.Popen[bytes]
    path: Path
    listener: socket.socket

    def heard(self) -> tuple[str, int]:
        """Wait for the target to tell where it is; return what it said and its pid."""
        self.listener.settimeout(WAIT)
        conn, _ = self.listener.accept()
        with conn:
            word, pid = conn.makefile().readline().split()
        return word, int(pid)

    def ended(self) -> tuple[int, str]:
        _, err = self.process.communicate(timeout=WAIT)
        return self.process.returncode, err.decode()

    def report(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.path / "r.json").read_text(encoding="utf-8"))
        return data


@pytest.fixture
def start(pytester: pytest.Pytester) -> Iterator[Any]:
    """Start the kit in a subprocess against one of the targets, listening for their word."""
    pytester.makepyfile(targets=TARGETS)
    runs: list[Run] = []

    def started(sink: str, *args: str) -> Run:
        listener = socket.create_server(("127.0.0.1", 0))
        env = {**os.environ, "TOKCAP_TEST_PORT": str(listener.getsockname()[1])}
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                f"--tokcap-sink=targets:{sink}",
                '--tokcap-sink-kwargs={"root": "{tmp_path}"}',
                "--tokcap-report=r.json",
                "--tokcap-report-md=r.md",
                "--junitxml=junit.xml",
                *args,
            ],
            cwd=pytester.path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            # A shell that runs the suite in the background ignores SIGINT in its children.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        runs.append(Run(process, pytester.path, listener))
        return runs[-1]

    yield started
    for run in runs:
        run.listener.close()
        if run.process.poll() is None:
            run.process.kill()
            run.process.communicate()


def gone_within(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` (not necessarily our child) has ended within ``seconds``."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([handle], [], [], seconds)
        return bool(readable)
    finally:
        os.close(handle)


def interrupted_reports(run: Run, reason: str) -> None:
    report = run.report()
    assert (report["run"]["status"], report["run"]["reason"]) == ("interrupted", reason)
    assert "run interrupted" in (run.path / "r.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_a_worker_hangs_writes_every_report_and_reaps_the_worker(
    start: Any, number: signal.Signals
) -> None:
    """SIGTERM or SIGHUP during a spawned worker's call: three reports, worker gone at once."""
    run = start("HangsInWorkers", "-k", "SPAWN-1")
    word, worker = run.heard()
    assert word == "worker"
    run.process.send_signal(number)
    code, _ = run.ended()
    assert code == pytest.ExitCode.INTERRUPTED
    interrupted_reports(run, f"terminated by {number.name}")
    assert 'name="tokcap_status" value="interrupted"' in (run.path / "junit.xml").read_text()
    assert gone_within(worker, 0.0)


def test_sigterm_while_the_target_is_built_still_writes_the_reports(start: Any) -> None:
    """SIGTERM during the start-up build, before any check, writes reports marked interrupted,
    junit included."""
    run = start("HangsBuilding")
    assert run.heard()[0] == "building"
    run.process.send_signal(signal.SIGTERM)
    code, _ = run.ended()
    assert code == pytest.ExitCode.INTERRUPTED
    interrupted_reports(run, "terminated by SIGTERM")
    # pytest's own junit needs a session; the kit's says the run did not pass.
    junit = (run.path / "junit.xml").read_text()
    assert 'errors="1"' in junit
    assert 'message="run interrupted: terminated by SIGTERM"' in junit


def test_sigkill_of_the_kit_takes_its_hanging_worker_with_it(start: Any) -> None:
    """A worker whose kit was killed outright ends within seconds, though its put never returns."""
    run = start("HangsInWorkers", "-k", "SPAWN-1")
    _, worker = run.heard()
    run.process.kill()
    run.ended()
    assert gone_within(worker, GONE_WITHIN)


def test_sigint_during_a_hypothesis_check_reports_interrupted_and_stops_the_check(
    start: Any,
) -> None:
    """SIGINT inside PUT-2's examples: interrupted, no error, and no put once the report exists."""
    run = start("PutsOn", "-k", "PUT-2")
    assert run.heard()[0] == "hypothesis"
    run.process.send_signal(signal.SIGINT)
    code, err = run.ended()
    assert code == pytest.ExitCode.INTERRUPTED, err
    interrupted_reports(run, "interrupted by the user")
    assert "Error" not in err
    assert not (run.path / "ran-on").exists()
