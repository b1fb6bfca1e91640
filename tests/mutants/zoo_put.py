"""PUT mutants: early acks, lossy round trips, wrong re-put rules, merged rollouts, mangled ids."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import re
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from base import BaseStore, RolloutFileState

from tokcap_spec.errors import ConflictingEntryError
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry


class BuffersUntilClose(BaseStore):
    """PUT-1: put acks at once and keeps the entry in memory until close writes it.

    Write-behind buffering makes puts cheap; a worker that is killed, or a consumer that
    freezes before the sink closes, never sees acknowledged entries.
    """

    breaks: ClassVar[str] = "PUT-1"
    group_size: ClassVar[int] = 0
    """How many buffered puts are written together before close; 0 waits for close."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._pending: list[TokenEntry] = []

    def write(self, entry: TokenEntry) -> None:
        self._pending.append(entry)
        if len(self._pending) == self.group_size:
            self._commit()

    def _commit(self) -> None:
        pending, self._pending = self._pending, []
        for entry in pending:
            super().write(entry)

    async def close(self) -> None:
        self._commit()
        await super().close()


class GroupCommit(BuffersUntilClose):
    """PUT-1: puts are written in groups of four; the last partial group waits for close.

    Group commit amortizes fsync, but acks each put before its group is written.
    """

    breaks: ClassVar[str] = "PUT-1"
    group_size: ClassVar[int] = 4


class CommitsInBackgroundTask(BaseStore):
    """PUT-1: put schedules the write as a task on the event loop and returns at once.

    An async store that "fires and forgets" its write acks before anything is stored; a
    consumer in another process, or any freeze the loop does not get to first, misses it.
    """

    breaks: ClassVar[str] = "PUT-1"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._writes: set[asyncio.Task[None]] = set()

    async def put(self, entry: TokenEntry) -> None:
        task = asyncio.get_running_loop().create_task(self._write(entry))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, entry: TokenEntry) -> None:
        await asyncio.sleep(0)
        await BaseStore.put(self, entry)

    async def close(self) -> None:
        await asyncio.gather(*self._writes, return_exceptions=True)
        await super().close()


