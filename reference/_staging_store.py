"""The methods both staging stores share, over a storage that keeps one document per key."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from reference._staging_entry import Attachment
from reference._staging_rules import gather, stage_with
from tokcap_spec.staging import StagedCallBaseSnapshot, StagedCallRecord, StageResult
from tokcap_spec.staging.classes import WireClasses, WireClassesError, wire_classes

__all__ = ["KeyedStagingStore"]


class KeyedStagingStore(ABC):
    """A staging sink and source whose storage a subclass supplies: a put that never replaces
    a key's document, and a load by key. What the methods promise is in each store's class
    docstring; it is the same for every store.

    Every store takes a ``classes`` kwarg naming the staging classes it answers with
    (:func:`~tokcap_spec.staging.classes.wire_classes`: ``"tokcap"``, ``"gym"`` or a module
    path). Without it, ``stage`` answers a result of the record's own classes (NeMo Gym's
    ``StageResult`` for Gym's record) and ``fetch`` answers tokcap_spec's rows; with it, every
    result and every row is of the named classes, as NeMo Gym's capture and its
    ``verify_and_linearize`` require of a store built for them.
    """

    _classes: WireClasses | None = None

    def _answer_with(self, classes: str | None) -> None:
        """Answer with the classes named by ``classes`` (None: as the record came in)."""
        if classes is None:
            return
        try:
            self._classes = wire_classes(classes)
        except WireClassesError as exc:
            raise ValueError(f"classes: {exc}") from None

    @property
    def classes(self) -> str | None:
        """The name of the staging classes this store answers with, None when it answers as
        each record came in."""
        return None if self._classes is None else self._classes.name

    def stage(
        self, record: StagedCallRecord, *, attachments: Mapping[str, Any] | None = None
    ) -> StageResult:
        """Store ``record`` and ``attachments`` under the call's distinct key; never raises."""
        result: StageResult = stage_with(record, attachments, self._put_if_absent, self._classes)
        return result

    def fetch(self, staging_keys: list[str]) -> list[StagedCallBaseSnapshot]:
        """A new, validated row per key without extras, in order; raises
        :class:`~tokcap_spec.staging.StagedCallMissingError` naming every key that holds
        nothing."""
        rows = [entry.snapshot() for entry in gather(staging_keys, self._load)]
        if self._classes is None or self._classes.is_tokcap:
            return rows
        carried: list[StagedCallBaseSnapshot] = [self._classes.row_of(row) for row in rows]  # type: ignore[misc]
        return carried

    def fetch_extras(self, staging_keys: list[str]) -> list[dict[str, Any] | None]:
        """A copy of each key's extras (``None`` for a call without), keys ordered and refused
        as by ``fetch``; each matches its row's ``extras_digest``."""
        return [entry.extras() for entry in gather(staging_keys, self._load)]

    def fetch_attachments(self, staging_key: str) -> dict[str, Attachment]:
        """A copy of the attachments staged with the call under ``staging_key`` (``{}`` for
        none); :class:`~tokcap_spec.staging.StagedCallMissingError` when it holds no call."""
        (entry,) = gather([staging_key], self._load)
        return entry.attachment_copy()

    @abstractmethod
    def _put_if_absent(self, key: str, document: bytes) -> bytes | None:
        """Store ``document`` under ``key`` durably and return ``None``; or, when ``key``
        already holds a document, store nothing and return that one. ``OSError`` when the
        storage fails, leaving nothing new under ``key``."""

    @abstractmethod
    def _load(self, key: str) -> bytes | None:
        """The document under ``key``, ``None`` when there is none."""
