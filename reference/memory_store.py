"""A token store that keeps records in this process's memory, for unit tests.

:class:`MemoryTokenStore` is both a :class:`~tokcap_spec.protocols.TokenSink` and a
:class:`~tokcap_spec.protocols.TokenSource`, with the optional ``begin_call``, ``retire`` and
``delete`` extensions. It has a strict fence: after ``freeze`` a put of a new call raises.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from tokcap_spec.errors import ConflictingEntryError, RolloutFrozenError, RolloutRetiredError
from tokcap_spec.ids import validate_call_id, validate_rollout_id, validate_rollout_ids
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry, as_token_entry, refusing_invalid

__all__ = ["MemoryTokenStore"]


@dataclass
class _Rollout:
    """Everything one rollout holds.

    ``version`` counts every state change. ``snapshot_id`` names the state the last freeze
    returned and is empty whenever the state has changed since (or was never frozen), so a
    freeze makes a new id exactly when there is something new to name.
    """

    entries: dict[str, TokenEntry] = field(default_factory=dict)
    payloads: dict[str, bytes] = field(default_factory=dict)
    intents: set[str] = field(default_factory=set)
    incomplete: bool = False
    frozen: bool = False
    version: int = 0
    snapshot_id: str = ""

    def changed(self) -> None:
        """Record a state change: a new version, which no snapshot has named yet."""
        self.version += 1
        self.snapshot_id = ""


@dataclass
class _Namespace:
    """The records every instance with one ``namespace`` shares."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    rollouts: dict[str, _Rollout] = field(default_factory=dict)
    retired: set[str] = field(default_factory=set)


# Process memory, not instance memory: a fresh instance must see what an earlier one stored.
_NAMESPACES: dict[str, _Namespace] = {}
_NAMESPACES_LOCK = threading.Lock()


def _namespace(name: str) -> _Namespace:
    with _NAMESPACES_LOCK:
        return _NAMESPACES.setdefault(name, _Namespace())


