"""Steps that reach the target outside the check's own endpoints: a bare construction, and a
freeze by a fresh source on another thread while the check's event loop stands still."""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Callable
from typing import Any

from conformance._kit import Endpoint, Kit, build_endpoint
from conformance._reading import SnapshotView, entry_view, read_snapshot
from conformance._steps.operations import put
from conformance._workers import constructor

__all__ = ["construct", "freeze_elsewhere", "visible_after"]


def construct(kit: Kit, target: str, kwargs: dict[str, Any]) -> Any:
    """Build ``module:Class`` with ``kwargs`` and nothing else (no check of the protocol).

    The constructor runs under the check's deadline.
    """
    module, _, name = target.partition(":")
    with kit.watch.call([constructor(target)]):
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
        return found(**kwargs)


def visible_after(
    kit: Kit, sink: Endpoint, entry: Any, *, built_before: bool
) -> SnapshotView | BaseException:
    """Put ``entry`` and freeze its rollout elsewhere the moment the put returns.

    The fresh source is built after the put, or (``built_before``) before it, as a consumer's
    long-lived source is. The put's own failure is PUT-1's, as in every basic.
    """
    rollout = entry_view(entry).rollout_id
    if not built_before:
        put(kit, sink, entry, clause="PUT-1")
        return freeze_elsewhere(kit, rollout)
    return freeze_elsewhere(kit, rollout, lambda: put(kit, sink, entry, clause="PUT-1"))


def freeze_elsewhere(
    kit: Kit, rollout: str, write: Callable[[], None] | None = None
) -> SnapshotView | BaseException:
    """Freeze from a fresh source on another thread's loop while the kit's loop stands still.

    Work the sink left for its own event loop (a task committing after the ack) cannot run
    in between, exactly as for a consumer in another process. With ``write``, the source is
    built first, ``write`` runs here (a put, say), and the freeze follows the moment it
    returns: a long-lived consumer's source, and the narrowest window a write-behind commit
    can hide in. Returns the snapshot read through the contract, or what went wrong.
    """
    found: list[Any] = []
    ready, go = threading.Event(), threading.Event()
    timeout = kit.settings.timeout

    async def look() -> Any:
        source = build_endpoint(kit.settings.source, dict(kit.settings.source_kwargs), "source")
        try:
            ready.set()
            if write is not None and not go.wait(timeout):
                raise TimeoutError(f"the write did not return within {timeout:g} s")
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

    worker = threading.Thread(target=run, name="tokcap-fresh-source", daemon=True)
    worker.start()
    try:
        if write is not None:
            ready.wait(timeout)
            try:
                write()
            finally:
                go.set()
    finally:
        worker.join(timeout)
    if found:
        return found[0]  # type: ignore[no-any-return]
    return TimeoutError(
        f"the fresh source's freeze did not return within {timeout:g} s (--tokcap-timeout)"
    )
