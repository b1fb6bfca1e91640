"""The target's temporary files stay in the run's basetemp, here and in spawned workers; files it
writes into the working directory and processes it leaves running are named in the report;
a daemon it starts never holds the caller's output open."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

TARGETS = '''
import multiprocessing, os, subprocess, tempfile
from reference import FileTokenStore

class MakesTempDirs(FileTokenStore):
    """Makes a temporary folder with a file in it at every construction and every put."""
    def __init__(self, root):
        super().__init__(root)
        self._litter("built")
    def _litter(self, what):
        folder = tempfile.mkdtemp(prefix="litter-")
        with open(os.path.join(folder, what), "w") as out:
            out.write(str(multiprocessing.parent_process() is not None))
        with open(os.path.join(tempfile.gettempdir(), f"{what}-{os.getpid()}"), "w"):
            pass
    async def put(self, entry):
        self._litter("put")
        await super().put(entry)

class WritesIntoItsCwd(FileTokenStore):
    async def put(self, entry):
        with open("stray-output.txt", "a") as out:
            out.write(entry.model_call_id + "\\n")
        await super().put(entry)

class StartsADaemon(FileTokenStore):
    """Its first construction starts a daemon that inherits the standard streams."""
    def __init__(self, root):
        super().__init__(root)
        if not os.path.exists("daemon.pid"):
            daemon = subprocess.Popen(["sleep", "300"], start_new_session=True)
            with open("daemon.pid", "w") as out:
                out.write(str(daemon.pid))

class StartsADaemonPerProcess(FileTokenStore):
    """Its first construction in each process starts a daemon and names it in daemon-PID.pid."""
    def __init__(self, root):
        super().__init__(root)
        marker = f"daemon-{os.getpid()}.pid"
        if not os.path.exists(marker):
            daemon = subprocess.Popen(["sleep", "300"], start_new_session=True)
            with open(marker, "w") as out:
                out.write(str(daemon.pid))
'''
WAIT = 120.0


def kit(pytester: pytest.Pytester, sink: str, *args: str, **run: Any) -> subprocess.Popen[bytes]:
    pytester.makepyfile(targets=TARGETS)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            f"--tokcap-sink={sink}",
            '--tokcap-sink-kwargs={"root": "{tmp_path}"}',
            "--tokcap-report=out/r.json",
            "--tokcap-report-md=out/r.md",
            "--junitxml=out/junit.xml",
            *args,
        ],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **run,
    )


def report(pytester: pytest.Pytester) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((pytester.path / "out" / "r.json").read_text())
    return data


def test_temporary_files_of_the_target_and_its_workers_stay_in_basetemp(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mkdtemp and gettempdir, at start-up, in checks and in spawned workers, land in basetemp."""
    system_tmp = pytester.mkdir("system-tmp")
    monkeypatch.setenv("TMPDIR", str(system_tmp))
    process = kit(pytester, "targets:MakesTempDirs", "--basetemp=base", "-k", "PUT-1 or SPAWN-1")
    out, _ = process.communicate(timeout=WAIT)
    assert process.returncode == pytest.ExitCode.OK, out.decode()
    assert list(system_tmp.iterdir()) == []
    littered = {path.name.split("-")[0] for path in (pytester.path / "base").rglob("*")}
    assert {"built", "put", "litter"} <= littered
    workers = [p for p in (pytester.path / "base").rglob("put") if p.read_text() == "True"]
    assert workers, "no spawned worker made a temporary folder"
    assert report(pytester)["warnings"] == []


def test_files_the_target_writes_into_the_working_directory_are_reported(
    pytester: pytest.Pytester,
) -> None:
    """A file the target writes into its working directory is a warning in every report."""
    process = kit(pytester, "targets:WritesIntoItsCwd", "-k", "PUT-1 or SPAWN-1")
    out, _ = process.communicate(timeout=WAIT)
    assert process.returncode == pytest.ExitCode.OK, out.decode()
    warning = f"the target left stray-output.txt in the working directory {pytester.path}"
    assert report(pytester)["warnings"] == [warning]
    assert f"- {warning}" in (pytester.path / "out" / "r.md").read_text()
    assert f"tokcap warning: {warning}" in out.decode()


def test_a_daemon_the_target_starts_is_reported_and_holds_no_output_open(
    pytester: pytest.Pytester,
) -> None:
    """The caller reads the kit's output to its end though the daemon lives on, and is told."""
    process = kit(pytester, "targets:StartsADaemon", "-k", "PUT-1")
    try:
        out, _ = process.communicate(timeout=WAIT)
    finally:
        pid_file = pytester.path / "daemon.pid"
        daemon = int(pid_file.read_text()) if pid_file.exists() else None
    assert daemon is not None
    try:
        assert process.returncode == pytest.ExitCode.OK, out.decode()
        assert report(pytester)["warnings"] == [
            f"the target left daemon.pid in the working directory {pytester.path}",
            f"process {daemon} (sleep 300) was still running when the run ended",
        ]
    finally:
        os.kill(daemon, signal.SIGKILL)


def test_daemons_left_under_xdist_are_reported(pytester: pytest.Pytester) -> None:
    """Under xdist, a daemon the target starts in a worker, and one it starts in the
    controller's start-up build, are both named, and no xdist worker is."""
    process = kit(pytester, "targets:StartsADaemonPerProcess", "-k", "PUT-1", "-n", "2")
    try:
        out, _ = process.communicate(timeout=WAIT)
    finally:
        daemons = [int(path.read_text()) for path in pytester.path.glob("daemon-*.pid")]
    try:
        assert process.returncode == pytest.ExitCode.OK, out.decode()
        assert len(daemons) >= 2
        running = [w for w in report(pytester)["warnings"] if "still running" in w]
        assert sorted(running) == sorted(
            f"process {daemon} (sleep 300) was still running when the run ended"
            for daemon in daemons
        )
    finally:
        for daemon in daemons:
            os.kill(daemon, signal.SIGKILL)


def test_a_clean_target_leaves_no_warning(pytester: pytest.Pytester) -> None:
    """The reference store, with reports and junit in the working directory, warns of nothing."""
    process = kit(pytester, "reference:FileTokenStore", "-k", "PUT-1", "--log-file=run.log")
    out, _ = process.communicate(timeout=WAIT)
    assert process.returncode == pytest.ExitCode.OK, out.decode()
    assert report(pytester)["warnings"] == []
    assert Path(pytester.path / "run.log").exists()
