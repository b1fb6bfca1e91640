"""The contract's semantics over a directory of rollout logs, as blocking calls.

:class:`LogDirectory` is used by one thread at a time (the store's writer thread). Processes
and other instances sharing the directory are kept apart by each log's lock, so every method
sees the state every acknowledged write left behind. A lock held elsewhere makes a method raise
:class:`~reference._file_log.RolloutLockBusy` before it changes anything, so the caller can try
again later without blocking other rollouts.
"""

from __future__ import annotations

import base64
import logging
import math
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Sequence
from contextlib import suppress
from dataclasses import dataclass

from reference._file_log import (
    LogCut,
    OwedSync,
    RolloutLockBusy,
    RolloutLog,
    is_temporary_name,
    rollout_id_of,
)
from reference._file_packed import CheckedEntry
from reference._file_records import (
    Record,
    blob_record,
    entry_record,
    freeze_record,
    intent_record,
    mark_record,
    packed_record,
)
from tokcap_spec.errors import (
    ConflictingEntryError,
    RolloutFrozenError,
    RolloutRetiredError,
    StoreWriteError,
    TokenCaptureError,
)
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry

__all__ = ["OPEN_LOG_LIMIT", "FencedRollout", "LogDirectory"]

OPEN_LOG_LIMIT = 256
"""How many rollout logs one instance keeps open between calls.

A log closed to make room is read again from its start when next used, so this should exceed
the number of rollouts a server writes at once (128 concurrent rollouts put 2-3x faster with
256 than with 64); each open log holds one file descriptor.
"""

_TOMBSTONE_SIZE_LIMIT = 1024
_LOGGER = logging.getLogger("reference.file_store")


@dataclass(frozen=True)
class FencedRollout:
    """A rollout as its fence found it: the state then, and its log up to then."""

    rollout_id: str
    cut: LogCut
    incomplete: bool
    snapshot_id: str
    version: int

    def snapshot(self) -> TokenCaptureSnapshot:
        """Read the entries (on any thread, once) and return the snapshot of the fence."""
        return self._snapshot(self.cut.entries())

    def snapshot_in_steps(self) -> Generator[None, None, TokenCaptureSnapshot]:
        """Do what :meth:`snapshot` does one entry at a time, yielding between entries."""
        entries = yield from self.cut.read_in_steps()
        return self._snapshot(entries)

    def _snapshot(self, entries: list[TokenEntry]) -> TokenCaptureSnapshot:
        return TokenCaptureSnapshot(
            rollout_id=self.rollout_id,
            entries=tuple(entries),
            incomplete=self.incomplete,
            snapshot_id=self.snapshot_id,
            version=self.version,
        )


