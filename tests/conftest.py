"""Shared fixtures: a real ``redis-server`` on a free loopback port, started and stopped here.

A missing ``redis-server`` binary fails the tests that need it; it never skips them.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

DURABLE = ("--appendonly", "yes", "--appendfsync", "always", "--save", "")
"""Every acknowledged write is in the append-only file, fsynced, before the reply."""

VOLATILE = ("--appendonly", "no", "--save", "")
"""Nothing is ever written to disk: a restart starts empty."""

_READY_WITHIN_SECONDS = 10.0


def free_port() -> int:
    """Return a loopback port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process bound to 127.0.0.1, restartable on the same port and dir."""

    def __init__(self, directory: Path, persistence: tuple[str, ...]) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail(
                "redis-server is not on PATH; expected it installed (Debian package "
                "'redis-server', which .ci/run installs)",
                pytrace=False,
            )
        self.binary = binary
        self.directory = directory
        self.persistence = persistence
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The ``redis://`` URL of database 0 on this server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and return once it answers PING."""
        self.directory.mkdir(parents=True, exist_ok=True)
        command = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--logfile", "redis.log",
            "--daemonize", "no",
            "--unixsocket", "",
            *self.persistence,
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        self._await_ready(self.process)

    def _await_ready(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + _READY_WITHIN_SECONDS
        while time.monotonic() < deadline:
            if _answers_ping(self.port):
                return
            try:
                process.wait(timeout=0.02)
            except subprocess.TimeoutExpired:
                continue
            pytest.fail(
                f"redis-server exited with {process.returncode} before answering PING; "
                f"log:\n{self.log()}",
                pytrace=False,
            )
        self.kill()
        pytest.fail(
            f"redis-server did not answer PING within {_READY_WITHIN_SECONDS} s on port "
            f"{self.port}; log:\n{self.log()}",
            pytrace=False,
        )

    def log(self) -> str:
        """Return the tail of the server's log."""
        path = self.directory / "redis.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else "(no log)"

    def stop(self) -> None:
        """Shut the server down gracefully (SIGTERM) and wait for it."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would, and wait for it."""
        self._end(signal.SIGKILL)

    def _end(self, how: signal.Signals) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(how)
            process.wait(timeout=30)


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as conn:
            conn.sendall(b"PING\r\n")
            # A server that demands a password answers NOAUTH: it is serving all the same.
            return conn.recv(16).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


StartRedis = Callable[..., RedisServer]


@pytest.fixture
def start_redis(tmp_path: Path) -> Iterator[StartRedis]:
    """Start redis servers for one test (durable unless told otherwise); stop them after it."""
    servers: list[RedisServer] = []

    def start(persistence: tuple[str, ...] = DURABLE, name: str = "redis") -> RedisServer:
        server = RedisServer(tmp_path / name, persistence)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.kill()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One durable redis server shared by a whole test session; isolate tests by namespace."""
    server = RedisServer(tmp_path_factory.mktemp("redis"), DURABLE)
    server.start()
    yield server
    server.stop()