class MemoryTokenStore:
    """A sink and source whose records live in this process's memory.

    Instances built with the same ``namespace`` in one process share their records, so a
    fresh instance sees what another one stored. Nothing reaches another process: this store
    cannot serve spawned workers, and a kit run against it needs
    ``--tokcap-capability=process-local``.

    Promises, per rollout:

    * ``put`` of a new call before ``freeze`` stores a private copy and bumps the version; an
      identical re-put is a no-op at any time; a different payload under a known call id
      marks the rollout incomplete and raises :class:`ConflictingEntryError`; a new call after
      ``freeze`` raises :class:`RolloutFrozenError` (strict fence).
    * ``mark_incomplete`` is sticky, bumps the version and works after ``freeze``.
    * ``begin_call`` records an intent; an intent without an entry at freeze time makes the
      snapshot incomplete.
    * ``freeze`` fences the rollout, even one never written, and returns deep copies; with no
      change in between it returns the same ``snapshot_id`` and ``version``.
    * ``drop`` retires only the exact frozen state; ``retire`` retires whatever the state;
      ``delete`` forgets the rollout entirely so its id can be reused.
    * After ``drop`` or ``retire`` every write and every freeze raises
      :class:`RolloutRetiredError`.
    """

    def __init__(self, namespace: str = "default") -> None:
        if not isinstance(namespace, str):
            raise TypeError(f"namespace must be a str, got {type(namespace).__name__}")
        self.namespace = namespace
        self._shared = _namespace(namespace)

    def _live(self, rollout_id: object) -> _Rollout:
        """Return the rollout's state, creating it; raise if it was retired. Hold the lock."""
        checked = validate_rollout_id(rollout_id)
        if checked in self._shared.retired:
            raise RolloutRetiredError.for_rollout(checked)
        return self._shared.rollouts.setdefault(checked, _Rollout())

    async def put(self, entry: TokenEntry) -> None:
        """Store ``entry``; refuse conflicts, new calls after freeze and retired rollouts."""
        with refusing_invalid(entry):
            entry = as_token_entry(entry)
            payload = entry.checked_json_bytes()
        with self._shared.lock:
            rollout = self._live(entry.rollout_id)
            known = rollout.payloads.get(entry.model_call_id)
            if known == payload:
                return
            if known is not None:
                rollout.incomplete = True
                rollout.changed()
                raise ConflictingEntryError(
                    f"rollout {entry.rollout_id!r}: model_call_id {entry.model_call_id!r} was "
                    "already stored with a different payload; expected an identical re-put. "
                    "The rollout is now marked incomplete"
                )
            if rollout.frozen:
                raise RolloutFrozenError.for_call(entry.rollout_id, entry.model_call_id)
            rollout.entries[entry.model_call_id] = _copied(entry)
            rollout.payloads[entry.model_call_id] = payload
            rollout.changed()

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        """Mark the rollout incomplete for good and bump its version, frozen or not."""
        if not isinstance(model_call_id, str):
            raise TypeError(f"model_call_id must be a str, got {type(model_call_id).__name__}")
        with self._shared.lock:
            rollout = self._live(rollout_id)
            rollout.incomplete = True
            rollout.changed()

    async def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        """Record that ``model_call_id`` started; a known call id is a no-op."""
        call_id = validate_call_id(model_call_id)
        with self._shared.lock:
            rollout = self._live(rollout_id)
            if call_id in rollout.intents or call_id in rollout.entries:
                return
            if rollout.frozen:
                raise RolloutFrozenError.for_call(rollout_id, call_id)
            rollout.intents.add(call_id)
            rollout.changed()

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        """Fence the rollout and return a snapshot of deep copies of its entries."""
        with self._shared.lock:
            rollout = self._live(rollout_id)
            rollout.frozen = True
            if not rollout.snapshot_id:
                rollout.snapshot_id = uuid.uuid4().hex
            missing = rollout.intents.difference(rollout.entries)
            return TokenCaptureSnapshot(
                rollout_id=rollout_id,
                entries=tuple(_copied(entry) for entry in rollout.entries.values()),
                incomplete=rollout.incomplete or bool(missing),
                snapshot_id=rollout.snapshot_id,
                version=rollout.version,
            )

    async def peek(self, rollout_id: str) -> tuple[TokenEntry, ...]:
        """Deep copies of the entries ``rollout_id`` holds now, without fencing it.

        A rollout never written, or retired, holds none; nothing changes.
        """
        checked = validate_rollout_id(rollout_id)
        with self._shared.lock:
            rollout = self._shared.rollouts.get(checked)
            entries = () if rollout is None else tuple(rollout.entries.values())
            return tuple(_copied(entry) for entry in entries)

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        """Retire the rollout if it is frozen at exactly this snapshot; else destroy nothing."""
        checked = validate_rollout_id(rollout_id)
        with self._shared.lock:
            rollout = self._shared.rollouts.get(checked)
            if (
                rollout is None
                or not rollout.snapshot_id
                or rollout.snapshot_id != snapshot_id
                or type(version) is not int
                or rollout.version != version
            ):
                return False
            del self._shared.rollouts[checked]
            self._shared.retired.add(checked)
            return True

    async def retire(self, rollout_ids: Iterable[str]) -> None:
        """Remove and fence each rollout whatever its state; repeating it is a no-op."""
        checked = validate_rollout_ids(rollout_ids)
        with self._shared.lock:
            for rollout_id in checked:
                self._shared.rollouts.pop(rollout_id, None)
                self._shared.retired.add(rollout_id)

    async def delete(self, rollout_ids: Iterable[str]) -> None:
        """Forget each rollout, records and fence alike, so its id starts from scratch."""
        checked = validate_rollout_ids(rollout_ids)
        with self._shared.lock:
            for rollout_id in checked:
                self._shared.rollouts.pop(rollout_id, None)
                self._shared.retired.discard(rollout_id)

    async def close(self) -> None:
        """Do nothing: the records belong to the process, not to this instance. Idempotent."""


_NUMBERS = (int, float)
_TOKEN_LISTS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")


def _copied(entry: TokenEntry) -> TokenEntry:
    """A deep copy of ``entry``, made without walking its token lists value by value.

    A list of ints and floats shares nothing mutable, so a new list is a deep copy of it;
    every other field and every unknown field is deep-copied as it is. A freeze of long-context
    calls then holds the event loop a fraction of what a full ``deepcopy`` takes.
    """
    fields = dict(entry.__dict__)
    fields.update(entry.__pydantic_extra__ or {})
    copied = {}
    for name, value in fields.items():
        flat = name in _TOKEN_LISTS and type(value) is list
        if flat and all(type(each) in _NUMBERS for each in value):
            copied[name] = list(value)
        else:
            copied[name] = copy.deepcopy(value)
    return entry.model_copy(update=copied)
