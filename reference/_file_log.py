"""One rollout's append-only log file, shared by every process that opens the same directory.

Every read and write happens under an exclusive ``flock`` of the log file; only the sync of a
put's records may follow once the lock is released (see :meth:`RolloutLog.append`). A drop or
retire replaces the file by a tombstone (atomic rename) and a delete unlinks it, so whoever
takes the lock checks that the path still names the inode it locked and reopens when it does
not. While locked, the log first catches up: it reads only the bytes appended since it last
looked, cuts a torn final line (a writer that died mid-append) and replays the rest.

Nothing here follows a symlink or trusts a file the store did not make: files are opened
relative to the directory's descriptor with ``O_NOFOLLOW``, and anything but a regular file with
exactly one link (a hard link may lead outside the directory) is refused before a byte of it is
cut or written. A lock is only ever tried, never waited for here: a lock held elsewhere raises
:class:`RolloutLockBusy` at once, so the caller decides how long to wait and what else to do
meanwhile. Every ``OSError`` leaves as a :class:`~tokcap_spec.errors.StoreWriteError` naming the
file and what was being done.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import stat
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TypeVar

from reference._file_packed import unpack_base64_entry, unpack_entry
from reference._file_records import (
    BLOB,
    ENTRY,
    PACKED,
    IncompleteFrame,
    Record,
    ReplayedRollout,
    has_checksum,
    open_record,
    parse_frame,
    tombstone_record,
)
from tokcap_spec.errors import CorruptStoreError, StoreWriteError
from tokcap_spec.records import TokenEntry

__all__ = [
    "LogCut",
    "OwedSync",
    "RolloutLockBusy",
    "RolloutLockTimeoutError",
    "RolloutLog",
    "is_temporary_name",
    "log_name",
    "rollout_id_of",
    "sync_directory",
]

_OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_SUFFIX = ".log"
# Each retry means another process replaced the file in between; this many in a row does not
# happen on a file system whose stat and fstat agree.
_REOPEN_LIMIT = 1000
_HEADER_START = b'{"epoch":"'
_TEMPORARY = re.compile(r"\.(?P<log>.+)\.[0-9]+\.[0-9a-f]{12}\.tmp")
T = TypeVar("T")

_FIRST_WAIT = 0.0005
_LONGEST_WAIT = 0.02


class RolloutLockBusy(Exception):
    """Another process or instance holds a rollout's lock right now; nothing was done."""

    def __init__(self, rollout_id: str, path: str) -> None:
        super().__init__(f"{path}: the lock of rollout {rollout_id!r} is held elsewhere")
        self.rollout_id = rollout_id
        self.path = path


class RolloutLockTimeoutError(StoreWriteError):
    """A rollout's lock stayed held elsewhere for longer than the store waits; nothing was done."""

    @classmethod
    def after(cls, busy: RolloutLockBusy, seconds: float) -> RolloutLockTimeoutError:
        """Return the error for waiting ``seconds`` in vain for the lock ``busy`` found held."""
        return cls(
            errno.ETIMEDOUT,
            f"rollout {busy.rollout_id!r}: its lock file {busy.path} stayed locked by another "
            f"process or instance for {seconds:g} s; nothing was written. Find the holder "
            "(for example with `fuser` or `lsof`) or raise lock_timeout",
        )


def _sync_data(fd: int) -> None:
    # Looked up on each call, so that tests can inject faults through ``os``.
    getattr(os, "fdatasync", os.fsync)(fd)


def log_name(rollout_id: str) -> str:
    """Return the file name of ``rollout_id``'s log.

    The digest suffix keeps ids that differ only by case apart on case-insensitive file systems.
    """
    tag = hashlib.sha256(rollout_id.encode("utf-8")).hexdigest()[:12]
    return f"{rollout_id}.{tag}{_SUFFIX}"


