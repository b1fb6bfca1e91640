"""The write side (:class:`TokenSink`) and read side (:class:`TokenSource`) of token capture.

Both are structural: an implementation needs no base class, only coroutine methods with
these names. One object may be both a sink and a source.

A process may install one sink and one source of its own (``install_token_sink``). Installed
endpoints live in this process only: a spawned worker does not inherit them, which is why
the configuration builds a sink in every serving process instead (SPAWN-1).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from tokcap_spec.records import TokenEntry

__all__ = [
    "CallIntentSink",
    "RetiringSource",
    "TokenCaptureSnapshot",
    "TokenSink",
    "TokenSource",
    "install_token_sink",
    "install_token_source",
    "installed_token_sink",
    "installed_token_source",
    "protocol_methods",
    "protocol_problems",
]


@dataclass(frozen=True)
class TokenCaptureSnapshot:
    """What one ``freeze`` saw: every entry of a rollout at one instant, and whether it is clean.

    ``snapshot_id`` and ``version`` together name this exact state; ``drop`` retires the
    rollout only when both still match (DROP-1, DROP-2).
    """

    rollout_id: str
    entries: tuple[TokenEntry, ...] = field(default_factory=tuple)
    incomplete: bool = False
    snapshot_id: str = ""
    version: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.entries, tuple):
            object.__setattr__(self, "entries", tuple(self.entries))

    def entry_for(self, model_call_id: str) -> TokenEntry | None:
        """Return the entry of ``model_call_id``, or None when the snapshot has none."""
        for entry in self.entries:
            if entry.model_call_id == model_call_id:
                return entry
        return None


@runtime_checkable
class TokenSink(Protocol):
    """Accepts captured entries. Every method is a coroutine function."""

    async def put(self, entry: TokenEntry) -> None:
        """Store ``entry`` durably; return only once a fresh source would see it (PUT-1)."""

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        """Record durably that ``rollout_id`` lost evidence; later freezes say incomplete."""

    async def close(self) -> None:
        """Release resources; idempotent, and loses nothing already acknowledged."""


@runtime_checkable
class TokenSource(Protocol):
    """Hands captured entries to a consumer. Every method is a coroutine function."""

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        """Fence ``rollout_id`` and return an atomic, immutable snapshot of it."""
        ...

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        """Retire the rollout if it is still exactly the given snapshot; say whether it was."""
        ...

    async def close(self) -> None:
        """Release resources; idempotent."""


@runtime_checkable
class CallIntentSink(Protocol):
    """Optional sink extension: announce a call before its entry exists (EXT-BEGIN-1).

    An intent with no matching entry at freeze time makes the snapshot incomplete.
    """

    async def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        """Record durably that ``model_call_id`` started in ``rollout_id``."""


@runtime_checkable
class RetiringSource(Protocol):
    """Optional source extension: unconditional batch retirement (EXT-RETIRE-1)."""

    async def retire(self, rollout_ids: Iterable[str]) -> None:
        """Remove and fence each rollout whatever its state; repeating it is a no-op."""

    async def delete(self, rollout_ids: Iterable[str]) -> None:
        """Remove records and fences so that each id can be used again."""


def protocol_methods(protocol: type) -> tuple[str, ...]:
    """Return the public method names a structural protocol requires, in definition order."""
    return tuple(
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(value)
    )


def protocol_problems(obj: object, protocol: type) -> list[str]:
    """Return why ``obj`` does not satisfy ``protocol``, one line per method; empty if it does."""
    problems = []
    for name in protocol_methods(protocol):
        member = getattr(obj, name, None)
        if member is None:
            problems.append(f"{name}() is missing")
        elif not callable(member):
            problems.append(f"{name} is not callable")
        elif not inspect.iscoroutinefunction(getattr(protocol, name)):
            if inspect.iscoroutinefunction(member):
                problems.append(f"{name}() is a coroutine function; declare it with plain 'def'")
        elif not inspect.iscoroutinefunction(member):
            problems.append(f"{name}() is not a coroutine function (declare it with 'async def')")
    return problems


_installed: dict[str, object] = {}


def _install(kind: str, endpoint: object, protocol: type) -> None:
    if endpoint is None:
        _installed.pop(kind, None)
        return
    problems = protocol_problems(endpoint, protocol)
    if problems:
        raise TypeError(
            f"cannot install {type(endpoint).__qualname__} as the token {kind}: "
            + "; ".join(problems)
        )
    _installed[kind] = endpoint


def install_token_sink(sink: TokenSink | None) -> None:
    """Make ``sink`` this process's token sink (None uninstalls).

    Raises ``TypeError`` naming the first missing or non-coroutine method. Installation is
    per process: spawned workers never see it.
    """
    _install("sink", sink, TokenSink)


def installed_token_sink() -> TokenSink | None:
    """Return the sink installed in this process, or None."""
    sink = _installed.get("sink")
    return sink if isinstance(sink, TokenSink) else None


def install_token_source(source: TokenSource | None) -> None:
    """Make ``source`` this process's token source (None uninstalls); validated like a sink."""
    _install("source", source, TokenSource)


def installed_token_source() -> TokenSource | None:
    """Return the source installed in this process, or None."""
    source = _installed.get("source")
    return source if isinstance(source, TokenSource) else None
