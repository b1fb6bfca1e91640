"""The example capture server under real uvicorn workers, read back by a separate consumer."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import RedisServer, free_port

from reference.consumer import FinalizedRollout, finalize, retire_after_handoff
from reference.file_store import FileTokenStore
from tokcap_spec.config import token_id_capture_config
from tokcap_spec.protocols import TokenSource
from tokcap_spec.records import TokenEntry

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gym_server"
ROLLOUTS = 4
CALLS = 30
THREADS = 8
READY_WITHIN_SECONDS = 30.0
REQUEST_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class Server:
    """A running capture server: its port, its main process and its log."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        """Send one request on a new connection; return the status and the JSON body."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT_SECONDS)
        try:
            data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
            conn.request(method, path, body=data, headers={"content-type": "application/json"})
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def put(self, entry: TokenEntry) -> tuple[int, dict[str, Any]]:
        """POST ``entry`` to its rollout's put route."""
        route = f"/ng-rollout/{entry.rollout_id}/training-token-capture/put"
        return self.request("POST", route, entry.to_json_bytes())

    def worker_pids(self) -> set[int]:
        """The pids of the uvicorn worker processes spawned by the main process."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        pids = {int(pid) for pid in children.read_text().split()}
        return {p for p in pids if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()}


@contextmanager
def serving(command: list[str], config: dict[str, Any], tmp_path: Path) -> Iterator[Server]:
    """Run ``command`` with ``config`` as its Gym config until it answers /health; stop it after."""
    config_path = tmp_path / "gym.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log = tmp_path / "server.log"
    port = free_port()
    env = {**os.environ, "TOKCAP_GYM_CONFIG": str(config_path), "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
            cwd=EXAMPLE,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    server = Server(port, process, log)
    try:
        _await_health(server)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _await_health(server: Server) -> None:
    deadline = time.monotonic() + READY_WITHIN_SECONDS
    while time.monotonic() < deadline:
        try:
            if server.request("GET", "/health")[0] == 200:
                return
        except OSError:
            pass
        try:
            server.process.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            continue
        pytest.fail(f"the server exited with {server.process.returncode}:\n{_tail(server.log)}")
    pytest.fail(f"the server did not answer within {READY_WITHIN_SECONDS} s:\n{_tail(server.log)}")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def uvicorn_workers(workers: int = 2) -> list[str]:
    return [
        sys.executable, "-m", "uvicorn", "app:app", "--app-dir", str(EXAMPLE),
        "--workers", str(workers), "--lifespan", "on", "--no-access-log",
    ]  # fmt: skip


def gym_config(target: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        "policy_model_name": "example",
        "token_id_capture": {"enabled": True, "sink": target, "sink_kwargs": kwargs},
    }


def chain(rollout_id: str, calls: int) -> list[TokenEntry]:
    """Entries forming one prefix chain: each prompt extends the previous call's tokens."""
    seed = int(rollout_id.rsplit("-", 1)[1])
    tokens = [seed * 10_000 + i for i in range(3 * calls + 2)]
    return [
        TokenEntry(
            rollout_id=rollout_id,
            model_call_id=f"call {k}: ünï\n",
            model="m",
            prompt_token_ids=tokens[: 2 + 3 * k],
            generation_token_ids=[tokens[2 + 3 * k]],
            generation_log_probs=[float("-inf") if k == 0 else -0.0],
            created_at=float(k),
        )
        for k in range(calls)
    ]