def rollout_id_of(name: str) -> str | None:
    """Return the rollout id whose log is called ``name``, or None for any other file name."""
    if name.startswith(".") or not name.endswith(_SUFFIX):
        return None
    rollout_id = name[: -len(_SUFFIX)].rpartition(".")[0]
    return rollout_id if rollout_id and log_name(rollout_id) == name else None


def is_temporary_name(name: str) -> bool:
    """Return whether ``name`` is a temporary file this store makes while writing a tombstone."""
    match = _TEMPORARY.fullmatch(name)
    return match is not None and rollout_id_of(match["log"]) is not None


def temporary_name(rollout_id: str) -> str:
    """Return a fresh name for a temporary file beside ``rollout_id``'s log."""
    return f".{log_name(rollout_id)}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"


def sync_directory(dir_fd: int) -> None:
    """Make the directory's entries (created, renamed or removed files) durable."""
    os.fsync(dir_fd)


def refuse_foreign(path: str, info: os.stat_result) -> None:
    """Raise :class:`CorruptStoreError` unless ``info`` is a regular file with a single link."""
    if not stat.S_ISREG(info.st_mode):
        raise CorruptStoreError(
            f"{path}: expected a regular file, found mode {stat.filemode(info.st_mode)}"
        )
    if info.st_nlink != 1:
        raise CorruptStoreError(
            f"{path}: expected a file with one link, as the store creates, found "
            f"{info.st_nlink} links; another name may lead to a file outside the store, so "
            "nothing is read from or written to it"
        )


