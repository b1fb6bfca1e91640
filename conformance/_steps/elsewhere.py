"""Steps that reach the target outside the check's own endpoints: a bare construction, and a
freeze by a fresh source on another thread while the check's event loop stands still."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from conformance._kit import Endpoint, Kit, build_endpoint
from conformance._reading import SnapshotView, entry_view, read_snapshot
from conformance._steps.operations import put_held
from conformance._targets import resolve
from conformance._workers import constructor

__all__ = ["construct", "freeze_elsewhere", "visible_after"]


def construct(kit: Kit, target: str, kwargs: dict[str, Any]) -> Any:
    """Build ``module:Class`` with ``kwargs`` and nothing else (no check of the protocol).

    The constructor runs under the check's deadline.
    """
    with kit.watch.call([constructor(target)]):
        return resolve(target)(**kwargs)


def visible_after(
    kit: Kit, sink: Endpoint, entry: Any, *, built_before: bool
) -> SnapshotView | BaseException:
    """Put ``entry`` and freeze its rollout elsewhere the instant the put returns.

    The put's coroutine hands over to the freezing thread before it gives control back to the
    event loop, and holds the loop until the freeze is done: a task the put left on the loop
    (a commit scheduled after the ack) cannot run in between, exactly as when the consumer is
    another process and the model server's loop is busy. The fresh source is built after the
    put, or (``built_before``) before it, as a consumer's long-lived source is. The put's own
    failure is PUT-1's, as in every basic.
    """
    found: list[Any] = []
    ready, go, finished = threading.Event(), threading.Event(), threading.Event()
    timeout = kit.settings.timeout
    rollout = entry_view(entry).rollout_id

    async def look() -> Any:
        source = None
        if built_before:
            source = _fresh_source(kit)
        ready.set()
        if not go.wait(timeout):
            if source is not None:  # built for a put that never returned: release it
                await source.close()
            raise TimeoutError(f"the put did not return within {timeout:g} s")
        source = source or _fresh_source(kit)
        try:
            return await source.freeze(rollout)
        finally:
            await source.close()

    def run() -> None:
        try:
            found.append(read_snapshot(asyncio.run(look())))
        except BaseException as exc:
            found.append(exc)
        finally:
            ready.set()
            finished.set()

    def release() -> None:
        go.set()
        finished.wait(timeout)

    worker = threading.Thread(target=run, name="tokcap-fresh-source", daemon=True)
    worker.start()
    try:
        ready.wait(timeout)
        try:
            put_held(kit, sink, entry, release, clause="PUT-1")
        finally:
            go.set()
    finally:
        worker.join(timeout)
    return _found(found, timeout)


def _fresh_source(kit: Kit) -> Any:
    return build_endpoint(kit.settings.source, dict(kit.settings.source_kwargs), "source")


def _found(found: list[Any], timeout: float) -> SnapshotView | BaseException:
    if found:
        return found[0]  # type: ignore[no-any-return]
    return TimeoutError(
        f"the fresh source's freeze did not return within {timeout:g} s (--tokcap-timeout)"
    )


def freeze_elsewhere(kit: Kit, rollout: str) -> SnapshotView | BaseException:
    """Freeze from a fresh source on another thread's loop while the kit's loop stands still.

    Work the sink left for its own event loop (a task committing after the ack) cannot run
    in between, exactly as for a consumer in another process. Returns the snapshot read
    through the contract, or what went wrong.
    """
    found: list[Any] = []
    timeout = kit.settings.timeout

    async def look() -> Any:
        source = _fresh_source(kit)
        try:
            return await source.freeze(rollout)
        finally:
            await source.close()

    def run() -> None:
        try:
            found.append(read_snapshot(asyncio.run(look())))
        except BaseException as exc:
            found.append(exc)

    worker = threading.Thread(target=run, name="tokcap-fresh-source", daemon=True)
    worker.start()
    worker.join(timeout)
    return _found(found, timeout)
