"""COST mutants: correct stores that cost the serving loop more than the default budget allows.

Each is the reference file store, judged with ``--tokcap-budget=default``, and keeps every other
promise; its cost shows only on long-context calls, as it would in production, where the short
calls of a test suite hide it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
import uuid
from typing import Any, ClassVar

from reference.file_store import FileTokenStore
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry

BUDGET = ("--tokcap-budget=default",)
LONG_CONTEXT = 4_096
"""Prompt tokens from which a call counts as long-context for these stores."""


def _long(entry: TokenEntry) -> bool:
    return len(entry.prompt_token_ids) >= LONG_CONTEXT


class BlockingUploadPut(FileTokenStore):
    """COST-1: a long-context entry is uploaded with a blocking client inside ``put``.

    Short entries go into the local log; long ones are sent to an object store with a
    synchronous HTTP client, so the event loop that serves every other rollout of the worker
    stands still for the whole upload.
    """

    breaks: ClassVar[str] = "COST-1"
    flags: ClassVar[tuple[str, ...]] = BUDGET

    async def put(self, entry: TokenEntry) -> None:
        if isinstance(entry, TokenEntry) and _long(entry):
            time.sleep(0.15)  # the blocking upload
        await super().put(entry)


class RewritesRolloutOnPut(FileTokenStore):
    """COST-1: every put rewrites the whole rollout's document, on the loop.

    Beside its log the store keeps each rollout as one JSON document that people browse: a
    row per token of every call. A put reads that document back, adds its own call's rows and
    writes the document again, all inside the coroutine. A short rollout costs little; a long
    conversation, whose every prompt repeats the context before it, costs more at each turn,
    until one put holds the loop for longer than any other rollout can wait. Such a put also
    answers late, and the puts of other rollouts wait behind it (COST-2).
    """

    breaks: ClassVar[str] = "COST-1"
    also: ClassVar[tuple[str, ...]] = ("COST-2",)
    flags: ClassVar[tuple[str, ...]] = BUDGET

    def __init__(self, root: str, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self._documents = os.path.join(self.root, "documents")
        os.makedirs(self._documents, exist_ok=True)

    async def put(self, entry: TokenEntry) -> None:
        await super().put(entry)
        if not isinstance(entry, TokenEntry):
            return
        name = hashlib.sha256(entry.rollout_id.encode()).hexdigest()
        path = os.path.join(self._documents, f"{name}.json")
        try:
            with open(path, encoding="utf-8") as handle:
                document = json.load(handle)
        except FileNotFoundError:
            document = {}
        document[entry.model_call_id] = {
            "prompt": [{"token": token} for token in entry.prompt_token_ids],
            "generation": [
                {"token": token, "log_prob": log_prob}
                for token, log_prob in zip(
                    entry.generation_token_ids, entry.generation_log_probs, strict=True
                )
            ],
        }
        scratch = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(scratch, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(scratch, path)


class WaitsForReplicaAck(FileTokenStore):
    """COST-2: a long-context put waits for a replica's acknowledgement before it returns.

    The wait is awaited, so the loop stays free, but every long call's answer to the model
    server is late by the replica's round trip and queueing.
    """

    breaks: ClassVar[str] = "COST-2"
    flags: ClassVar[tuple[str, ...]] = BUDGET

    async def put(self, entry: TokenEntry) -> None:
        await super().put(entry)
        if isinstance(entry, TokenEntry) and _long(entry):
            await asyncio.sleep(0.8)  # the replica's acknowledgement


class FetchesEachEntryOnFreeze(FileTokenStore):
    """COST-3: freeze fetches each long-context entry's payload with a round trip of its own.

    The snapshot is right, and a freeze of short calls is quick; a rollout of long calls costs
    one remote read per entry, far more per MiB than reading the rollout in one pass.
    """

    breaks: ClassVar[str] = "COST-3"
    flags: ClassVar[tuple[str, ...]] = BUDGET

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        snapshot = await super().freeze(rollout_id)
        for entry in snapshot.entries:
            if _long(entry):
                await asyncio.sleep(0.03)  # one remote read per entry
        return snapshot