class RolloutLog:
    """The log of one rollout in one directory, as seen by one thread of one process.

    ``state`` is valid only inside :meth:`locked`, where it reflects every complete record.
    """

    def __init__(self, dir_fd: int, root: str, rollout_id: str, mode: int = 0o600) -> None:
        self._dir_fd = dir_fd
        self._mode = mode
        self.name = log_name(rollout_id)
        self.path = os.path.join(root, self.name)
        self.rollout_id = rollout_id
        self.state = ReplayedRollout(rollout_id)
        self._fd = -1
        self._identity = (0, 0)
        self._offset = 0
        self._size = 0
        self._replaced = False
        # A new log whose first records await their sync on another thread stays locked until
        # that sync has run (see :meth:`owe_sync`); a failed one cut them off: replay anew.
        self._creating = False
        self._stale = False

    @property
    def creating(self) -> bool:
        """Whether the first records of this new log still await the sync of its name."""
        return self._creating

    def close(self) -> None:
        """Release the file descriptor; the next :meth:`locked` reopens the file.

        A log whose creation sync is still owed keeps its lock: the sync releases it.
        """
        if self._fd >= 0:
            # A forked child may share this open file; only an explicit unlock frees the lock.
            if not self._creating:
                with suppress(OSError):
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
            with suppress(OSError):
                os.close(self._fd)
        self._fd = -1
        self._identity = (0, 0)
        self._offset = 0
        self.state = ReplayedRollout(self.rollout_id)

    @contextmanager
    def locked(self, *, create: bool, wait: float = 0.0) -> Iterator[bool]:
        """Hold the rollout's lock, caught up with every complete record; yield whether it exists.

        With ``create`` a missing log is created empty; without it a missing log is left missing
        (and yields False). If the lock is held elsewhere, it is tried again for up to ``wait``
        seconds; then :class:`RolloutLockBusy` is raised (at once when ``wait`` is 0). Raises
        :class:`CorruptStoreError` for damage before the tail or for anything at the log's name
        that is not a regular file with one link, before anything in it is changed.
        """
        if not self._acquire(create, wait):
            yield False
            return
        try:
            self._catch_up()
            yield True
        finally:
            if self._replaced:
                self._replaced = False
                self.close()
            elif self._fd >= 0 and not self._creating:
                with suppress(OSError):
                    fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _lock(self, wait: float) -> None:
        deadline = time.monotonic() + wait
        pause = _FIRST_WAIT
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RolloutLockBusy(self.rollout_id, self.path) from None
            except OSError as exc:
                self.close()
                raise StoreWriteError(
                    exc.errno, f"{self.path}: could not lock the log: {exc}"
                ) from exc
            # flock has no timeout; a short, growing pause bounds both the wait and the spin.
            time.sleep(min(pause, left))
            pause = min(2 * pause, _LONGEST_WAIT)

    def _acquire(self, create: bool, wait: float) -> bool:
        if self._creating:
            # This open file holds the lock for the creation sync; flock would not refuse it.
            raise RolloutLockBusy(self.rollout_id, self.path)
        if self._stale:
            self._stale = False
            self.close()
        for _ in range(_REOPEN_LIMIT):
            if self._fd < 0 and not self._open(create):
                return False
            self._lock(wait)
            try:
                current = os.stat(self.name, dir_fd=self._dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                current = None
            except OSError as exc:
                self.close()
                raise StoreWriteError(
                    exc.errno, f"{self.path}: could not stat the log: {exc}"
                ) from exc
            if current is not None and (current.st_dev, current.st_ino) == self._identity:
                try:
                    refuse_foreign(self.path, current)
                except CorruptStoreError:
                    self.close()
                    raise
                # The name names the locked inode, so this is its size: no fstat needed.
                self._size = current.st_size
                return True
            self.close()
        raise CorruptStoreError(
            f"{self.path}: the file at this name changed every time it was locked "
            f"({_REOPEN_LIMIT} attempts); the file system may not report stable inode numbers"
        )

    def _open(self, create: bool) -> bool:
        flags = _OPEN_FLAGS | (os.O_CREAT if create else 0)
        try:
            fd = os.open(self.name, flags, self._mode, dir_fd=self._dir_fd)
        except FileNotFoundError:
            return False
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):
                raise CorruptStoreError(
                    f"{self.path}: expected a regular file, found a symlink; refusing to follow it"
                ) from None
            if exc.errno in (errno.EISDIR, errno.ENXIO, errno.EOPNOTSUPP):
                raise CorruptStoreError(
                    f"{self.path}: expected a regular file, found something else ({exc.strerror})"
                ) from None
            raise StoreWriteError(exc.errno, f"{self.path}: could not open the log: {exc}") from exc
        try:
            info = os.fstat(fd)
            refuse_foreign(self.path, info)
        except OSError as exc:
            os.close(fd)
            raise StoreWriteError(exc.errno, f"{self.path}: could not stat the log: {exc}") from exc
        except CorruptStoreError:
            os.close(fd)
            raise
        self._fd = fd
        self._identity = (info.st_dev, info.st_ino)
        self._offset = 0
        self.state = ReplayedRollout(self.rollout_id)
        return True

    def _catch_up(self) -> None:
        size = self._size
        if size < self._offset:
            raise CorruptStoreError(
                f"{self.path}: shrank to {size} bytes below the {self._offset} bytes "
                "already read; it was truncated outside the store"
            )
        if size == self._offset:
            return
        data = self._read(self._offset, size - self._offset)
        # A first line that is not the store's own header is never cut: the file may not be
        # one the store wrote.
        if self._offset == 0 and b"\n" not in data and not _could_be_header(data):
            raise CorruptStoreError(
                f"{self.path}: holds {len(data)} bytes without a newline that do not begin a log "
                "header; this is not a file the store wrote, so it is left as it is"
            )
        # Every complete record is checked before a torn tail is cut.
        start = 0
        while start < len(data) and (end := self._apply(data, start)) is not None:
            self._offset += end - start
            start = end
        if start < len(data):
            # Appends happen under the lock, so an unterminated tail is a writer that died.
            try:
                os.ftruncate(self._fd, self._offset)
                os.fsync(self._fd)
            except OSError as exc:
                raise StoreWriteError(
                    exc.errno, f"{self.path}: could not cut off a torn final line: {exc}"
                ) from exc

    def _read(self, offset: int, size: int) -> bytes:
        try:
            return _read(self._fd, offset, size)
        except OSError as exc:
            raise StoreWriteError(
                exc.errno, f"{self.path}: could not read {size} bytes at offset {offset}: {exc}"
            ) from exc

    def _apply(self, data: bytes, start: int) -> int | None:
        """Replay the record at ``start``; return where it ends, or None if ``data`` does first."""
        state = self.state
        if not state.lines:
            newline = data.find(b"\n", start)
            if newline < 0:
                return None
            state.sealed = has_checksum(data[start : newline + 1])
        try:
            record, end = parse_frame(
                data, start, sealed=state.sealed, blobs=state.format >= 4 and state.opened
            )
            state.apply(record)
        except IncompleteFrame:
            return None
        except ValueError as exc:
            raise CorruptStoreError(
                f"{self.path}: line {self.state.lines + 1} is not a valid record: {exc}"
            ) from None
        return end

    def append(self, records: Sequence[Record], *, sync: bool = True) -> bool:
        """Append ``records`` (the header first if the log has none) and replay them.

        Call only inside :meth:`locked`. With ``sync`` the records are durable on return. Without
        it, they are written and True is returned: a sync is owed, and the records are not
        durable until it has run. The caller takes it with :meth:`owe_sync` (or, if that is
        refused, runs :meth:`sync_appended` once the lock is released). Syncing outside the
        lock lets processes appending to one rollout share their syncs. A new log's first
        records owe a sync of its directory entry too, and the log stays locked until that has
        run: nobody reads a record whose file name a crash could still lose. On failure nothing
        is replayed, the bytes are cut off again where possible, and :class:`StoreWriteError` is
        raised.
        """
        first = not self.state.opened
        if first:
            records = [open_record(self.rollout_id, uuid.uuid4().hex), *records]
        # A new log is sealed (format 2); one begun in format 1 stays in format 1.
        sealed = first or self.state.sealed
        data = b"".join(record.encode(sealed=sealed) for record in records)
        try:
            _write(self._fd, data, self._offset)
            if sync:
                _sync_data(self._fd)
                if first:
                    sync_directory(self._dir_fd)
        except OSError as exc:
            with suppress(OSError):
                os.ftruncate(self._fd, self._offset)
            self._replaced = True
            raise StoreWriteError(
                exc.errno, f"{self.path}: could not append {len(data)} bytes durably: {exc}"
            ) from exc
        for record in records:
            self.state.apply(record)
        self._offset += len(data)
        self._creating = first and not sync
        return not sync

    def sync_appended(self) -> None:
        """Make what :meth:`append` wrote without ``sync`` durable; call after the lock is released.

        The sync covers every byte of the file, so one process's sync also makes durable what
        others appended before it. Raises :class:`StoreWriteError` if the sync fails: the
        records stay in the log (others may already have read them, so they cannot be cut off)
        with their durability unknown.
        """
        _sync_appended(self._fd, self.path)

    def owe_sync(self) -> OwedSync | None:
        """Return the sync :meth:`append` without ``sync`` left owed, to take on any thread.

        It holds a descriptor of its own, so closing or reopening this log meanwhile does not
        disturb it. Raises :class:`StoreWriteError` if no descriptor can be had. For a new
        log's first records it also syncs the directory and then releases the lock this log
        still holds; if it cannot have descriptors for that, the creation is synced here and
        None returned (on failure the records are cut off again and StoreWriteError raised).
        """
        if not self._creating:
            return OwedSync(
                self._own_descriptor("for its sync"), self.path, self.rollout_id, self.state.epoch
            )
        fd = dir_fd = -1
        try:
            fd = self._own_descriptor("for its sync")
            dir_fd = _duplicate(self._dir_fd, self.path)
        except StoreWriteError:
            if fd >= 0:
                os.close(fd)
            self._creating = False
            self._sync_creation_here()
            return None
        return OwedSync(fd, self.path, self.rollout_id, self.state.epoch, creation=(self, dir_fd))

    def _sync_creation_here(self) -> None:
        """Sync a new log's first records and its directory entry under the lock."""
        try:
            _sync_data(self._fd)
            sync_directory(self._dir_fd)
        except OSError as exc:
            with suppress(OSError):
                os.ftruncate(self._fd, 0)
            self._replaced = True
            raise StoreWriteError(
                exc.errno, f"{self.path}: could not sync a new log's first records: {exc}"
            ) from exc

    def _created(self, synced: bool) -> None:
        """Called by the creation sync once it has run (on its thread), before it unlocks."""
        if not synced:
            self._stale = True

    def entries(self) -> list[TokenEntry]:
        """Return one fresh entry per call id, in log order (call only inside :meth:`locked`).

        See :meth:`LogCut.entries`.
        """
        return self.cut().entries()

    def cut(self) -> LogCut:
        """Return the log as it is now, to read on any thread (call only inside :meth:`locked`).

        Raises :class:`StoreWriteError` if no descriptor of its own can be had for it.
        """
        fd = self._own_descriptor("to read it")
        state = self.state
        return LogCut(fd, self.path, self.rollout_id, self._offset, state.sealed, state.format)

    def _own_descriptor(self, purpose: str) -> int:
        try:
            return os.dup(self._fd)
        except OSError as exc:
            raise StoreWriteError(
                exc.errno, f"{self.path}: could not hold the log open {purpose}: {exc}"
            ) from exc

    def replace_with_tombstone(self, reason: str, at: float) -> None:
        """Atomically replace the log by a tombstone; call only inside :meth:`locked`."""
        record = tombstone_record(self.rollout_id, reason, at)
        temporary = temporary_name(self.rollout_id)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(temporary, flags, self._mode, dir_fd=self._dir_fd)
            try:
                _write(fd, record.encode(sealed=True), 0)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temporary, self.name, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
            sync_directory(self._dir_fd)
        except OSError as exc:
            with suppress(OSError):
                os.unlink(temporary, dir_fd=self._dir_fd)
            raise StoreWriteError(
                exc.errno, f"{self.path}: could not replace the log by a tombstone: {exc}"
            ) from exc
        self._replaced = True

    def remove(self) -> None:
        """Unlink the log (or tombstone) durably; call only inside :meth:`locked`."""
        try:
            os.unlink(self.name, dir_fd=self._dir_fd)
            sync_directory(self._dir_fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreWriteError(exc.errno, f"{self.path}: could not remove it: {exc}") from exc
        self._replaced = True


class LogCut:
    """The first ``size`` bytes of a log, which appends never change: read once, on any thread.

    It holds a descriptor of its own, so the log may be appended to, closed or replaced while
    it is read.
    """

    def __init__(
        self, fd: int, path: str, rollout_id: str, size: int, sealed: bool, log_format: int
    ) -> None:
        self._fd = fd
        self.path = path
        self.rollout_id = rollout_id
        self.size = size
        self.sealed = sealed
        self.blobs = log_format >= 4

    def entries(self) -> list[TokenEntry]:
        """Return one fresh entry per call id, in log order, and release the descriptor.

        Every line is read again from the file, and its checksum checked again. Raises
        :class:`CorruptStoreError` naming the line of an entry that does not parse, and
        :class:`StoreWriteError` if the file cannot be read.
        """
        steps = self.read_in_steps()
        while True:
            try:
                next(steps)
            except StopIteration as done:
                entries: list[TokenEntry] = done.value
                return entries

    def read_in_steps(self) -> Generator[None, None, list[TokenEntry]]:
        """Do what :meth:`entries` does one entry at a time, yielding between entries.

        The generator's return value is the list :meth:`entries` returns; it raises what that
        raises. Whoever drives it may do other work between steps.
        """
        try:
            data = _read(self._fd, 0, self.size)
        except OSError as exc:
            raise StoreWriteError(
                exc.errno, f"{self.path}: could not read {self.size} bytes at offset 0: {exc}"
            ) from exc
        finally:
            os.close(self._fd)
        if len(data) < self.size:
            raise CorruptStoreError(
                f"{self.path}: shrank below the {self.size} bytes already read while being "
                "read; it was truncated outside the store"
            )
        entries: dict[str, TokenEntry] = {}
        start = number = 0
        while start < len(data):
            number += 1
            try:
                record, start = parse_frame(
                    data, start, sealed=self.sealed, blobs=self.blobs, identify=False
                )
            except ValueError as exc:
                raise CorruptStoreError(
                    f"{self.path}: line {number} changed since it was replayed: {exc}"
                ) from None
            if record.kind in (ENTRY, PACKED, BLOB):
                entry = self._entry(record, number)
                # A foreign writer's conflicting duplicate already marked the rollout; first wins.
                entries.setdefault(record.call, entry)
                yield
        return list(entries.values())

    def _entry(self, record: Record, number: int) -> TokenEntry:
        try:
            if record.kind == BLOB:
                entry = unpack_entry(record.payload, record.tokens)
            elif record.kind == PACKED:
                entry = unpack_base64_entry(record.payload, record.tokens)
            else:
                entry = TokenEntry.from_json_bytes(record.payload)
        except (ValueError, RecursionError) as exc:
            raise CorruptStoreError(
                f"{self.path}: line {number} holds an entry this reader refuses: {exc}"
            ) from None
        if entry.rollout_id != self.rollout_id:
            raise CorruptStoreError(
                f"{self.path}: line {number} holds an entry of rollout "
                f"{entry.rollout_id!r} in the log of {self.rollout_id!r}"
            )
        if entry.model_call_id != record.call:
            raise CorruptStoreError(
                f"{self.path}: line {number} files the entry of call "
                f"{entry.model_call_id!r} under call {record.call!r}"
            )
        return entry


class OwedSync:
    """The sync owed for records a log appended under its lock; run it once, on any thread."""

    def __init__(
        self,
        fd: int,
        path: str,
        rollout_id: str,
        epoch: str,
        *,
        creation: tuple[RolloutLog, int] | None = None,
    ) -> None:
        self._fd = fd
        self.path = path
        self.rollout_id = rollout_id
        self.epoch = epoch
        self._creation = creation

    def run(self) -> None:
        """Make the appended records durable; raise :class:`StoreWriteError` if that fails.

        On failure the records stay in the log (others may already have read them), their
        durability unknown; the caller marks the rollout (``LogDirectory.mark_unsynced``). A
        new log's first records are synced with its directory entry while the log is still
        locked, so nobody has read them: on failure they are cut off again, and the lock is
        released either way.
        """
        synced = False
        try:
            _sync_appended(self._fd, self.path)
            if self._creation is not None:
                _sync_new_name(self._creation[1], self.path)
            synced = True
        finally:
            if self._creation is not None:
                log, dir_fd = self._creation
                if not synced:
                    with suppress(OSError):
                        os.ftruncate(self._fd, 0)
                log._created(synced)
                with suppress(OSError):
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                # Only now may this process's own thread take the lock again (see _acquire).
                log._creating = False
                os.close(dir_fd)
            os.close(self._fd)


def _sync_appended(fd: int, path: str) -> None:
    _typed(lambda: _sync_data(fd), path, "sync the records just appended")


def _sync_new_name(dir_fd: int, path: str) -> None:
    _typed(lambda: sync_directory(dir_fd), path, "sync the directory entry of a new log")


def _duplicate(fd: int, path: str) -> int:
    return _typed(lambda: os.dup(fd), path, "hold the directory open for a sync")


def _typed(action: Callable[[], T], path: str, what: str) -> T:
    """Return what ``action`` returns; raise an ``OSError`` of it as a StoreWriteError."""
    try:
        return action()
    except OSError as exc:
        raise StoreWriteError(exc.errno, f"{path}: could not {what}: {exc}") from exc


def _could_be_header(data: bytes) -> bool:
    return data.startswith(_HEADER_START) or _HEADER_START.startswith(data)


def _read(fd: int, offset: int, size: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _write(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written
