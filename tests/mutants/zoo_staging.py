"""STAGE mutants: staging stores that break one promise of the staging contract each.

Every mutant is judged with ``--tokcap-contract=staging-v2``; each overrides one step of
:class:`staging_base.StagingBase`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import struct
import threading
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import quote

from staging_base import Refused, StagingBase, UncheckedReads

from tokcap_spec.staging import StagedCallBaseSnapshot, StagedCallRecord, StageResult


class AsyncStage(StagingBase):
    """STAGE-1: stage is a coroutine function, copied from an async capture sink.

    Gym calls stage from a completion thread and reads the result at once: the coroutine is
    never awaited and nothing is staged.
    """

    breaks: ClassVar[str] = "STAGE-1"

    async def stage(  # type: ignore[override]
        self, record: StagedCallRecord, *, attachments: Mapping[str, Any] | None = None
    ) -> StageResult:
        return StagingBase.stage(self, record, attachments=attachments)


class KeyOnlyResult(StagingBase):
    """STAGE-1: stage answers the bare key string instead of a result.

    The store was written for a caller that only wanted the key; Gym reads ``result.ok``.
    """

    breaks: ClassVar[str] = "STAGE-1"

    def stage(  # type: ignore[override]
        self, record: StagedCallRecord, *, attachments: Mapping[str, Any] | None = None
    ) -> Any:
        result = StagingBase.stage(self, record, attachments=attachments)
        return result.staging_key if result.ok else result


class ExclusiveInstance(StagingBase):
    """STAGE-2: each instance holds the store's lock file for its whole life.

    A single-writer design: a second instance on the same directory, as a source beside a
    sink, cannot be built.
    """

    breaks: ClassVar[str] = "STAGE-2"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        import fcntl

        self._held = os.open(os.path.join(root, "instance.lock"), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(self._held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._held)
            raise RuntimeError("the staging store is already open elsewhere") from None

    def close(self) -> None:
        os.close(self._held)


class MainProcessOnly(StagingBase):
    """STAGE-2: the constructor refuses to run outside the process that first imported it.

    Its client was set up for one process and raises in a spawned inference worker.
    """

    breaks: ClassVar[str] = "STAGE-2"

    def __init__(self, root: str) -> None:
        if multiprocessing.parent_process() is not None:
            raise RuntimeError("this staging store can only be built in the main process")
        super().__init__(root)


class WriteBehind(StagingBase):
    """STAGE-3: stage answers ok once the call is queued; a thread writes it out later.

    A buffer meant to keep stage off the request path: a source that reads before the
    writer has run, or in another process after a crash, finds nothing.
    """

    breaks: ClassVar[str] = "STAGE-3"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._pending: dict[str, bytes] = {}

    def write(self, key: str, data: bytes) -> None:
        self._pending[key] = data
        if len(self._pending) >= 64:
            for each, pending in self._pending.items():
                StagingBase.write(self, each, pending)
            self._pending.clear()

    def read(self, key: str) -> bytes | None:
        return self._pending.get(key) or StagingBase.read(self, key)

    def close(self) -> None:
        for key, data in self._pending.items():
            StagingBase.write(self, key, data)
        self._pending.clear()


class PerProcessFolder(StagingBase):
    """STAGE-3: each process writes into a folder of its own, named by its pid.

    Meant to avoid lock contention between workers; a trainer in another process looks in
    its own folder and finds nothing staged.
    """

    breaks: ClassVar[str] = "STAGE-3"
    also: ClassVar[tuple[str, ...]] = ("STAGE-6",)

    def __init__(self, root: str) -> None:
        super().__init__(os.path.join(root, f"pid-{os.getpid()}"))


class RaisesOnInvalid(StagingBase):
    """STAGE-4: a record that fails validation raises out of stage.

    Validation errors were left to propagate "so the caller sees them"; Gym turns any raise
    into a failed capture of the whole request.
    """

    breaks: ClassVar[str] = "STAGE-4"

    def stage(  # type: ignore[override]
        self, record: StagedCallRecord, *, attachments: Mapping[str, Any] | None = None
    ) -> StageResult:
        if record is None or not isinstance(record, StagedCallRecord):
            raise TypeError("stage takes a StagedCallRecord")
        StagedCallRecord.model_validate(dict(vars(record)))
        return StagingBase.stage(self, record, attachments=attachments)


class ReservationLeftBehind(StagingBase):
    """STAGE-4: the key is reserved before the record is checked, and a refusal keeps it.

    A claim file makes stages of one key exclusive; the error path forgets to remove it, so
    the correct call with those ids is refused as a conflict.
    """

    breaks: ClassVar[str] = "STAGE-4"

    def stage(  # type: ignore[override]
        self, record: StagedCallRecord, *, attachments: Mapping[str, Any] | None = None
    ) -> StageResult:
        rollout = getattr(record, "rollout_id", None)
        call = getattr(record, "model_call_id", None)
        if isinstance(rollout, str) and isinstance(call, str) and rollout and call:
            claim = self.path_of(self.key_of(rollout, call)) + ".claim"
            digest = str(getattr(record, "digest", ""))
            temporary = f"{claim}.{uuid.uuid4().hex}"
            with open(temporary, "w") as handle:
                handle.write(digest)
            try:
                os.link(temporary, claim)
            except FileExistsError:
                with open(claim) as handle:
                    if handle.read() != digest:
                        return StageResult(ok=False, error="the key is claimed by another call")
            finally:
                os.unlink(temporary)
        return StagingBase.stage(self, record, attachments=attachments)


class TrustsTheRecordType(UncheckedReads):
    """STAGE-4: an instance of the record class is taken as valid and stored as it is.

    Validation was thought done by whoever built the record; one built without validation,
    its digest not its fields', is answered ok and later fails verification.
    """

    breaks: ClassVar[str] = "STAGE-4"
    also: ClassVar[tuple[str, ...]] = ("STAGE-10",)

    def admit(self, record: object) -> StagedCallRecord:
        if not isinstance(record, StagedCallRecord):
            raise Refused(f"not a staged call record: {type(record).__name__}")
        return record


class SlashJoinedKey(StagingBase):
    """STAGE-5: the key is Gym's default ``f"{rollout}/{call}"``.

    Ids holding ``/`` share a key: ``("a/b", "c")`` and ``("a", "b/c")`` refuse each other.
    """

    breaks: ClassVar[str] = "STAGE-5"

    def key_of(self, rollout_id: str, model_call_id: str) -> str:
        return f"{rollout_id}/{model_call_id}"


class SlashOnlyEscape(StagingBase):
    """STAGE-5: ``/`` in the ids is escaped as ``%2F``, but ``%`` is not.

    An id that holds ``%2F`` literally makes the key of an id that holds ``/``.
    """

    breaks: ClassVar[str] = "STAGE-5"

    def key_of(self, rollout_id: str, model_call_id: str) -> str:
        return f"{rollout_id.replace('/', '%2F')}/{model_call_id.replace('/', '%2F')}"


class CaseFoldedKey(StagingBase):
    """STAGE-5: the key is case-folded, as a case-insensitive backend would store it.

    ``A`` and ``a`` are one rollout to the store, two to the trainer.
    """

    breaks: ClassVar[str] = "STAGE-5"

    def key_of(self, rollout_id: str, model_call_id: str) -> str:
        return StagingBase.key_of(self, rollout_id.lower(), model_call_id.lower())


class RandomKey(StagingBase):
    """STAGE-5: every stage gets a new random key.

    Keys were thought opaque, so a uuid seemed enough; a re-stage strands the first row and
    gets another key.
    """

    breaks: ClassVar[str] = "STAGE-5"
    also: ClassVar[tuple[str, ...]] = ("STAGE-7",)

    def key_of(self, rollout_id: str, model_call_id: str) -> str:
        return uuid.uuid4().hex


class SharedIndexFile(StagingBase):
    """STAGE-6: every call lives in one index file, read, changed and written back unlocked.

    Simple and fast alone; two stages at once each write back the index they read, and one
    of the two ok calls is lost.
    """

    breaks: ClassVar[str] = "STAGE-6"

    def _index(self) -> dict[str, str]:
        try:
            with open(os.path.join(self.root, "index.json")) as handle:
                loaded: dict[str, str] = json.load(handle)
                return loaded
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def read(self, key: str) -> bytes | None:
        found = self._index().get(key)
        return None if found is None else found.encode()

    def write(self, key: str, data: bytes) -> None:
        index = self._index()
        index[key] = data.decode()
        temporary = os.path.join(self.root, f".index-{uuid.uuid4().hex}")
        with open(temporary, "w") as handle:
            json.dump(index, handle)
            handle.flush()
            os.fsync(handle.fileno())
        # The key's lock, held around this, guards nothing the keys share.
        os.replace(temporary, os.path.join(self.root, "index.json"))


class OneSharedBuffer(StagingBase):
    """STAGE-6: each instance encodes into one reusable buffer without a lock.

    A buffer kept to spare allocations; two threads encoding at once write each other's call.
    """

    breaks: ClassVar[str] = "STAGE-6"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._buffer: dict[str, Any] = {}

    def encode(self, key: str, record: StagedCallRecord, attachments: dict[str, Any]) -> bytes:
        self._buffer["key"] = key
        self._buffer["attachments"] = attachments
        self._buffer["record"] = json.loads(record.model_dump_json())
        threading.Event().wait(0.002)
        return json.dumps(self._buffer).encode()

    def decode(self, data: bytes) -> tuple[str, StagedCallRecord, dict[str, Any]]:
        return StagingBase.decode(self, data)


class OverwritingRestage(StagingBase):
    """STAGE-7: every stage writes, so a different re-stage replaces the stored call.

    "Last write wins" is how the key-value store behaves by default; the ledger's digest no
    longer matches the row.
    """

    breaks: ClassVar[str] = "STAGE-7"

    def put(self, key: str, record: StagedCallRecord, attachments: dict[str, Any]) -> None:
        with self.locked(key):
            self.write(key, self.encode(key, record, attachments))


class TokensOnlyCompare(StagingBase):
    """STAGE-7: a re-stage is compared by its token ids alone.

    The tokens were thought to be the call; another weight version, mask or log probs is
    answered ok under the stored call's key.
    """

    breaks: ClassVar[str] = "STAGE-7"

    def same(
        self,
        stored: tuple[StagedCallRecord, dict[str, Any]],
        offered: tuple[StagedCallRecord, dict[str, Any]],
    ) -> bool:
        return stored[0].token_ids_delta == offered[0].token_ids_delta


class FloatEqualCompare(StagingBase):
    """STAGE-7: a re-stage is compared field by field with ``==``.

    ``-0.0 == 0.0`` holds, so a call differing in the sign of a zero is taken for the stored
    one; values equal after float32 rounding differ, so a true re-stage is refused.
    """

    breaks: ClassVar[str] = "STAGE-7"

    def same(
        self,
        stored: tuple[StagedCallRecord, dict[str, Any]],
        offered: tuple[StagedCallRecord, dict[str, Any]],
    ) -> bool:
        skip = {"digest"}
        return stored[0].model_dump(exclude=skip) == offered[0].model_dump(exclude=skip)


class UnlockedCheckThenWrite(StagingBase):
    """STAGE-7: the stored call is looked up and the new one written without the key's lock.

    Two different calls racing for one key both find it empty; both are answered ok and the
    last write wins.
    """

    breaks: ClassVar[str] = "STAGE-7"

    def put(self, key: str, record: StagedCallRecord, attachments: dict[str, Any]) -> None:
        self.put_unlocked(key, record, attachments)


class SortedFetch(StagingBase):
    """STAGE-8: fetch answers rows in key order.

    The backend's multi-get returns sorted keys; Gym pairs rows with its ledger by position.
    """

    breaks: ClassVar[str] = "STAGE-8"

    def fetch(self, staging_keys: list[str]) -> list[StagedCallBaseSnapshot]:
        return StagingBase.fetch(self, sorted(staging_keys))


class DedupedFetch(StagingBase):
    """STAGE-8: fetch answers each distinct key once.

    A set was used to spare reading a key twice.
    """

    breaks: ClassVar[str] = "STAGE-8"

    def fetch(self, staging_keys: list[str]) -> list[StagedCallBaseSnapshot]:
        return StagingBase.fetch(self, list(dict.fromkeys(staging_keys)))


class SkipsMissing(StagingBase):
    """STAGE-8: fetch leaves out keys that hold nothing.

    "Return what we have" looked friendlier than raising; a consumer silently loses a call.
    """

    breaks: ClassVar[str] = "STAGE-8"

    def fetch(self, staging_keys: list[str]) -> list[StagedCallBaseSnapshot]:
        rows = [self.row(key) for key in staging_keys]
        return [row for row in rows if row is not None]


class RoundedLogProbs(UncheckedReads):
    """STAGE-9: log probs are written rounded to six decimals to keep documents small.

    A subnormal becomes zero and the digest no longer recomputes from the row.
    """

    breaks: ClassVar[str] = "STAGE-9"

    def encode(self, key: str, record: StagedCallRecord, attachments: dict[str, Any]) -> bytes:
        document = json.loads(StagingBase.encode(self, key, record, attachments))
        fields = document["record"]
        fields["generation_log_probs_delta"] = [
            round(value, 6) for value in fields["generation_log_probs_delta"]
        ]
        return json.dumps(document).encode()


class TokenIdsThroughDoubles(UncheckedReads):
    """STAGE-9: token ids are stored as doubles, as a JSON layer for another language does.

    Ids above 2**53 lose their low bits.
    """

    breaks: ClassVar[str] = "STAGE-9"

    def encode(self, key: str, record: StagedCallRecord, attachments: dict[str, Any]) -> bytes:
        document = json.loads(StagingBase.encode(self, key, record, attachments))
        fields = document["record"]
        fields["token_ids_delta"] = [float(value) for value in fields["token_ids_delta"]]
        return json.dumps(document).encode()

    def decode(self, data: bytes) -> tuple[str, StagedCallRecord, dict[str, Any]]:
        key, record, attachments = UncheckedReads.decode(self, data)
        ids = [int(value) for value in record.token_ids_delta]
        return key, record.model_copy(update={"token_ids_delta": ids}), attachments


class UnsignedZeros(StagingBase):
    """STAGE-9: log probs are packed as float32 magnitudes with the sign kept apart, except
    for zeros, whose sign is dropped.

    ``-0.0`` comes back as ``0.0``: another float32 bit pattern, another digest.
    """

    breaks: ClassVar[str] = "STAGE-9"

    def row(self, key: str) -> StagedCallBaseSnapshot | None:
        found = StagingBase.row(self, key)
        if found is None:
            return None
        fields = found.model_dump()
        fields["generation_log_probs_delta"] = [
            0.0 if value == 0 else struct.unpack(">f", struct.pack(">f", value))[0]
            for value in fields["generation_log_probs_delta"]
        ]
        return StagedCallBaseSnapshot.model_construct(**fields)


class AnyVersion(StagingBase):
    """STAGE-10: the versions are set to the store's own before the record is checked.

    Meant to accept records from producers that "forgot" the version fields; a record of
    another layout is stored as if it were schema 2.
    """

    breaks: ClassVar[str] = "STAGE-10"

    def admit(self, record: object) -> StagedCallRecord:
        if not isinstance(record, StagedCallRecord):
            raise Refused(f"not a staged call record: {type(record).__name__}")
        fields = dict(vars(record))
        fields.update(schema_version=2, digest_version=2, extras_digest_version=1)
        try:
            return StagedCallRecord.model_validate(fields)
        except ValueError as exc:
            raise Refused(f"invalid record: {exc}") from None


READ_BACK = ("--tokcap-capability=read-back",)


class AttachmentsNeverStored(StagingBase):
    """STAGE-11: attachments are taken as a keyword and acked, but only the record is written.

    The store was written for text-only calls; the keyword was added so multimodal calls stop
    failing, and a re-stage is compared by digest alone, so nothing ever notices.
    """

    breaks: ClassVar[str] = "STAGE-11"
    flags: ClassVar[tuple[str, ...]] = READ_BACK

    def encode(self, key: str, record: StagedCallRecord, attachments: dict[str, Any]) -> bytes:
        return StagingBase.encode(self, key, record, {})

    def same(
        self,
        stored: tuple[StagedCallRecord, dict[str, Any]],
        offered: tuple[StagedCallRecord, dict[str, Any]],
    ) -> bool:
        return stored[0].digest == offered[0].digest


class ExtrasLeftOut(UncheckedReads):
    """STAGE-11: the record is stored as its metadata-only row, so its extras are lost.

    The digest still commits to them through ``extras_digest``, so every row fetched verifies;
    only a consumer that reads the extras back finds ``None``.
    """

    breaks: ClassVar[str] = "STAGE-11"
    flags: ClassVar[tuple[str, ...]] = READ_BACK

    def encode(self, key: str, record: StagedCallRecord, attachments: dict[str, Any]) -> bytes:
        row = json.loads(record.model_dump_json(exclude={"extras"}))
        return json.dumps({"key": key, "record": row, "attachments": attachments}).encode()


class CallIdOnlyKey(StagingBase):
    """STAGE-5: the key is the call id alone, as if call ids were unique across rollouts.

    They are not: every rollout numbers its calls from ``call-0``, so the second rollout's
    first call meets the first rollout's under one key and is refused as a different call.
    """

    breaks: ClassVar[str] = "STAGE-5"

    def key_of(self, rollout_id: str, model_call_id: str) -> str:
        return quote(model_call_id, safe="")


class CallIdKeyReplaces(StagingBase):
    """STAGE-5: the key is the call id alone, and a row left by another rollout is replaced.

    Written as "a call id is unique while its rollout lives; a row of another rollout under it
    is a leftover": a different call of the same ids is still refused, but the first rollout's
    ``call-0`` is overwritten by the next rollout's, and its key fetches the wrong call.
    """

    breaks: ClassVar[str] = "STAGE-5"

    def key_of(self, rollout_id: str, model_call_id: str) -> str:
        return quote(model_call_id, safe="")

    def put_unlocked(self, key: str, record: StagedCallRecord, attachments: dict[str, Any]) -> None:
        stored = self.read(key)
        if stored is not None and self.decode(stored)[1].rollout_id != record.rollout_id:
            self.write(key, self.encode(key, record, attachments))
            return
        super().put_unlocked(key, record, attachments)


class ExtrasCheckedAfterWrite(UncheckedReads):
    """STAGE-4: the extras are checked against their digest only once the call is written.

    The rest of the record is validated first (as a base snapshot, which leaves the extras
    out); a record whose extras do not match is then refused, but its row stays, and the
    correct call staged next under those ids is taken for an identical re-stage: its extras
    read back as the refused call's.
    """

    breaks: ClassVar[str] = "STAGE-4"
    flags: ClassVar[tuple[str, ...]] = ("--tokcap-capability=read-back",)

    def admit(self, record: object) -> StagedCallRecord:
        if not isinstance(record, StagedCallRecord):
            raise Refused(f"not a staged call record: {type(record).__name__}")
        fields = dict(vars(record))
        try:
            StagedCallBaseSnapshot.model_validate(
                {k: v for k, v in fields.items() if k != "extras"}
            )
        except ValueError as exc:
            raise Refused(f"invalid record: {exc}") from None
        return StagedCallRecord.model_construct(**fields)

    def put(self, key: str, record: StagedCallRecord, attachments: dict[str, Any]) -> None:
        super().put(key, record, attachments)
        try:
            StagedCallRecord.model_validate(dict(vars(record)))
        except ValueError as exc:
            raise Refused(f"extras do not match their digest: {exc}") from None


class MaskSignDropped(UncheckedReads):
    """STAGE-9: masks are stored as 0 or 1, so a ``-0.0`` in the mask comes back ``0.0``.

    A mask is a flag, after all; but the digest hashes its float32 bits, and the row no longer
    carries the call that was staged.
    """

    breaks: ClassVar[str] = "STAGE-9"

    def encode(self, key: str, record: StagedCallRecord, attachments: dict[str, Any]) -> bytes:
        flags = [1.0 if value else 0.0 for value in record.token_mask_delta]
        return super().encode(
            key, record.model_copy(update={"token_mask_delta": flags}), attachments
        )


class AttachmentsCheckedAfterWrite(StagingBase):
    """STAGE-4: the attachments are checked only once the call is written.

    The call is stored first and its attachments encoded after; an attachment the store does
    not take is refused, but the call's row stays, so another call staged next under those ids
    is refused as a conflict (or, were it the same, the refused call would be fetched).
    """

    breaks: ClassVar[str] = "STAGE-4"

    def stage(
        self, record: StagedCallRecord, *, attachments: Mapping[str, Any] | None = None
    ) -> StageResult:
        try:
            valid = self.admit(record)
            key = self.key_of(valid.rollout_id, valid.model_call_id)
            self.put(key, valid, {})
            self.admit_attachments(attachments)
            return StageResult(ok=True, staging_key=key)
        except Exception as exc:
            return StageResult(ok=False, error=f"{type(exc).__name__}: {exc}")
