"""LINEAGE mutants: resolvers that answer for an old state, name the wrong parent, or guess.

Each is the reference file store and a lineage resolver over it in one class, judged as sink,
source and resolver at once: only the way it resolves is broken.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from reference.file_store import FileTokenStore
from tokcap_spec.fingerprint import assistant_fingerprint, context_digest, token_digest
from tokcap_spec.lineage import (
    LineageMatch,
    LineageResolution,
    ParentResolutionStatus,
    resolve_from,
)
from tokcap_spec.records import TokenEntry


class _Resolving(FileTokenStore):
    """A file store that also resolves lineage from what it holds; correct unless overridden."""

    async def resolve(
        self, rollout_id: str, request_items: Sequence[dict[str, Any]]
    ) -> LineageResolution:
        return self.decide(await self.entries_of(rollout_id), request_items)

    async def entries_of(self, rollout_id: str) -> tuple[TokenEntry, ...]:
        return await self.peek(rollout_id)

    def decide(
        self, entries: Sequence[TokenEntry], request_items: Sequence[dict[str, Any]]
    ) -> LineageResolution:
        return resolve_from(entries, request_items)

    def is_process_shared(self) -> bool:
        return True


def _flags(name: str) -> tuple[str, ...]:
    return ("--tokcap-fence=strict", f"--tokcap-lineage=zoo_lineage:{name}")


def _resolved(parent: TokenEntry, tokens: Sequence[int]) -> LineageResolution:
    ids = tuple(tokens)
    match = LineageMatch(parent.model_call_id, ids, token_digest(ids), prev_len=len(ids))
    return LineageResolution(ParentResolutionStatus.RESOLVED, match=match)


def _stamp(entry: TokenEntry, name: str) -> Any:
    return getattr(entry, name, None)


class IndexedOnce(_Resolving):
    """LINEAGE-1: each rollout's entries are read once, on its first resolve, and kept.

    An index built on first use and never refreshed: a continuation that arrives after a
    later put is resolved against the rollout as it was, so it comes back unresolved.
    """

    breaks: ClassVar[str] = "LINEAGE-1"
    flags: ClassVar[tuple[str, ...]] = _flags("IndexedOnce")

    def __init__(self, root: Any, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self._index: dict[str, tuple[TokenEntry, ...]] = {}

    async def entries_of(self, rollout_id: str) -> tuple[TokenEntry, ...]:
        if rollout_id not in self._index:
            self._index[rollout_id] = await self.peek(rollout_id)
        return self._index[rollout_id]


class _AnswersOtherwise(_Resolving):
    """Resolves where the correct resolver does, then answers with :meth:`answer`."""

    def decide(
        self, entries: Sequence[TokenEntry], request_items: Sequence[dict[str, Any]]
    ) -> LineageResolution:
        decided = resolve_from(entries, request_items)
        if decided.match is None:
            return decided
        parent = next(e for e in entries if e.model_call_id == decided.match.model_call_id)
        return self.answer(entries, parent)

    def answer(self, entries: Sequence[TokenEntry], parent: TokenEntry) -> LineageResolution:
        raise NotImplementedError


class PromptOnlyParent(_AnswersOtherwise):
    """LINEAGE-2: the parent is right, but its tokens are its prompt without its generation.

    The next call's prompt starts with what the parent generated, so a sequence built on these
    tokens drops the parent's answer.
    """

    breaks: ClassVar[str] = "LINEAGE-2"
    flags: ClassVar[tuple[str, ...]] = _flags("PromptOnlyParent")

    def answer(self, entries: Sequence[TokenEntry], parent: TokenEntry) -> LineageResolution:
        return _resolved(parent, parent.prompt_token_ids)


class LatestCallIsParent(_AnswersOtherwise):
    """LINEAGE-2: any continuation resolves to the rollout's latest call.

    Fine while every rollout is a straight line of calls answered in order; wrong as soon as a
    request continues an earlier call than the last one put.
    """

    breaks: ClassVar[str] = "LINEAGE-2"
    flags: ClassVar[tuple[str, ...]] = _flags("LatestCallIsParent")

    def answer(self, entries: Sequence[TokenEntry], parent: TokenEntry) -> LineageResolution:
        latest = entries[-1]
        return _resolved(latest, (*latest.prompt_token_ids, *latest.generation_token_ids))


class SkipsContextCheck(_Resolving):
    """LINEAGE-3: a parent is matched by the model's turns alone; the context is not verified.

    A harness that rewrote or summarized the history still sends the same model turns, so the
    old parent's tokens are spliced onto a context the model never saw.
    """

    breaks: ClassVar[str] = "LINEAGE-3"
    flags: ClassVar[tuple[str, ...]] = _flags("SkipsContextCheck")

    def decide(
        self, entries: Sequence[TokenEntry], request_items: Sequence[dict[str, Any]]
    ) -> LineageResolution:
        fingerprint = assistant_fingerprint(request_items)
        if not fingerprint:
            return LineageResolution(ParentResolutionStatus.ROOT)
        for entry in entries:
            stamped = _stamp(entry, "continuation_fingerprint") == fingerprint
            if stamped and _stamp(entry, "fingerprint_version") == 2:
                return _resolved(entry, (*entry.prompt_token_ids, *entry.generation_token_ids))
        return LineageResolution(ParentResolutionStatus.UNRESOLVED, reason="no_match")


class FirstOfTwins(_Resolving):
    """LINEAGE-3: among calls that answered alike, the first one put is taken as the parent.

    Two samples of one prompt often answer with the same text and different tokens; picking
    one trains the continuation on tokens it may not have followed.
    """

    breaks: ClassVar[str] = "LINEAGE-3"
    flags: ClassVar[tuple[str, ...]] = _flags("FirstOfTwins")

    def decide(
        self, entries: Sequence[TokenEntry], request_items: Sequence[dict[str, Any]]
    ) -> LineageResolution:
        decided = resolve_from(entries, request_items)
        if decided.reason != "ambiguous":
            return decided
        fingerprint = assistant_fingerprint(request_items)
        for entry in entries:
            length = _stamp(entry, "continuation_context_len")
            if _stamp(entry, "continuation_fingerprint") == fingerprint and (
                context_digest(request_items[:length])
                == _stamp(entry, "continuation_context_digest")
            ):
                return _resolved(entry, (*entry.prompt_token_ids, *entry.generation_token_ids))
        return decided


class AwaitedSharedFlag(_Resolving):
    """LINEAGE-1: ``is_process_shared`` is declared ``async``.

    A serving process calls it without awaiting, and a coroutine object is always true: a
    resolver that meant to say anything is taken to say "shared".
    """

    breaks: ClassVar[str] = "LINEAGE-1"
    flags: ClassVar[tuple[str, ...]] = _flags("AwaitedSharedFlag")

    async def is_process_shared(self) -> bool:  # type: ignore[override]
        return True
