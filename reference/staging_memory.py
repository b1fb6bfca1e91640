"""A staging sink and source in one object, in process memory."""

from __future__ import annotations

import threading

from reference._staging_store import KeyedStagingStore

__all__ = ["MemoryStagingStore"]

_NAMESPACES: dict[str, tuple[dict[str, bytes], threading.Lock]] = {}
_NAMESPACES_LOCK = threading.Lock()


class MemoryStagingStore(KeyedStagingStore):
    """A :class:`~tokcap_spec.staging.StagingSink` and ``StagingSource`` in process memory.

    Without a ``namespace``, what it holds lives and dies with the object. Instances given the
    same ``namespace`` share one store for the life of the process, so a source built later
    fetches what an earlier sink staged (as the kit's ``process-local`` runs need). Other
    processes never see it. Every method is safe to call from many threads at once. It keeps
    every promise
    :class:`~reference.staging_file.FileStagingStore` keeps but durability:

    - ``stage`` never raises. It returns ``ok`` with the key
      :func:`~tokcap_spec.staging.distinct_staging_key` makes of the record's ids once the
      call is stored, or ``ok=False`` with an error saying what is wrong, storing nothing: a
      record that is not a valid ``StagedCallRecord``, tokcap_spec's or NeMo Gym's (another
      type, another schema or digest version, a digest that does not recompute), attachments that
      are not a mapping of ``str`` to ``bytes`` or ``str``, a failure of the store.
    - Staging exactly the call a key holds again (the same digest, which commits to the
      extras and to the columns as float32, and the same attachments) changes nothing and is
      ok, with the same key. Another call for a key that holds one is refused, and the stored
      call is kept.
    - Attachments are stored with the record, in the same write; ``None`` and ``{}`` both
      mean none. ``fetch_attachments`` and ``fetch_extras`` read them back.
    - ``fetch`` returns a new, validated row per key, in the order asked for and as often as
      asked for, with the columns' float bits as staged (``-0.0`` and subnormals included);
      if any key holds nothing it raises :class:`~tokcap_spec.staging.StagedCallMissingError`
      naming every such key, and returns nothing.
    - What is stored is a copy: changing a record, its extras or attachments after staging
      changes nothing stored, and every row fetched is a new object.
    """

    def __init__(self, namespace: str | None = None, *, classes: str | None = None) -> None:
        """``classes`` names the staging classes it answers with (``"gym"`` for NeMo Gym's
        capture; see :class:`~reference._staging_store.KeyedStagingStore`)."""
        self._answer_with(classes)
        if namespace is not None and not isinstance(namespace, str):
            raise TypeError(f"namespace must be a str or None, got {type(namespace).__name__}")
        if namespace is None:
            self._documents: dict[str, bytes] = {}
            self._lock = threading.Lock()
        else:
            with _NAMESPACES_LOCK:
                self._documents, self._lock = _NAMESPACES.setdefault(
                    namespace, ({}, threading.Lock())
                )

    def _put_if_absent(self, key: str, document: bytes) -> bytes | None:
        with self._lock:
            stored = self._documents.get(key)
            if stored is None:
                self._documents[key] = document
            return stored

    def _load(self, key: str) -> bytes | None:
        with self._lock:
            return self._documents.get(key)
