"""The baseline staging store the staging mutants break, one step each; correct as it stands.

:class:`StagingBase` keeps one JSON file per staged call under ``root``, written to a temporary
file, synced and linked into place under a per-key ``flock``, so any number of instances and
processes share it. Each step a mutant overrides is a method of its own: the key, the check of
a record, the encoding, the comparison of a re-stage, the write, the read and the fetch.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from tokcap_spec.staging import (
    StagedCallBaseSnapshot,
    StagedCallMissingError,
    StagedCallRecord,
    StageResult,
    distinct_staging_key,
)

__all__ = ["Refused", "StagingBase", "UncheckedReads"]

STAGING = "staging-v2"


class Refused(Exception):
    """A call the store will not stage; the message says why."""


class StagingBase:
    """A correct staging sink and source in a directory (see the module docstring)."""

    contract: ClassVar[str] = STAGING

    def __init__(self, root: str) -> None:
        self.root = root
        os.makedirs(os.path.join(root, "calls"), exist_ok=True)
        os.makedirs(os.path.join(root, "locks"), exist_ok=True)

    # --- the steps ---------------------------------------------------------------------------

    def key_of(self, rollout_id: str, model_call_id: str) -> str:
        return distinct_staging_key(rollout_id, model_call_id)

    def admit(self, record: object) -> StagedCallRecord:
        if not isinstance(record, StagedCallRecord):
            raise Refused(f"not a staged call record: {type(record).__name__}")
        try:
            return StagedCallRecord.model_validate(dict(vars(record)))
        except ValueError as exc:
            raise Refused(f"invalid record: {exc}") from None

    def admit_attachments(self, attachments: object) -> dict[str, Any]:
        if attachments is None:
            return {}
        if not isinstance(attachments, Mapping) or not all(isinstance(k, str) for k in attachments):
            raise Refused("attachments must be a mapping with str keys")
        out = {}
        for name, value in attachments.items():
            if isinstance(value, bytes):
                out[name] = {"bytes": value.hex()}
            elif isinstance(value, str):
                out[name] = {"str": value}
            else:
                raise Refused(f"attachment {name!r} is neither bytes nor str")
        return out

    def encode(self, key: str, record: StagedCallRecord, attachments: dict[str, Any]) -> bytes:
        return json.dumps(
            {"key": key, "record": json.loads(record.model_dump_json()), "attachments": attachments}
        ).encode("utf-8")

    def decode(self, data: bytes) -> tuple[str, StagedCallRecord, dict[str, Any]]:
        document = json.loads(data)
        return (
            document["key"],
            StagedCallRecord.model_validate(document["record"]),
            document["attachments"],
        )

    def same(
        self,
        stored: tuple[StagedCallRecord, dict[str, Any]],
        offered: tuple[StagedCallRecord, dict[str, Any]],
    ) -> bool:
        return stored[0].digest == offered[0].digest and stored[1] == offered[1]

    def path_of(self, key: str) -> str:
        return os.path.join(self.root, "calls", hashlib.sha256(key.encode()).hexdigest())

    def read(self, key: str) -> bytes | None:
        try:
            with open(self.path_of(key), "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def write(self, key: str, data: bytes) -> None:
        temporary = os.path.join(self.root, "calls", f".tmp-{uuid.uuid4().hex}")
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path_of(key))
        fd = os.open(os.path.join(self.root, "calls"), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def locked(self, key: str) -> Iterator[None]:
        name = hashlib.sha256(key.encode()).hexdigest()
        fd = os.open(os.path.join(self.root, "locks", name), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def put(self, key: str, record: StagedCallRecord, attachments: dict[str, Any]) -> None:
        """Store the call under ``key`` unless it holds one; refuse another call."""
        with self.locked(key):
            self.put_unlocked(key, record, attachments)

    def put_unlocked(self, key: str, record: StagedCallRecord, attachments: dict[str, Any]) -> None:
        """What :meth:`put` does under the key's lock."""
        stored = self.read(key)
        if stored is not None:
            _, old, old_attachments = self.decode(stored)
            if not self.same((old, old_attachments), (record, attachments)):
                raise Refused(f"key {key!r} holds another call")
            return
        self.write(key, self.encode(key, record, attachments))

    def row(self, key: str) -> StagedCallBaseSnapshot | None:
        data = self.read(key)
        if data is None:
            return None
        _, record, _ = self.decode(data)
        return StagedCallBaseSnapshot.model_validate(record.model_dump(exclude={"extras"}))

    # --- the protocol ------------------------------------------------------------------------

    def stage(
        self, record: StagedCallRecord, *, attachments: Mapping[str, Any] | None = None
    ) -> StageResult:
        try:
            valid = self.admit(record)
            checked = self.admit_attachments(attachments)
            key = self.key_of(valid.rollout_id, valid.model_call_id)
            self.put(key, valid, checked)
            return StageResult(ok=True, staging_key=key)
        except Exception as exc:
            return StageResult(ok=False, error=f"{type(exc).__name__}: {exc}")

    def fetch(self, staging_keys: list[str]) -> list[StagedCallBaseSnapshot]:
        rows = {key: self.row(key) for key in dict.fromkeys(staging_keys)}
        missing = [key for key, row in rows.items() if row is None]
        if missing:
            raise StagedCallMissingError(missing)
        return [rows[key] for key in staging_keys]  # type: ignore[misc]

    # --- reading back (the read-back capability, STAGE-11) ------------------------------------

    def stored(self, staging_keys: list[str]) -> list[tuple[StagedCallRecord, dict[str, Any]]]:
        found = {key: self.read(key) for key in dict.fromkeys(staging_keys)}
        missing = [key for key, data in found.items() if data is None]
        if missing:
            raise StagedCallMissingError(missing)
        decoded = {key: self.decode(data)[1:] for key, data in found.items()}  # type: ignore[arg-type]
        return [decoded[key] for key in staging_keys]

    def fetch_extras(self, staging_keys: list[str]) -> list[dict[str, Any] | None]:
        return [record.extras for record, _ in self.stored(staging_keys)]

    def fetch_attachments(self, staging_key: str) -> dict[str, bytes | str]:
        ((_, attachments),) = self.stored([staging_key])
        return {
            name: bytes.fromhex(value["bytes"]) if "bytes" in value else value["str"]
            for name, value in attachments.items()
        }


class UncheckedReads(StagingBase):
    """Reads stored calls back without validating them: what is on disk is what is fetched."""

    def decode(self, data: bytes) -> tuple[str, StagedCallRecord, dict[str, Any]]:
        document = json.loads(data)
        return (
            document["key"],
            StagedCallRecord.model_construct(**document["record"]),
            document["attachments"],
        )

    def row(self, key: str) -> StagedCallBaseSnapshot | None:
        data = self.read(key)
        if data is None:
            return None
        _, record, _ = self.decode(data)
        fields = dict(vars(record))
        fields.pop("extras", None)
        return StagedCallBaseSnapshot.model_construct(**fields)


class TakesNoAttachments(StagingBase):
    """A correct staging store that takes no attachments: a call handed any is refused whole.

    STAGE-4 names "attachments it does not take" among what a sink refuses; such a store still
    stages every call handed without them.
    """

    def admit_attachments(self, attachments: object) -> dict[str, Any]:
        if attachments is not None:
            raise Refused("this store takes no attachments")
        return {}