@pytest.fixture(params=["file", "redis"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer
) -> tuple[str, dict[str, Any]]:
    """The sink target and kwargs every worker and the consumer build from."""
    if request.param == "file":
        return "reference.file_store:FileTokenStore", {"root": str(tmp_path / "capture")}
    return "reference.redis_store:RedisTokenStore", {
        "url": redis_server.url,
        "namespace": f"e2e-{uuid.uuid4().hex}",
    }


def consume(
    target: str, kwargs: dict[str, Any], rollout_ids: list[str]
) -> tuple[dict[str, FinalizedRollout], dict[str, bool], dict[str, int]]:
    """Build a source of our own, finalize every rollout, hand off and drop the clean ones."""
    handed_off: list[str] = []

    async def handoff(finalized: FinalizedRollout) -> None:
        handed_off.append(finalized.rollout_id)

    async def main() -> tuple[dict[str, FinalizedRollout], dict[str, bool], dict[str, int]]:
        source: Any = token_id_capture_config(gym_config(target, kwargs)).build_sink()
        assert isinstance(source, TokenSource)
        try:
            finalized = {r: await finalize(source, r) for r in rollout_ids}
            dropped = {
                r: await retire_after_handoff(source, f, handoff) for r, f in finalized.items()
            }
            kept = {r: len((await source.freeze(r)).entries) for r in rollout_ids if not dropped[r]}
            return finalized, dropped, kept
        finally:
            await source.close()

    result = asyncio.run(main())
    assert sorted(handed_off) == sorted(r for r, d in result[1].items() if d)
    return result


def test_workers_capture_everything_a_separate_consumer_reads_back(
    store: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    """Concurrent puts through two uvicorn workers all land, unmixed, and retire exactly."""
    target, kwargs = store
    rollout_ids = [f"gym-{uuid.uuid4().hex[:8]}-{n}" for n in range(ROLLOUTS)]
    entries = {r: chain(r, CALLS) for r in rollout_ids}
    work = [e for k in range(CALLS) for r in rollout_ids for e in [entries[r][k]]]
    with serving(uvicorn_workers(2), gym_config(target, kwargs), tmp_path) as server:
        workers = server.worker_pids()
        assert len(workers) == 2
        health = server.request("GET", "/health")[1]
        assert health["built_sink"] == target
        assert health["installed_sink"] is False

        with ThreadPoolExecutor(THREADS) as pool:
            started = time.perf_counter()
            replies = list(pool.map(server.put, work, timeout=120))
            elapsed = time.perf_counter() - started
        assert [status for status, _ in replies] == [200] * len(work)
        assert {reply["pid"] for _, reply in replies} <= workers
        print(f"\n{target}: {len(work)} puts in {elapsed:.2f} s = {len(work) / elapsed:.0f} puts/s")

        # An identical re-put is acknowledged; a conflicting one is refused and masks r3.
        assert server.put(entries[rollout_ids[0]][0])[0] == 200
        clash = entries[rollout_ids[3]][0].model_copy(update={"model": "other"})
        status, reply = server.put(clash)
        assert (status, reply["error"]) == (409, "ConflictingEntryError")
        route = f"/ng-rollout/{rollout_ids[2]}/training-token-capture/mark_incomplete"
        assert server.request("POST", route, {"model_call_id": "lost"})[0] == 200

        finalized, dropped, kept = consume(target, kwargs, rollout_ids)

        # The consumer's fences reach the workers: dropped rollouts and frozen ones refuse puts.
        late = chain(rollout_ids[2], CALLS + 1)[-1]
        assert server.put(late)[1]["error"] == "RolloutFrozenError"
        assert server.put(entries[rollout_ids[0]][1])[1]["error"] == "RolloutRetiredError"

    for rollout_id in rollout_ids[:2]:
        row = finalized[rollout_id].row
        assert row is not None
        last = entries[rollout_id][-1]
        assert row.token_ids == (*last.prompt_token_ids, *last.generation_token_ids)
        assert row.model_call_ids == tuple(e.model_call_id for e in entries[rollout_id])
        assert sum(row.loss_mask) == CALLS
        assert dropped[rollout_id] is True
    for rollout_id in rollout_ids[2:]:
        assert finalized[rollout_id].masked
        assert dropped[rollout_id] is False
        assert kept[rollout_id] == CALLS


def test_a_sink_installed_by_the_launcher_never_reaches_the_workers(tmp_path: Path) -> None:
    """The launcher installs a sink, yet every spawned worker reports none and built its own."""
    target = "reference.file_store:FileTokenStore"
    config = gym_config(target, {"root": str(tmp_path / "capture")})
    command = [sys.executable, str(EXAMPLE / "launch.py"), "--workers", "2"]
    with serving(command, config, tmp_path) as server:
        assert len(server.worker_pids()) == 2
        status, health = server.request("GET", "/health")
    assert "launcher installed_sink=True" in _tail(server.log)
    assert status == 200
    assert health["installed_sink"] is False
    assert health["built_sink"] == target
    assert health["pid"] != server.process.pid


def test_a_bad_request_is_refused_and_stores_nothing(tmp_path: Path) -> None:
    """Bodies that are not valid entries or do not match the route get 400 and no write."""
    root = tmp_path / "capture"
    config = gym_config("reference.file_store:FileTokenStore", {"root": str(root)})
    good = chain("bad-0", 1)[0]
    route = "/ng-rollout/bad-0/training-token-capture/put"
    with serving(uvicorn_workers(1), config, tmp_path) as server:
        nan = good.to_json_bytes().replace(b"-Infinity", b"NaN")
        assert server.request("POST", route, b"{not json")[0] == 400
        assert server.request("POST", route, nan)[0] == 400
        other = good.model_copy(update={"rollout_id": "bad-1"})
        assert server.request("POST", route, other.to_json_bytes())[0] == 400
        assert server.request("POST", "/ng-rollout/bad-0/training-token-capture/nope")[0] == 404
        assert server.request("GET", route)[0] == 404

    async def freeze() -> tuple[TokenEntry, ...]:
        source = FileTokenStore(root)
        try:
            return (await source.freeze("bad-0")).entries
        finally:
            await source.close()

    assert asyncio.run(freeze()) == ()


def test_a_store_failure_answers_500_without_the_password(tmp_path: Path) -> None:
    """A put the store cannot make durable gets 500 and an error body; no secret leaks anywhere."""
    secret = "s3cr3t-value"
    kwargs = {"url": f"redis://:{secret}@127.0.0.1:{free_port()}/0", "retries": 0}
    config = gym_config("reference.redis_store:RedisTokenStore", kwargs)
    with serving(uvicorn_workers(1), config, tmp_path) as server:
        status, reply = server.put(chain("down-0", 1)[0])
        health = server.request("GET", "/health")[1]
    assert status == 500
    assert reply["error"] == "StoreWriteError"
    assert "redis://:***@127.0.0.1:" in reply["message"]
    assert secret not in json.dumps(reply)
    assert secret not in json.dumps(health)
    assert secret not in server.log.read_text(errors="replace")
