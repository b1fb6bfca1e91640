"""The embedded default token store: one append-only log file per rollout in one directory.

:class:`FileTokenStore` is a :class:`~tokcap_spec.protocols.TokenSink` and a
:class:`~tokcap_spec.protocols.TokenSource` at once, with the ``begin_call`` and
``retire``/``delete`` extensions and a strict fence. Any number of instances, in any number of
threads and processes, may share one directory. The directory belongs on a local file system:
exclusion relies on ``flock`` and retirement on an atomic ``rename``, which network file systems
do not all honour.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from reference._file_log import RolloutLockTimeoutError
from reference._file_packed import check_entry
from reference._file_rollouts import LogDirectory
from reference._file_writer import DEFAULT_SHARDS, WriterThread
from tokcap_spec.errors import StoreWriteError
from tokcap_spec.ids import validate_call_id, validate_rollout_id, validate_rollout_ids
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry, as_token_entry, refusing_invalid

__all__ = ["FileTokenStore", "RolloutLockTimeoutError"]


def _file_mode(mode: object) -> int:
    """Return ``mode`` (an int, or a string of octal digits such as ``"0660"``) as an int."""
    if isinstance(mode, str):
        digits = mode.removeprefix("0o")
        if not digits or not set(digits) <= set("01234567"):
            raise ValueError("mode must be a permission such as 0o600 or the string '0660'")
        mode = int(digits, 8)
    if not isinstance(mode, int) or isinstance(mode, bool):
        kind = type(mode).__name__
        raise TypeError(f"mode must be an int or a string of octal digits, got {kind}")
    if mode & ~0o666 or mode & 0o600 != 0o600:
        raise ValueError(
            "mode must give the owner read and write and nothing beyond read and write "
            f"(within 0o666), got {mode:#o}"
        )
    return mode


def _directory_mode(file_mode: int) -> int:
    """Return the mode of a directory whose files have ``file_mode``: search wherever read."""
    return file_mode | (file_mode & 0o444) >> 2 | 0o700


class FileTokenStore:
    """A durable, multi-process token sink and source kept in the directory ``root``.

    Promises, for every instance sharing ``root`` in any thread or process:

    - ``put`` returns only once the entry is on disk. Re-putting identical bytes is a no-op;
      reusing a call id with other bytes marks the rollout incomplete and raises
      :class:`~tokcap_spec.errors.ConflictingEntryError`; a new call after ``freeze`` raises
      :class:`~tokcap_spec.errors.RolloutFrozenError` (strict fence). A put the disk refuses
      raises :class:`~tokcap_spec.errors.StoreWriteError`; if only its sync failed, the record
      may stay, so the rollout is marked incomplete where the disk still takes a mark.
    - ``mark_incomplete`` is durable and sticky, before or after ``freeze``, and changes the
      version.
    - ``freeze`` fences the rollout durably and returns the same ``snapshot_id`` and ``version``
      until the rollout changes.
    - ``drop`` retires only the exact frozen state, leaving a tombstone so that later writes
      raise :class:`~tokcap_spec.errors.RolloutRetiredError`; anything else returns False and
      destroys nothing. ``retire`` tombstones unconditionally; ``delete`` forgets the id.
    - Every rollout id is validated; entries round-trip byte for byte; no method blocks the
      event loop on disk I/O; a torn final line left by a crash is cut off on the next access;
      damage before the tail raises :class:`~tokcap_spec.errors.CorruptStoreError`; symlinks in
      the directory are never followed, and a file with more than one link is never read or
      written.
    - A missing ``root`` is created readable by its owner only and every file as ``mode``
      (default ``0o600``; ``0o660`` shares the store with the directory's group; the umask
      still applies). A lock held elsewhere for more than ``lock_timeout`` seconds fails the
      waiting calls of that rollout with :class:`RolloutLockTimeoutError`, naming the rollout
      and its lock file; other rollouts are served meanwhile. Any ``OSError`` is raised as a
      :class:`~tokcap_spec.errors.StoreWriteError` naming the file and what failed.
    - Up to ``writer_threads`` rollouts are written and synced at once.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        mode: int | str = 0o600,
        lock_timeout: float = 10.0,
        writer_threads: int = DEFAULT_SHARDS,
    ) -> None:
        if not isinstance(root, str | os.PathLike):
            raise TypeError(f"root must be a str or os.PathLike path, got {type(root).__name__}")
        path = os.fspath(root)
        if not isinstance(path, str) or not path:
            raise TypeError(f"root must name a directory as a non-empty str, got {path!r}")
        file_mode = _file_mode(mode)
        if not isinstance(lock_timeout, int | float) or not lock_timeout >= 0:
            raise ValueError("lock_timeout must be a number of seconds >= 0")
        if type(writer_threads) is not int or writer_threads < 1:
            raise ValueError("writer_threads must be an int >= 1")
        self.root = os.path.abspath(path)
        try:
            os.makedirs(self.root, mode=_directory_mode(file_mode), exist_ok=True)
        except OSError as exc:
            raise StoreWriteError(
                exc.errno, f"{self.root}: could not create the store's directory: {exc}"
            ) from exc
        self._writer = WriterThread(
            self.root,
            f"FileTokenStore({self.root})",
            mode=file_mode,
            lock_timeout=float(lock_timeout),
            shards=writer_threads,
        )

    def __repr__(self) -> str:
        return f"FileTokenStore(root={self.root!r})"

    async def put(self, entry: TokenEntry) -> None:
        """Store ``entry`` durably under its rollout; see the class promises."""
        with refusing_invalid(entry):
            checked = as_token_entry(entry)
            rollout_id = validate_rollout_id(checked.rollout_id)
            call = validate_call_id(checked.model_call_id)
            # An entry that skipped validation would make every later freeze refuse the rollout
            # once it was in the log, so it is refused before anything is acked; the check and
            # the serialization run on the writer thread, where they do not stall the event loop.
            await self._writer.put(rollout_id, call, lambda: check_entry(checked))

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        """Durably record that ``rollout_id`` lost evidence; every later freeze says incomplete."""
        rollout_id = validate_rollout_id(rollout_id)
        call = validate_call_id(model_call_id, allow_empty=True)
        await self._writer.run(lambda logs: logs.mark_incomplete(rollout_id, call), rollout_id)

    async def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        """Durably announce ``model_call_id``; a freeze before its entry arrives is incomplete."""
        rollout_id = validate_rollout_id(rollout_id)
        call = validate_call_id(model_call_id)
        await self._writer.begin_call(rollout_id, call)

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        """Fence ``rollout_id`` durably and return a snapshot of everything it holds."""
        rollout_id = validate_rollout_id(rollout_id)
        fenced = await self._writer.run(lambda logs: logs.fence(rollout_id), rollout_id)
        # Reading a large rollout back takes a while: in steps, other rollouts' puts go on.
        return await self._writer.run_in_steps(fenced.snapshot_in_steps(), rollout_id)

    async def peek(self, rollout_id: str) -> tuple[TokenEntry, ...]:
        """The entries ``rollout_id`` holds now, without fencing it: what lineage resolves from.

        A rollout never written, or retired, holds none. Nothing changes: later puts of new
        calls still land, and no snapshot is named.
        """
        rollout_id = validate_rollout_id(rollout_id)
        cut = await self._writer.run(lambda logs: logs.peek(rollout_id), rollout_id)
        if cut is None:
            return ()
        return tuple(await self._writer.run_in_steps(cut.read_in_steps(), rollout_id))

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        """Retire ``rollout_id`` if it is frozen at exactly this snapshot; say whether it was."""
        rollout_id = validate_rollout_id(rollout_id)
        return await self._writer.run(
            lambda logs: logs.drop(rollout_id, snapshot_id, version), rollout_id
        )

    async def retire(self, rollout_ids: Iterable[str]) -> None:
        """Remove and fence each rollout whatever its state; repeating it is a no-op."""
        for rollout_id in validate_rollout_ids(rollout_ids):
            await self._writer.run(_retire(rollout_id), rollout_id)

    async def delete(self, rollout_ids: Iterable[str]) -> None:
        """Remove each rollout's records and fence, so its id can be used again from nothing."""
        for rollout_id in validate_rollout_ids(rollout_ids):
            await self._writer.run(_delete(rollout_id), rollout_id)

    async def sweep_tombstones(self, older_than_seconds: float) -> int:
        """Forget tombstones older than ``older_than_seconds``; return how many were removed.

        A swept id is no longer fenced: writes to it start a new rollout. Only names the store
        creates are touched; a file it cannot read or trust is reported as a warning on the
        ``reference.file_store`` logger and left alone, and the sweep goes on.
        """
        return await self._writer.run(lambda logs: logs.sweep_tombstones(older_than_seconds))

    async def close(self) -> None:
        """Stop the writer thread and close every file; idempotent, and loses nothing.

        Every acknowledged write was already durable. The store stays usable: a later call
        starts the writer again.
        """
        await self._writer.close()


def _retire(rollout_id: str) -> Callable[[LogDirectory], None]:
    return lambda logs: logs.retire(rollout_id)


def _delete(rollout_id: str) -> Callable[[LogDirectory], None]:
    return lambda logs: logs.delete(rollout_id)
