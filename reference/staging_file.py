"""A staging sink and source in one object, on a local disk, shared by processes."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import uuid
from collections.abc import Iterator

from reference._staging_store import KeyedStagingStore

__all__ = ["FileStagingStore"]


class FileStagingStore(KeyedStagingStore):
    """A :class:`~tokcap_spec.staging.StagingSink` and ``StagingSource`` in a directory.

    Any number of instances, in any number of threads and processes, may stage into and fetch
    from one ``root`` at once; an instance opened later, anywhere on the machine, fetches what
    an ok ``stage`` stored. The directory must be on a local file system that supports hard
    links and ``flock``.

    - ``stage`` never raises. It returns ``ok`` with the key
      :func:`~tokcap_spec.staging.distinct_staging_key` makes of the record's ids once the
      call is durable: its file is written to a temporary file and synced, linked into place
      (a link never replaces a file), and the directory synced. Otherwise it returns
      ``ok=False`` with an error saying what is wrong: a record that is not a valid
      ``StagedCallRecord``, tokcap_spec's or NeMo Gym's (another type, another schema or digest
      version, a digest that does not recompute), attachments that are not a mapping of
      ``str`` to ``bytes`` or ``str``, or an error of the file system, which leaves nothing
      fetchable under the key (the linked file is removed if the directory sync fails).
    - Staging exactly the call a key holds again (the same digest, which commits to the
      extras and to the columns as float32, and the same attachments) changes nothing and is
      ok, with the same key, once the directory is synced. Another call for a key that holds
      one is refused, and the stored call is kept.
    - Attachments are written in the same file as the record; ``None`` and ``{}`` both mean
      none. ``fetch_attachments`` and ``fetch_extras`` read them back.
    - ``fetch`` returns a new, validated row per key, in the order asked for and as often as
      asked for, with the columns' float bits as staged (``-0.0`` and subnormals included);
      if any key holds nothing it raises :class:`~tokcap_spec.staging.StagedCallMissingError`
      naming every such key, and returns nothing; a file damaged on disk raises
      :class:`~tokcap_spec.staging.StagedCallCorruptError`.

    Layout: ``calls/<sha256 of the key>.json`` holds one call, key included (a hashed name is
    safe for any id and any length); ``calls/.tmp-*`` are writes in progress, or left by a
    process that died, never read; ``locks/<sha256 of the key>.lock`` serializes the stages of
    one key, so a key's file is only linked, or removed after a failed sync, under its lock.
    """

    def __init__(self, root: str | os.PathLike[str], *, classes: str | None = None) -> None:
        """Open the store in ``root``, creating it if need be; ``OSError`` if that fails.

        ``classes`` names the staging classes it answers with (``"gym"`` for NeMo Gym's
        capture; see :class:`~reference._staging_store.KeyedStagingStore`); ``ValueError``
        when they cannot be loaded.
        """
        self._answer_with(classes)
        self.root = os.fspath(root)
        self._calls = os.path.join(self.root, "calls")
        self._locks = os.path.join(self.root, "locks")
        os.makedirs(self._calls, exist_ok=True)
        os.makedirs(self._locks, exist_ok=True)
        _sync_directory(self.root)

    def _put_if_absent(self, key: str, document: bytes) -> bytes | None:
        name = hashlib.sha256(key.encode("utf-8")).hexdigest()
        path = os.path.join(self._calls, f"{name}.json")
        with self._locked(name):
            stored = _read(path)
            if stored is None:
                stored = self._link_new(path, document)
            if stored is not None:
                # Its stager may have died between linking it and syncing the directory.
                _sync_directory(self._calls)
            return stored

    def _load(self, key: str) -> bytes | None:
        name = hashlib.sha256(key.encode("utf-8")).hexdigest()
        return _read(os.path.join(self._calls, f"{name}.json"))

    def _link_new(self, path: str, document: bytes) -> bytes | None:
        """Link a synced file holding ``document`` at ``path`` and sync the directory; return
        ``None``, or the file already at ``path`` if there is one."""
        temporary = os.path.join(self._calls, f".tmp-{os.getpid()}-{uuid.uuid4().hex}")
        try:
            _write_synced(temporary, document)
            os.link(temporary, path)
        except FileExistsError:
            stored = _read(path)
            if stored is None:
                raise OSError(f"{path} was there to link over, and then was not") from None
            return stored
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        try:
            _sync_directory(self._calls)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        return None

    @contextlib.contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        fd = os.open(os.path.join(self._locks, f"{name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _write_synced(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
