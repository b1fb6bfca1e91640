"""A Gym-style capture server: a plain ASGI app that builds its token sink in every worker.

Run it under uvicorn with several workers::

    TOKCAP_GYM_CONFIG=config.yaml uvicorn app:app --app-dir examples/gym_server --workers 2

At startup (ASGI lifespan) each worker process reads the YAML file named by
``TOKCAP_GYM_CONFIG`` and builds its own sink from the ``token_id_capture`` block, because
uvicorn workers are spawned and inherit nothing a launcher installed.

Routes:

- ``GET /health`` -> ``{"installed_sink": bool, "built_sink": "module:Class", "pid": int}``.
  ``installed_sink`` says whether this worker sees a sink installed with
  ``install_token_sink``; it is always false in a spawned worker.
- ``POST /ng-rollout/<id>/training-token-capture/put`` with a JSON ``TokenEntry`` body.
- ``POST /ng-rollout/<id>/training-token-capture/mark_incomplete`` with
  ``{"model_call_id": str}`` (optional).

A write answers 200 only after the sink acknowledged it. Otherwise: 400 for a body that is
not a valid request, 409 when the store refused the write under the contract (a conflicting
re-put, a frozen or a retired rollout), 500 when the store failed; every error body is
``{"error": <exception type>, "message": <text>}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import yaml

from tokcap_spec.config import token_id_capture_config
from tokcap_spec.errors import StoreWriteError, TokenCaptureError
from tokcap_spec.ids import TRAINING_CAPTURE_SEGMENT, rollout_id_from_path
from tokcap_spec.protocols import TokenSink, installed_token_sink
from tokcap_spec.records import TokenEntry

CONFIG_ENV = "TOKCAP_GYM_CONFIG"
MAX_BODY_BYTES = 16 * 2**20

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class BadRequest(Exception):
    """The request cannot be served as sent; the message says what was expected."""


class _Worker:
    """What one worker process holds: the sink it built and the target it came from."""

    sink: TokenSink | None = None
    target: str | None = None


_worker = _Worker()


def _load_config() -> dict[str, Any]:
    path = os.environ.get(CONFIG_ENV)
    if not path:
        raise RuntimeError(f"set {CONFIG_ENV} to the path of a Gym-style YAML config file")
    loaded = yaml.safe_load(Path(path).read_text())
    if not isinstance(loaded, dict):
        raise RuntimeError(f"{path}: expected a YAML mapping, got {type(loaded).__name__}")
    return loaded


async def _start() -> None:
    config = token_id_capture_config(_load_config())
    sink = config.build_sink()
    if sink is None:
        raise RuntimeError(
            "token_id_capture must be enabled with a sink for this example; "
            f"got enabled={config.enabled}, sink={config.token_id_capture.sink!r}"
        )
    _worker.sink, _worker.target = sink, config.token_id_capture.sink


async def _stop() -> None:
    sink, _worker.sink = _worker.sink, None
    if sink is not None:
        await sink.close()


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await _start()
            except Exception as exc:
                await send({"type": "lifespan.startup.failed", "message": f"{exc}"})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await _stop()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BadRequest("the client disconnected before sending the whole body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BadRequest(f"expected a body of at most {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _reply(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise BadRequest(f"expected a JSON body: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest(f"expected a JSON object, got {type(data).__name__}")
    return data


async def _put(sink: TokenSink, rollout_id: str, body: bytes) -> None:
    try:
        entry = TokenEntry.from_json_bytes(body)
    except ValueError as exc:
        raise BadRequest(f"expected a TokenEntry: {exc}") from None
    if entry.rollout_id != rollout_id:
        raise BadRequest(
            f"the body's rollout_id {entry.rollout_id!r} does not match the route's {rollout_id!r}"
        )
    await sink.put(entry)


async def _mark_incomplete(sink: TokenSink, rollout_id: str, body: bytes) -> None:
    call = _json_object(body).get("model_call_id", "")
    if not isinstance(call, str):
        raise BadRequest(f"expected model_call_id to be a string, got {type(call).__name__}")
    await sink.mark_incomplete(rollout_id, call)


_WRITES = {"put": _put, "mark_incomplete": _mark_incomplete}


async def _http(scope: Scope, receive: Receive, send: Send) -> None:
    path, method = scope["path"], scope["method"]
    if method == "GET" and path == "/health":
        await _reply(
            send,
            200,
            {
                "installed_sink": installed_token_sink() is not None,
                "built_sink": _worker.target,
                "pid": os.getpid(),
            },
        )
        return
    rollout_id = rollout_id_from_path(path)
    parts = path.rstrip("/").split("/")
    action = parts[-1] if len(parts) == 5 and parts[3] == TRAINING_CAPTURE_SEGMENT else None
    write = _WRITES.get(action or "")
    if rollout_id is None or write is None or method != "POST":
        await _reply(send, 404, {"error": "NotFound", "message": f"no route {method} {path}"})
        return
    sink = _worker.sink
    if sink is None:
        await _reply(send, 500, {"error": "NoSink", "message": "this worker has no sink"})
        return
    try:
        await write(sink, rollout_id, await _body(receive))
    except BadRequest as exc:
        await _reply(send, 400, {"error": "BadRequest", "message": str(exc)})
    except Exception as exc:
        refused = isinstance(exc, TokenCaptureError) and not isinstance(exc, StoreWriteError)
        status = 409 if refused else 500
        await _reply(send, status, {"error": type(exc).__name__, "message": str(exc)})
    else:
        await _reply(send, 200, {"ok": True, "pid": os.getpid()})


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI entry point: lifespan builds the sink, HTTP serves the capture routes."""
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
    elif scope["type"] == "http":
        await _http(scope, receive, send)
    else:
        raise RuntimeError(f"expected an 'http' or 'lifespan' scope, got {scope['type']!r}")
