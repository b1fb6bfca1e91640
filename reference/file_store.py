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
from collections.abc import Iterable

from reference._file_rollouts import RolloutLogs
from reference._file_writer import WriterThread
from tokcap_spec.ids import validate_call_id, validate_rollout_id, validate_rollout_ids
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry, as_token_entry

__all__ = ["FileTokenStore"]


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
      the directory are never followed.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        if not isinstance(root, str | os.PathLike):
            raise TypeError(f"root must be a str or os.PathLike path, got {type(root).__name__}")
        path = os.fspath(root)
        if not isinstance(path, str) or not path:
            raise TypeError(f"root must name a directory as a non-empty str, got {path!r}")
        self.root = os.path.abspath(path)
        os.makedirs(self.root, exist_ok=True)
        self._writer = WriterThread(self.root, f"FileTokenStore({self.root})")

    def __repr__(self) -> str:
        return f"FileTokenStore(root={self.root!r})"

    async def put(self, entry: TokenEntry) -> None:
        """Store ``entry`` durably under its rollout; see the class promises."""
        entry = as_token_entry(entry)
        rollout_id = validate_rollout_id(entry.rollout_id)
        call = validate_call_id(entry.model_call_id)
        # An entry that skipped validation would make every later freeze refuse the rollout
        # once it was in the log, so it is refused before anything is acked.
        payload = entry.checked_json_bytes()
        await self._writer.put(rollout_id, call, payload)

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        """Durably record that ``rollout_id`` lost evidence; every later freeze says incomplete."""
        rollout_id = validate_rollout_id(rollout_id)
        call = validate_call_id(model_call_id, allow_empty=True)
        await self._writer.run(lambda logs: logs.mark_incomplete(rollout_id, call))

    async def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        """Durably announce ``model_call_id``; a freeze before its entry arrives is incomplete."""
        rollout_id = validate_rollout_id(rollout_id)
        call = validate_call_id(model_call_id)
        await self._writer.run(lambda logs: logs.begin_call(rollout_id, call))

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        """Fence ``rollout_id`` durably and return a snapshot of everything it holds."""
        rollout_id = validate_rollout_id(rollout_id)
        return await self._writer.run(lambda logs: logs.freeze(rollout_id))

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        """Retire ``rollout_id`` if it is frozen at exactly this snapshot; say whether it was."""
        rollout_id = validate_rollout_id(rollout_id)
        return await self._writer.run(lambda logs: logs.drop(rollout_id, snapshot_id, version))

    async def retire(self, rollout_ids: Iterable[str]) -> None:
        """Remove and fence each rollout whatever its state; repeating it is a no-op."""
        ids = validate_rollout_ids(rollout_ids)

        def retire_all(logs: RolloutLogs) -> None:
            for rollout_id in ids:
                logs.retire(rollout_id)

        await self._writer.run(retire_all)

    async def delete(self, rollout_ids: Iterable[str]) -> None:
        """Remove each rollout's records and fence, so its id can be used again from nothing."""
        ids = validate_rollout_ids(rollout_ids)

        def delete_all(logs: RolloutLogs) -> None:
            for rollout_id in ids:
                logs.delete(rollout_id)

        await self._writer.run(delete_all)

    async def sweep_tombstones(self, older_than_seconds: float) -> int:
        """Forget tombstones older than ``older_than_seconds``; return how many were removed.

        A swept id is no longer fenced: writes to it start a new rollout.
        """
        return await self._writer.run(lambda logs: logs.sweep_tombstones(older_than_seconds))

    async def close(self) -> None:
        """Stop the writer thread and close every file; idempotent, and loses nothing.

        Every acknowledged write was already durable. The store stays usable: a later call
        starts the writer again.
        """
        await self._writer.close()