class LogDirectory:
    """Every rollout log under ``root``; each method is one locked step on one rollout.

    ``clock`` dates tombstones and decides which are old enough to sweep; ``mode`` is the
    permission of every file created; ``lock_timeout`` bounds the one wait done here, for the
    lock that marks a rollout whose sync failed.
    """

    def __init__(
        self,
        root: str,
        clock: Callable[[], float] = time.time,
        *,
        mode: int = 0o600,
        lock_timeout: float = 10.0,
    ) -> None:
        self._root = root
        self._clock = clock
        self._mode = mode
        self._lock_timeout = lock_timeout
        self._dir_fd = -1
        self._logs: OrderedDict[str, RolloutLog] = OrderedDict()

    def close(self) -> None:
        """Close every open log and the directory; a later call opens them again."""
        while self._logs:
            self._logs.popitem()[1].close()
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1

    def _directory(self) -> int:
        if self._dir_fd < 0:
            try:
                self._dir_fd = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                raise StoreWriteError(
                    exc.errno, f"{self._root}: could not open the store's directory: {exc}"
                ) from exc
        return self._dir_fd

    def _log(self, rollout_id: str) -> RolloutLog:
        log = self._logs.get(rollout_id)
        if log is None:
            log = RolloutLog(self._directory(), self._root, rollout_id, self._mode)
            self._logs[rollout_id] = log
            if len(self._logs) > OPEN_LOG_LIMIT:
                self._logs.popitem(last=False)[1].close()
        else:
            self._logs.move_to_end(rollout_id)
        return log

    def put(
        self, rollout_id: str, items: Sequence[tuple[str, bytes | CheckedEntry | None]]
    ) -> list[Exception | None]:
        """Store each ``(model_call_id, payload)`` in order; return each one's error or None.

        :meth:`append_entries`, then its owed sync; raises :class:`StoreWriteError` if the
        records cannot be written (they are cut off again) or synced (the rollout is then
        marked incomplete, if the disk takes the mark, since the records stay and may not be
        durable).
        """
        outcomes, owed = self.append_entries(rollout_id, items)
        if owed is not None:
            try:
                owed.run()
            except StoreWriteError:
                self.mark_unsynced(rollout_id, owed.epoch)
                raise
        return outcomes

    def append_entries(
        self, rollout_id: str, items: Sequence[tuple[str, bytes | CheckedEntry | None]]
    ) -> tuple[list[Exception | None], OwedSync | None]:
        """Append each ``(model_call_id, payload)`` under the lock; return outcomes and the sync.

        A payload is a checked entry, stored in the form the log's format takes, or the
        canonical JSON of one, stored as JSON; None announces the call (``begin_call``: a known
        call is a no-op, a new one after the fence is refused). A conflicting re-put durably
        marks the rollout incomplete and reports :class:`ConflictingEntryError`. The accepted
        records are not durable until the returned sync has run (None when nothing is owed);
        whoever runs it calls :meth:`mark_unsynced` if it fails. Puts waiting for one sync
        share it.
        """
        log = self._log(rollout_id)
        with log.locked(create=True):
            state = log.state
            if state.retired:
                return [RolloutRetiredError.for_rollout(rollout_id) for _ in items], None
            records: list[Record] = []
            added: dict[str, bytes] = {}
            announced: set[str] = set()
            outcomes: list[Exception | None] = []
            for call, payload in items:
                if payload is None:
                    if any(
                        call in known for known in (state.intents, state.digests, added, announced)
                    ):
                        outcomes.append(None)
                    elif state.frozen:
                        outcomes.append(RolloutFrozenError.for_call(rollout_id, call))
                    else:
                        records.append(intent_record(call))
                        announced.add(call)
                        outcomes.append(None)
                    continue
                record = _entry_record(call, payload, log_format=state.format)
                known = state.digests.get(call) or added.get(call)
                if known is not None:
                    if known == record.payload_digest:
                        outcomes.append(None)
                        continue
                    records.append(mark_record(call, "conflicting re-put"))
                    outcomes.append(
                        ConflictingEntryError(
                            f"rollout {rollout_id!r} already holds a different entry for "
                            f"model_call_id {call!r}; the rollout is now marked incomplete"
                        )
                    )
                elif state.frozen:
                    outcomes.append(RolloutFrozenError.for_call(rollout_id, call))
                else:
                    records.append(record)
                    added[call] = record.payload_digest
                    outcomes.append(None)
            if not (records and log.append(records, sync=False)):
                return outcomes, None
            if log.creating:
                # A new log: the sync (or, failing a descriptor, this thread) syncs its name too.
                return outcomes, log.owe_sync()
            try:
                return outcomes, log.owe_sync()
            except StoreWriteError:
                epoch = state.epoch
        # No descriptor for a sync elsewhere: sync here, once the lock is released.
        try:
            log.sync_appended()
        except StoreWriteError:
            self.mark_unsynced(rollout_id, epoch)
            raise
        return outcomes, None

    def mark_unsynced(self, rollout_id: str, epoch: str) -> None:
        """Mark the rollout incomplete after a failed sync, where the disk still takes a mark.

        Records whose sync failed may or may not survive, so this fails closed, unless the
        incarnation ``epoch`` they were written to is gone (dropped, retired or deleted).
        """
        log = self._log(rollout_id)
        wait = self._lock_timeout
        with (
            suppress(TokenCaptureError, RolloutLockBusy),
            log.locked(create=False, wait=wait) as exists,
        ):
            if exists and not log.state.retired and log.state.epoch == epoch:
                log.append([mark_record("", "a sync of appended records failed")])

    def mark_incomplete(self, rollout_id: str, model_call_id: str) -> None:
        """Durably mark the rollout incomplete, frozen or not."""
        log = self._log(rollout_id)
        with log.locked(create=True):
            if log.state.retired:
                raise RolloutRetiredError.for_rollout(rollout_id)
            log.append([mark_record(model_call_id, "mark_incomplete")])

    def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        """Durably announce a call; a known call is a no-op, a new one after freeze raises."""
        (outcome,) = self.put(rollout_id, [(model_call_id, None)])
        if outcome is not None:
            raise outcome

    def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        """Fence the rollout durably and return what it holds now."""
        return self.fence(rollout_id).snapshot()

    def fence(self, rollout_id: str) -> FencedRollout:
        """Fence the rollout durably; return its state now and its log as it is now.

        Reading the entries (:meth:`FencedRollout.snapshot`) needs no lock: a fenced log only
        gains marks, and what it held at the fence never changes.
        """
        log = self._log(rollout_id)
        with log.locked(create=True):
            state = log.state
            if state.retired:
                raise RolloutRetiredError.for_rollout(rollout_id)
            if not state.frozen:
                log.append([freeze_record()])
            return FencedRollout(
                rollout_id, log.cut(), state.incomplete, state.snapshot_id, state.version
            )

    def peek(self, rollout_id: str) -> LogCut | None:
        """The rollout's log as it is now, without fencing it; None if it has none or is retired.

        Like a fence's cut, it is read without the lock: what a log held never changes.
        """
        log = self._log(rollout_id)
        with log.locked(create=False) as exists:
            if not exists or log.state.retired:
                return None
            return log.cut()

    def drop(self, rollout_id: str, snapshot_id: str, version: int) -> bool:
        """Tombstone the rollout if it is frozen at exactly this snapshot; say whether it was."""
        log = self._log(rollout_id)
        with log.locked(create=False) as exists:
            state = log.state
            if not exists or state.retired or not state.frozen:
                return False
            if type(version) is not int or version != state.version:
                return False
            if snapshot_id != state.snapshot_id:
                return False
            log.replace_with_tombstone("drop", self._clock())
            return True

    def retire(self, rollout_id: str) -> None:
        """Tombstone the rollout whatever its state; an existing tombstone is kept as it is."""
        log = self._log(rollout_id)
        with log.locked(create=True):
            if not log.state.retired:
                log.replace_with_tombstone("retire", self._clock())

    def delete(self, rollout_id: str) -> None:
        """Remove the rollout's log or tombstone, so the id starts again from nothing."""
        log = self._log(rollout_id)
        with log.locked(create=False) as exists:
            if exists:
                log.remove()

    def sweep_tombstones(self, older_than_seconds: float) -> int:
        """Remove tombstones written more than ``older_than_seconds`` ago; return how many.

        Only names the store itself creates are touched: tombstones at a log's name, and
        leftover temporary files of interrupted drops that old (removed, not counted). A file
        that cannot be read or trusted, or whose lock is held elsewhere, is reported as a
        warning on the ``reference.file_store`` logger and left alone; the sweep goes on.
        """
        if not math.isfinite(older_than_seconds) or older_than_seconds < 0:
            raise ValueError(
                f"older_than_seconds must be a finite number >= 0, got {older_than_seconds!r}"
            )
        cutoff = self._clock() - older_than_seconds
        dir_fd = self._directory()
        try:
            names = os.listdir(dir_fd)
        except OSError as exc:
            raise StoreWriteError(
                exc.errno, f"{self._root}: could not list the store's directory: {exc}"
            ) from exc
        removed = 0
        for name in names:
            try:
                if is_temporary_name(name):
                    _remove_stale(dir_fd, name, cutoff)
                    continue
                rollout_id = rollout_id_of(name)
                if rollout_id is None or not _small_regular_file(dir_fd, name):
                    continue
                log = self._log(rollout_id)
                with log.locked(create=False) as exists:
                    if exists and log.state.retired and log.state.retired_at < cutoff:
                        log.remove()
                        removed += 1
            except (OSError, TokenCaptureError, RolloutLockBusy) as exc:
                _LOGGER.warning("sweep_tombstones left %s as it is: %s", name, exc)
        return removed


def _entry_record(call: str, payload: bytes | CheckedEntry, *, log_format: int) -> Record:
    """Return the record of one entry in the form a log of ``log_format`` keeps it in."""
    if isinstance(payload, bytes):
        return entry_record(call, payload)
    if payload.packed is not None and log_format >= 3:
        rest, raw = payload.packed
        if log_format >= 4:
            return blob_record(call, rest, raw)
        return packed_record(call, rest, base64.b64encode(raw))
    return entry_record(call, payload.json_bytes())


def _small_regular_file(dir_fd: int, name: str) -> bool:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size <= _TOMBSTONE_SIZE_LIMIT


def _remove_stale(dir_fd: int, name: str, cutoff: float) -> None:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISREG(info.st_mode) and info.st_mtime < cutoff:
            os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