class SpillsLargeAfterAck(BaseStore):
    """PUT-1: an entry over 256 KiB is written by a background thread once put returned.

    A store that moves large payloads off the request path (to a side file or an object
    store) acks first and uploads behind a queue; a consumer freezing at once misses the
    long-context turns, while every short one is there.
    """

    breaks: ClassVar[str] = "PUT-1"
    spill_bytes: ClassVar[int] = 256 * 1024
    queue_seconds: ClassVar[float] = 1.0
    """How long an upload waits behind the others in the queue."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._uploads: list[threading.Thread] = []

    def write(self, entry: TokenEntry) -> None:
        if len(self.encode(entry)) <= self.spill_bytes:
            super().write(entry)
            return
        upload = threading.Thread(target=self._upload, args=(entry,), daemon=True)
        self._uploads.append(upload)
        upload.start()

    def _upload(self, entry: TokenEntry) -> None:
        time.sleep(self.queue_seconds)
        BaseStore.write(self, entry)

    async def close(self) -> None:
        uploads, self._uploads = self._uploads, []
        for upload in uploads:
            await asyncio.to_thread(upload.join)
        await super().close()


class Float32LogProbs(BaseStore):
    """PUT-2: log probs are stored as float32.

    A columnar or tensor transport picks float32 for log probs, which loses the low bits the
    trainer's importance ratios depend on.
    """

    breaks: ClassVar[str] = "PUT-2"

    def encode(self, entry: TokenEntry) -> str:
        data = entry.model_dump()
        data["generation_log_probs"] = [
            struct.unpack("f", struct.pack("f", value))[0] for value in data["generation_log_probs"]
        ]
        return TokenEntry(**data).to_json_bytes().decode("utf-8")


class ReplacesUnencodable(BaseStore):
    """PUT-2: entries are stored as readable UTF-8 JSON, encoded with ``errors="replace"``.

    Readable files keep non-ASCII text as it is, and "replace" was chosen so that an odd string
    could never fail a put; a lone surrogate (which a JSON ``\\ud83d`` escape decodes to) is
    stored as ``?`` and comes back changed.
    """

    breaks: ClassVar[str] = "PUT-2"

    def encode(self, entry: TokenEntry) -> str:
        text = json.dumps(
            entry.model_dump(mode="python", warnings=False), sort_keys=True, ensure_ascii=False
        )
        return text.encode("utf-8", errors="replace").decode("utf-8")

    def decode(self, stored: str) -> TokenEntry:
        return TokenEntry(**json.loads(stored))


class InfinityBecomesZero(BaseStore):
    """PUT-2: ``-inf`` log probs are written as JSON null and read back as 0.0.

    Plain ``model_dump_json`` writes non-finite floats as null; a lenient reader then fills the
    gaps with 0.0, turning an impossible token into a certain one.
    """

    breaks: ClassVar[str] = "PUT-2"

    def encode(self, entry: TokenEntry) -> str:
        return entry.model_dump_json()

    def decode(self, stored: str) -> TokenEntry:
        data = json.loads(stored)
        data["generation_log_probs"] = [
            0.0 if value is None else value for value in data["generation_log_probs"]
        ]
        return TokenEntry(**data)


class NegativeZeroBecomesZero(BaseStore):
    """PUT-2: ``-0.0`` log probs come back as ``0.0``.

    A numeric normalization pass (adding 0.0, or a decimal column) loses the sign of zero, so
    frozen entries no longer equal the entries put, bit for bit.
    """

    breaks: ClassVar[str] = "PUT-2"

    def encode(self, entry: TokenEntry) -> str:
        data = entry.model_dump()
        data["generation_log_probs"] = [value + 0.0 for value in data["generation_log_probs"]]
        return TokenEntry(**data).to_json_bytes().decode("utf-8")


class DropsExtraFields(BaseStore):
    """PUT-2: only the declared TokenEntry fields are stored; unknown extra fields are lost.

    A store with a fixed table schema keeps the columns it knows and silently drops the rest.
    """

    breaks: ClassVar[str] = "PUT-2"

    def encode(self, entry: TokenEntry) -> str:
        known = set(TokenEntry.model_fields)
        data = {key: value for key, value in entry.model_dump().items() if key in known}
        return TokenEntry(**data).to_json_bytes().decode("utf-8")


class ReplacesUnicode(BaseStore):
    """PUT-2: text outside latin-1 is replaced by ``?`` on the way to storage.

    The transport writes its JSON as text, unescaped, through a latin-1 codec with
    ``errors="replace"``.
    """

    breaks: ClassVar[str] = "PUT-2"
    also: ClassVar[tuple[str, ...]] = ("PUT-6",)

    def encode(self, entry: TokenEntry) -> str:
        text = json.dumps(entry.model_dump(), sort_keys=True, ensure_ascii=False, allow_nan=True)
        return text.encode("latin-1", "replace").decode("latin-1")


class MillisecondTimestamps(BaseStore):
    """PUT-2: ``created_at`` is stored with millisecond precision.

    A timestamp(3) database column rounds the float every entry carries.
    """

    breaks: ClassVar[str] = "PUT-2"

    def encode(self, entry: TokenEntry) -> str:
        data = entry.model_dump()
        data["created_at"] = round(data["created_at"], 3)
        return TokenEntry(**data).to_json_bytes().decode("utf-8")


class NullExpertsBecomeEmpty(BaseStore):
    """PUT-2: ``routed_experts=None`` comes back as an empty list.

    A non-nullable list column cannot tell "no routing recorded" from "no experts".
    """

    breaks: ClassVar[str] = "PUT-2"

    def encode(self, entry: TokenEntry) -> str:
        data = entry.model_dump()
        data["routed_experts"] = data["routed_experts"] or []
        return TokenEntry(**data).to_json_bytes().decode("utf-8")


class AppendsDuplicates(BaseStore):
    """PUT-3: an identical re-put is appended as a second copy of the entry.

    An append-only log retried by an at-least-once client, read back without de-duplication,
    trains on the same call twice.
    """

    breaks: ClassVar[str] = "PUT-3"

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        if state.entries.get(call) == payload and not state.retired:
            state.entries[f"{call}\x00copy{len(state.entries)}"] = payload
            state.version += 1
            return
        super().apply_put(rollout_id, state, call, payload)


class ReputIsConflict(BaseStore):
    """PUT-3: any re-put of a known call id is treated as a conflict, identical or not.

    The store compares by "call id seen" instead of by payload bytes, so every at-least-once
    retry masks its rollout and raises.
    """

    breaks: ClassVar[str] = "PUT-3"

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        if call in state.entries and not state.retired:
            state.incomplete = True
            state.version += 1
            raise ConflictingEntryError(f"model_call_id {call!r} was already stored")
        super().apply_put(rollout_id, state, call, payload)


class ReputAfterFreezeMovesVersion(BaseStore):
    """PUT-3: after freeze, an identical re-put is accepted and moves the version.

    A store that counts every accepted write as a state change, identical or not, leaves the
    consumer's snapshot stale: the retry of a producer that changed nothing blocks the drop.
    """

    breaks: ClassVar[str] = "PUT-3"

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        if state.frozen and not state.retired and state.entries.get(call) == payload:
            state.version += 1
            return
        super().apply_put(rollout_id, state, call, payload)


class LastWriterWins(BaseStore):
    """PUT-4: a different payload under a known call id silently replaces the first one.

    Upsert semantics (``SET key value``): the rollout freezes clean with tokens that may not
    be the ones the response was built from.
    """

    breaks: ClassVar[str] = "PUT-4"
    also: ClassVar[tuple[str, ...]] = ("MASK-4",)

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        known = state.entries.get(call)
        if known is not None and known != payload and not state.retired:
            state.entries[call] = payload
            state.version += 1
            return
        super().apply_put(rollout_id, state, call, payload)


class CaseFoldedRollouts(BaseStore):
    """PUT-5: rollout ids that differ only by case share one rollout.

    The store's files live on a case-insensitive filesystem (or its keys are lower-cased), so
    ``run.A`` and ``run.a`` are one rollout.
    """

    breaks: ClassVar[str] = "PUT-5"

    def key(self, rollout_id: str) -> str:
        return rollout_id.lower()


class NormalizedSeparators(BaseStore):
    """PUT-5: ``.``, ``_`` and ``-`` in rollout ids are all mapped to ``_``.

    A key sanitizer meant to make ids safe for another system merges distinct rollouts.
    """

    breaks: ClassVar[str] = "PUT-5"

    def key(self, rollout_id: str) -> str:
        return re.sub(r"[._-]", "_", rollout_id)


class MarksByTask(BaseStore):
    """PUT-5: a mark is recorded for the task (the id before the first ``.``) and read from it.

    The store assumes ``<task>.<sample>`` ids and masks a whole task when one sample fails, so
    marking one rollout marks its neighbours; and the task's mark, kept apart from the rollout,
    outlives a delete of the rollout, so the reused id starts out masked.
    """

    breaks: ClassVar[str] = "PUT-5"
    also: ClassVar[tuple[str, ...]] = ("EXT-RETIRE-1",)

    def task(self, rollout_id: str) -> str:
        return rollout_id.split(".", 1)[0] + ".task"

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        await super().mark_incomplete(rollout_id, model_call_id)
        with self.transaction(self.task(rollout_id)) as task:
            task.incomplete = True

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> Any:
        found = super().snapshot(rollout_id, state)
        if self.load(self.task(rollout_id)).incomplete and not found.incomplete:
            return type(found)(
                found.rollout_id, found.entries, True, found.snapshot_id, found.version
            )
        return found


_COUNTER = "zz-store-wide-counter"


class StoreWideVersion(BaseStore):
    """PUT-5: a snapshot's version is the store-wide change counter, not the rollout's own.

    Versions come from one global sequence (a Redis INCR key, a database LSN) read at freeze
    and at drop, so a write to any other rollout makes a frozen rollout's drop fail and its
    next freeze mint a new snapshot.
    """

    breaks: ClassVar[str] = "PUT-5"

    def global_version(self) -> int:
        return self.load(_COUNTER).version

    @contextmanager
    def transaction(self, rollout_id: str) -> Iterator[RolloutFileState]:
        with super().transaction(rollout_id) as state:
            before = state.version
            try:
                yield state
            finally:
                if state.version != before:
                    with super().transaction(_COUNTER) as counter:
                        counter.version += 1

    def apply_freeze(self, rollout_id: str, state: RolloutFileState) -> None:
        self.refuse_retired(rollout_id, state)
        state.frozen = True
        current = self.global_version()
        if not state.snapshot_id or state.snapshot_version != current:
            state.snapshot_id = uuid.uuid4().hex
            state.snapshot_version = current

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> Any:
        found = super().snapshot(rollout_id, state)
        return type(found)(
            found.rollout_id,
            found.entries,
            found.incomplete,
            found.snapshot_id,
            self.global_version(),
        )

    def matches(self, state: RolloutFileState, snapshot_id: str, version: int) -> bool:
        current = self.global_version()
        return (
            state.frozen
            and not state.retired
            and state.snapshot_id == snapshot_id
            and state.snapshot_version == current
            and version == current
        )


class FirstLineCallIds(BaseStore):
    """PUT-6: a call id is cut at its first newline.

    The store keeps a line-oriented index of call ids and rewrites each entry with the id it
    could index, so a multi-line id comes back as its first line.
    """

    breaks: ClassVar[str] = "PUT-6"

    async def put(self, entry: TokenEntry) -> None:
        first = entry.model_call_id.split("\n", 1)[0] or "-"
        await super().put(entry.model_copy(update={"model_call_id": first}))


def _escaped(call: str) -> str:
    return call.replace("\n", "\\n").replace("\t", "\\t")


class BackslashBlindEscape(BaseStore):
    """PUT-6: call ids are escaped for a line index, and the backslash itself is not.

    The index writes a newline as a backslash and ``n`` and a tab as a backslash and ``t``, and
    leaves a backslash alone; so an id holding a newline and one holding a backslash and ``n``
    share one key, and the second put is taken for a conflicting re-put of the first.
    """

    breaks: ClassVar[str] = "PUT-6"

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        super().apply_put(rollout_id, state, _escaped(call), payload)

    def apply_begin(self, rollout_id: str, state: RolloutFileState, call: str) -> None:
        super().apply_begin(rollout_id, state, _escaped(call))


class TruncatedCallIds(BaseStore):
    """PUT-6: call ids longer than 255 characters are truncated.

    One file per call, named by its id, hits the 255-byte file name limit; the store
    truncates the name and the id with it.
    """

    breaks: ClassVar[str] = "PUT-6"

    async def put(self, entry: TokenEntry) -> None:
        short = entry.model_call_id[:255]
        await super().put(entry.model_copy(update={"model_call_id": short}))


class SanitizedCallIdKeys(BaseStore):
    """PUT-6: call ids are keyed with ``/`` and ``\\`` replaced by ``_``, so look-alikes collide.

    The store names a file per call after a sanitized id; ``a/b`` and ``a_b`` land on one key,
    and the second of them is refused as a conflicting re-put of the first.
    """

    breaks: ClassVar[str] = "PUT-6"

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        key = call.replace("/", "_").replace("\\", "_")
        super().apply_put(rollout_id, state, key, payload)


class ConflictComparesTokensOnly(BaseStore):
    """PUT-4: a re-put counts as identical when its token arrays match, whatever else differs.

    A store that dedupes retries by hashing the tokens keeps the first payload, clean, when a
    call comes back with another timestamp, log prob or output item.
    """

    breaks: ClassVar[str] = "PUT-4"
    also: ClassVar[tuple[str, ...]] = ("MASK-4",)

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        known = state.entries.get(call)
        if known is not None and _tokens(known) == _tokens(payload):
            return
        super().apply_put(rollout_id, state, call, payload)


def _tokens(payload: str) -> tuple[Any, Any]:
    fields = json.loads(payload)
    return fields["prompt_token_ids"], fields["generation_token_ids"]


class PrefixListedRollouts(BaseStore):
    """PUT-5: freeze lists the rollout's records by prefix, so ``r1`` shows up in ``r``.

    A key-value transport reads a rollout with a pattern scan (``KEYS rollout:r*``) and merges
    every record it finds, those of any rollout whose id extends this one's included.
    """

    breaks: ClassVar[str] = "PUT-5"

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        found = super().snapshot(rollout_id, state)
        folder = os.path.join(self.root, "rollouts")
        merged = list(found.entries)
        for name in sorted(os.listdir(folder)):
            other = name.removesuffix(".json")
            if other != rollout_id and other.startswith(rollout_id) and name.endswith(".json"):
                merged += [self.decode(stored) for stored in self.load(other).entries.values()]
        return dataclasses.replace(found, entries=tuple(merged))


class TruncatedRolloutIds(BaseStore):
    """PUT-5: rollout ids are cut to 128 characters to fit the transport's key length.

    Two rollouts whose ids share their first 128 characters share one record set.
    """

    breaks: ClassVar[str] = "PUT-5"

    def key(self, rollout_id: str) -> str:
        return rollout_id[:128]


class AsciiIdentityCheck(BaseStore):
    """PUT-3: a re-put is compared in its ASCII-escaped form with the UTF-8 form stored.

    The two encodings agree for ASCII entries, so the test traffic of most suites passes; an
    identical re-put with non-ASCII text is taken for a conflict.
    """

    breaks: ClassVar[str] = "PUT-3"

    def encode(self, entry: TokenEntry) -> str:
        return json.dumps(json.loads(super().encode(entry)), ensure_ascii=False)

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        if call in state.entries:
            payload = "".join(c if ord(c) < 128 else f"\\u{ord(c):04x}" for c in payload)
        super().apply_put(rollout_id, state, call, payload)


class JoinedRecordKeys(BaseStore):
    """PUT-5: each record is kept under one key joining rollout and call id with a dot.

    The rollout's index of call ids is exact, but the records live in one flat namespace: rollout
    ``r`` with call ``a.x`` and rollout ``r.a`` with call ``x`` both write ``r.a.x``, and the
    later put overwrites what the other rollout reads back.
    """

    breaks: ClassVar[str] = "PUT-5"

    def _record(self, rollout_id: str, call: str) -> str:
        joined = f"{rollout_id}.{call}".encode()
        folder = os.path.join(self.root, "records")
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, hashlib.sha256(joined).hexdigest())

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        super().apply_put(rollout_id, state, call, payload)
        with open(self._record(rollout_id, call), "w", encoding="utf-8") as handle:
            handle.write(payload)

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        found = super().snapshot(rollout_id, state)
        entries = []
        for call, stored in state.entries.items():
            try:
                with open(self._record(rollout_id, call), encoding="utf-8") as handle:
                    stored = handle.read()
            except FileNotFoundError:
                pass
            entries.append(self.decode(stored))
        return dataclasses.replace(found, entries=tuple(entries))


class KeyOrderReput(BaseStore):
    """PUT-3: a re-put is compared as the JSON its serializer wrote, keys in the order built.

    A retry that rebuilt the same output items (a dict filled in another order, as a
    deserializer or another worker builds it) differs byte for byte, so the identical re-put is
    taken for a conflict and masks the rollout.
    """

    breaks: ClassVar[str] = "PUT-3"

    def encode(self, entry: TokenEntry) -> str:
        return json.dumps(entry.model_dump(), allow_nan=True)


class SplitlinesStateReader(BaseStore):
    """PUT-2: the state file is read back line by line with ``str.splitlines``.

    The writer leaves non-ASCII text raw; the reader joins the lines ``splitlines`` gives, which
    is harmless for the newlines JSON escapes, but U+2028, U+2029 and U+0085 are line breaks to
    it as well and vanish from call ids and text.
    """

    breaks: ClassVar[str] = "PUT-2"
    also: ClassVar[tuple[str, ...]] = ("PUT-6",)

    def encode(self, entry: TokenEntry) -> str:
        return json.dumps(json.loads(entry.to_json_bytes()), ensure_ascii=False, allow_nan=True)

    def load(self, rollout_id: str) -> RolloutFileState:
        try:
            with open(self.state_path(rollout_id), encoding="utf-8") as handle:
                text = "".join(handle.read().splitlines())
        except FileNotFoundError:
            return RolloutFileState()
        return RolloutFileState(**json.loads(text))
