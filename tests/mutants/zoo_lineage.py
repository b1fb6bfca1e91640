"""LINEAGE mutants: resolvers that answer for an old state, name the wrong parent, or guess.

Each is the reference file store and a lineage resolver over it in one class, judged as sink,
source and resolver at once: only the way it resolves is broken.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from base import BaseStore, RelaxedFileStore, RolloutFileState

from reference.file_store import FileTokenStore
from reference.memory_store import MemoryTokenStore
from tokcap_spec.fingerprint import assistant_fingerprint, context_digest, token_digest
from tokcap_spec.lineage import (
    LineageMatch,
    LineageResolution,
    ParentResolutionStatus,
    cumulative_tokens,
    resolve_from,
)
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry

Items = Sequence[dict[str, Any]]


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
    also: ClassVar[tuple[str, ...]] = ("LINEAGE-3",)
    """The index it keeps outlives a delete: a continuation of the deleted attempt's call
    still resolves once the rollout id is used again."""
    flags: ClassVar[tuple[str, ...]] = _flags("IndexedOnce")

    def __init__(self, root: Any, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self._index: dict[str, tuple[TokenEntry, ...]] = {}

    async def entries_of(self, rollout_id: str) -> tuple[TokenEntry, ...]:
        if rollout_id not in self._index:
            self._index[rollout_id] = await self.peek(rollout_id)
        return self._index[rollout_id]


class MergedCallIndex(_Resolving):
    """LINEAGE-3: each resolve merges the rollout's entries into an index of call ids that is
    kept per rollout and never pruned.

    Every put is seen at once, but a call of an attempt deleted with its rollout stays in the
    index: asked for after the rollout id was used again with other call ids, it resolves.
    """

    breaks: ClassVar[str] = "LINEAGE-3"
    flags: ClassVar[tuple[str, ...]] = _flags("MergedCallIndex")

    def __init__(self, root: Any, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self._merged: dict[str, dict[str, TokenEntry]] = {}

    async def entries_of(self, rollout_id: str) -> tuple[TokenEntry, ...]:
        merged = self._merged.setdefault(rollout_id, {})
        for entry in await self.peek(rollout_id):
            merged[entry.model_call_id] = entry
        return tuple(merged.values())


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
        sequences = cumulative_tokens(entries)
        for entry in entries:
            stamped = _stamp(entry, "continuation_fingerprint") == fingerprint
            if stamped and _stamp(entry, "fingerprint_version") == 2:
                return _resolved(entry, sequences[entry.model_call_id])
        return LineageResolution(ParentResolutionStatus.UNRESOLVED, reason="no_match")


class MemoizedVerification(_Resolving):
    """LINEAGE-3: a resolution, once verified, is kept per rollout, model turns and length.

    Verifying the recorded context costs a digest of the whole request, so the answer is
    memoized; a later request with the same model turns and as many items, whose history was
    rewritten, is answered from the memo without being verified.
    """

    breaks: ClassVar[str] = "LINEAGE-3"
    flags: ClassVar[tuple[str, ...]] = _flags("MemoizedVerification")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._verified: dict[tuple[str, str, int], LineageResolution] = {}

    async def resolve(
        self, rollout_id: str, request_items: Sequence[dict[str, Any]]
    ) -> LineageResolution:
        memo = (rollout_id, assistant_fingerprint(request_items), len(request_items))
        if memo in self._verified:
            return self._verified[memo]
        answer = await super().resolve(rollout_id, request_items)
        if answer.status == ParentResolutionStatus.RESOLVED:
            self._verified[memo] = answer
        return answer


class _WhenAmbiguous(_Resolving):
    """Resolves as the correct resolver does, except where it finds candidates with different
    tokens: then :meth:`ambiguous` answers."""

    def decide(
        self, entries: Sequence[TokenEntry], request_items: Sequence[dict[str, Any]]
    ) -> LineageResolution:
        decided = resolve_from(entries, request_items)
        if decided.reason != "ambiguous":
            return decided
        return self.ambiguous(entries, request_items)

    def ambiguous(self, entries: Sequence[TokenEntry], request_items: Items) -> LineageResolution:
        raise NotImplementedError


class FirstOfTwins(_WhenAmbiguous):
    """LINEAGE-3: among calls that answered alike, the first one put is taken as the parent.

    Two samples of one prompt often answer with the same text and different tokens; picking
    one trains the continuation on tokens it may not have followed.
    """

    breaks: ClassVar[str] = "LINEAGE-3"
    flags: ClassVar[tuple[str, ...]] = _flags("FirstOfTwins")

    def ambiguous(self, entries: Sequence[TokenEntry], request_items: Items) -> LineageResolution:
        fingerprint = assistant_fingerprint(request_items)
        for entry in entries:
            length = _stamp(entry, "continuation_context_len")
            if _stamp(entry, "continuation_fingerprint") == fingerprint and (
                context_digest(request_items[:length])
                == _stamp(entry, "continuation_context_digest")
            ):
                return _resolved(entry, (*entry.prompt_token_ids, *entry.generation_token_ids))
        return resolve_from(entries, request_items)


class EqualLengthTwins(_WhenAmbiguous):
    """LINEAGE-3: candidates whose sequences have one length are taken for retries of one call.

    Tokenizing the same text twice gives sequences of one length, so the resolver treats
    same-length candidates as interchangeable and takes the first: twins that sampled other
    tokens of that length resolve.
    """

    breaks: ClassVar[str] = "LINEAGE-3"
    flags: ClassVar[tuple[str, ...]] = _flags("EqualLengthTwins")

    def ambiguous(self, entries: Sequence[TokenEntry], request_items: Items) -> LineageResolution:
        fingerprint = assistant_fingerprint(request_items)
        found = [
            entry
            for entry in entries
            if _stamp(entry, "continuation_fingerprint") == fingerprint
            and context_digest(request_items[: _stamp(entry, "continuation_context_len")])
            == _stamp(entry, "continuation_context_digest")
        ]
        lengths = {len(entry.prompt_token_ids) + len(entry.generation_token_ids) for entry in found}
        if len(lengths) != 1:
            return resolve_from(entries, request_items)
        first = found[0]
        return _resolved(first, (*first.prompt_token_ids, *first.generation_token_ids))


class AwaitedSharedFlag(_Resolving):
    """LINEAGE-1: ``is_process_shared`` is declared ``async``.

    A serving process calls it without awaiting, and a coroutine object is always true: a
    resolver that meant to say anything is taken to say "shared".
    """

    breaks: ClassVar[str] = "LINEAGE-1"
    flags: ClassVar[tuple[str, ...]] = _flags("AwaitedSharedFlag")

    async def is_process_shared(self) -> bool:  # type: ignore[override]
        return True


class SkipsMarkedRollouts(_Resolving):
    """LINEAGE-2: a rollout marked incomplete is given up on: every continuation in it is
    answered unresolved.

    The consumer masks such a rollout anyway, so a server that remembers the marks it took
    stops resolving there; but the calls committed in it are still proven parents, and later
    calls of the rollout lose their lineage for nothing.
    """

    breaks: ClassVar[str] = "LINEAGE-2"
    flags: ClassVar[tuple[str, ...]] = _flags("SkipsMarkedRollouts")
    marked: ClassVar[set[str]] = set()

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        await super().mark_incomplete(rollout_id, model_call_id)
        self.marked.add(rollout_id)

    async def resolve(
        self, rollout_id: str, request_items: Sequence[dict[str, Any]]
    ) -> LineageResolution:
        decided = await super().resolve(rollout_id, request_items)
        if rollout_id in self.marked and decided.status is ParentResolutionStatus.RESOLVED:
            return LineageResolution(ParentResolutionStatus.UNRESOLVED, reason="incomplete")
        return decided


class DeltaTakenWhole(_Resolving):
    """LINEAGE-2: every entry's prompt is taken for its whole prompt, ``prompt_is_delta`` or not.

    Written before ``delta_records`` existed: a delta entry's own tokens no longer hash to its
    digest, so it is dropped as tampered, and every continuation of it comes back unresolved.
    """

    breaks: ClassVar[str] = "LINEAGE-2"
    flags: ClassVar[tuple[str, ...]] = _flags("DeltaTakenWhole")

    def decide(
        self, entries: Sequence[TokenEntry], request_items: Sequence[dict[str, Any]]
    ) -> LineageResolution:
        whole = [entry.model_copy(update={"prompt_is_delta": False}) for entry in entries]
        return resolve_from(whole, request_items)


def _folded(call_id: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", call_id).casefold().replace("/", "_").split())


class FoldsLookalikeTwins(_WhenAmbiguous):
    """LINEAGE-3: candidates whose call ids fold to one (case, padding, unicode form,
    separators) are taken for one call, retried, and the first is the parent.

    Meant to merge a call that a flaky client sent twice under a reformatted id; two different
    calls whose ids only look alike are merged too, and one's tokens are spliced under the
    other's continuation.
    """

    breaks: ClassVar[str] = "LINEAGE-3"
    flags: ClassVar[tuple[str, ...]] = _flags("FoldsLookalikeTwins")

    def ambiguous(self, entries: Sequence[TokenEntry], request_items: Items) -> LineageResolution:
        kept: dict[str, TokenEntry] = {}
        for entry in entries:
            kept.setdefault(_folded(entry.model_call_id), entry)
        return resolve_from(list(kept.values()), request_items)


class EmptyDigestTrusted(_Resolving):
    """LINEAGE-3: an entry with no recorded context digest is matched on its model turns alone.

    Kept for records written before the context was stamped; a record whose digest is empty
    now lets a rewritten history resolve to it.
    """

    breaks: ClassVar[str] = "LINEAGE-3"
    flags: ClassVar[tuple[str, ...]] = _flags("EmptyDigestTrusted")

    def decide(
        self, entries: Sequence[TokenEntry], request_items: Sequence[dict[str, Any]]
    ) -> LineageResolution:
        fingerprint = assistant_fingerprint(request_items)
        for entry in entries:
            bare = not _stamp(entry, "continuation_context_digest")
            if bare and fingerprint and _stamp(entry, "continuation_fingerprint") == fingerprint:
                return _resolved(entry, (*entry.prompt_token_ids, *entry.generation_token_ids))
        return resolve_from(entries, request_items)


class KeepsFirstSeenCall(_Resolving):
    """LINEAGE-3: each call id's entry is read once and kept, since an acked entry never changes.

    True until a rollout is deleted and its id used again: the new attempt's ``call-0`` is
    never read, and a continuation of the deleted attempt's ``call-0`` still resolves.
    """

    breaks: ClassVar[str] = "LINEAGE-3"
    flags: ClassVar[tuple[str, ...]] = _flags("KeepsFirstSeenCall")

    def __init__(self, root: Any, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self._seen: dict[tuple[str, str], TokenEntry] = {}

    async def entries_of(self, rollout_id: str) -> tuple[TokenEntry, ...]:
        for entry in await self.peek(rollout_id):
            self._seen.setdefault((rollout_id, entry.model_call_id), entry)
        return tuple(entry for (rollout, _), entry in self._seen.items() if rollout == rollout_id)


class SharedOverLocal(MemoryTokenStore):
    """LINEAGE-1: a resolver over a process-local memory store says ``is_process_shared()``.

    Copied from the file store's resolver with the flag left as it was: other workers trust
    it, and nothing they put is ever seen here.
    """

    breaks: ClassVar[str] = "LINEAGE-1"
    flags: ClassVar[tuple[str, ...]] = (
        "--tokcap-capability=process-local",
        "--tokcap-fence=strict",
        "--tokcap-lineage=zoo_lineage:SharedOverLocal",
    )

    def __init__(self, root: Any = "default") -> None:
        super().__init__(namespace=str(root))

    async def resolve(
        self, rollout_id: str, request_items: Sequence[dict[str, Any]]
    ) -> LineageResolution:
        return resolve_from(await self.peek(rollout_id), request_items)

    def is_process_shared(self) -> bool:
        return True


class AssistantMessageRoots(_Resolving):
    """LINEAGE-2: a request with no item of role ``assistant`` is taken for a root.

    True of chat and of Anthropic's messages; in the Responses dialect a model turn that is a
    tool call alone is a ``function_call`` item with no role, and its continuation comes back
    a root instead of resolving to the call.
    """

    breaks: ClassVar[str] = "LINEAGE-2"
    flags: ClassVar[tuple[str, ...]] = _flags("AssistantMessageRoots")

    def decide(self, entries: Sequence[TokenEntry], request_items: Items) -> LineageResolution:
        if not any(item.get("role") == "assistant" for item in request_items):
            return LineageResolution(ParentResolutionStatus.ROOT)
        return resolve_from(entries, request_items)


_PUT_INTO: set[str] = set()
"""The rollouts this process put into, in the order met."""


class SearchesSiblingRollouts(_Resolving):
    """LINEAGE-3: a request its own rollout has calls for, none of them its parent, is looked
    up in the other rollouts this process wrote, and a parent found there is taken.

    Meant to rescue requests a harness sent under the wrong rollout id; it splices another
    conversation's tokens into this one.
    """

    breaks: ClassVar[str] = "LINEAGE-3"
    flags: ClassVar[tuple[str, ...]] = _flags("SearchesSiblingRollouts")

    async def put(self, entry: TokenEntry) -> None:
        await super().put(entry)
        _PUT_INTO.add(entry.rollout_id)

    async def resolve(self, rollout_id: str, request_items: Items) -> LineageResolution:
        own = await self.peek(rollout_id)
        decided = resolve_from(own, request_items)
        if not own or decided.status is not ParentResolutionStatus.UNRESOLVED:
            return decided
        for other in sorted(_PUT_INTO - {rollout_id}):
            found = resolve_from(await self.peek(other), request_items)
            if found.status is ParentResolutionStatus.RESOLVED:
                return found
        return decided


class PooledSiblingRollouts(_Resolving):
    """LINEAGE-3: a request its own rollout proves no parent for is resolved among the calls
    of every rollout this process wrote under the request's fingerprint, pooled.

    Meant for attempt-scoped rollout ids, whose retried attempt continues history captured
    under the previous attempt's id; pooling keeps it from picking among look-alike
    conversations, but a conversation only one other rollout had is spliced in.
    """

    breaks: ClassVar[str] = "LINEAGE-3"
    flags: ClassVar[tuple[str, ...]] = _flags("PooledSiblingRollouts")

    async def put(self, entry: TokenEntry) -> None:
        await super().put(entry)
        fingerprint = _stamp(entry, "continuation_fingerprint")
        if fingerprint:
            _BY_FINGERPRINT.setdefault(fingerprint, set()).add(entry.rollout_id)

    async def resolve(self, rollout_id: str, request_items: Items) -> LineageResolution:
        decided = resolve_from(await self.peek(rollout_id), request_items)
        if decided.status is not ParentResolutionStatus.UNRESOLVED:
            return decided
        others = _BY_FINGERPRINT.get(assistant_fingerprint(request_items), set()) - {rollout_id}
        pooled = [entry for other in sorted(others) for entry in await self.peek(other)]
        found = resolve_from(pooled, request_items)
        return found if found.status is ParentResolutionStatus.RESOLVED else decided


_BY_FINGERPRINT: dict[str, set[str]] = {}


_AGAIN = "\x00\x00again"
"""What the key of a call's second payload adds to its call id."""


class SilentConflicts(BaseStore):
    """A correct store that acks a conflicting re-put (MASK-4's silent conflict), and resolves.

    The rollout is marked incomplete for good and freezes with the first payload; the second is
    kept beside it, so the resolver sees a call committed with two payloads and never takes it
    as a parent. Judged as sink, source and resolver at once.
    """

    def apply_put(self, rollout_id: str, state: RolloutFileState, call: str, payload: str) -> None:
        known = state.entries.get(call)
        if known is None or known == payload or state.entries.get(call + _AGAIN) == payload:
            super().apply_put(rollout_id, state, call, payload if known is None else known)
            return
        self.refuse_retired(rollout_id, state)
        state.entries.setdefault(call + _AGAIN, payload)
        state.incomplete = True
        self.bump(state)

    def snapshot(self, rollout_id: str, state: RolloutFileState) -> TokenCaptureSnapshot:
        found = super().snapshot(rollout_id, state)
        kept = tuple(entry for entry in found.entries if not entry_conflict(entry, state))
        return TokenCaptureSnapshot(
            found.rollout_id, kept, found.incomplete, found.snapshot_id, found.version
        )

    def committed(self, rollout_id: str) -> list[TokenEntry]:
        """Every payload the rollout's calls were committed with, second ones included."""
        with self.locked(rollout_id):
            state = self.load(rollout_id)
        if state.deleted or state.retired:
            return []
        return [self.decode(stored) for stored in state.entries.values()]

    async def resolve(self, rollout_id: str, request_items: Items) -> LineageResolution:
        return resolve_from(self.committed(rollout_id), request_items)

    def is_process_shared(self) -> bool:
        return True


def entry_conflict(entry: TokenEntry, state: RolloutFileState) -> bool:
    """Whether ``entry`` is the second payload of its call, kept only for lineage."""
    return state.entries.get(entry.model_call_id + _AGAIN) == entry.to_json_bytes().decode()


class FirstPayloadOnly(SilentConflicts):
    """LINEAGE-3: the resolver reads what a freeze reads, the first payload of each call.

    A call acked with two payloads looks like any other: a continuation resolves to it and
    takes tokens the model may never have produced.
    """

    breaks: ClassVar[str] = "LINEAGE-3"
    flags: ClassVar[tuple[str, ...]] = (
        "--tokcap-fence=strict",
        "--tokcap-lineage=zoo_lineage:FirstPayloadOnly",
    )

    def committed(self, rollout_id: str) -> list[TokenEntry]:
        seen: dict[str, TokenEntry] = {}
        for entry in super().committed(rollout_id):
            seen.setdefault(entry.model_call_id, entry)
        return list(seen.values())


class _RelaxedResolving(RelaxedFileStore):
    """A relaxed-fence store that resolves from what its rollouts hold; correct unless
    overridden. Judged as sink, source and resolver at once."""

    def held(self, rollout_id: str) -> list[TokenEntry]:
        with self.locked(rollout_id):
            state = self.load(rollout_id)
        return self.entries_in(rollout_id, state)

    def entries_in(self, rollout_id: str, state: RolloutFileState) -> list[TokenEntry]:
        if state.deleted or state.retired:
            return []
        return [self.decode(stored) for stored in state.entries.values()]

    async def resolve(self, rollout_id: str, request_items: Items) -> LineageResolution:
        return resolve_from(self.held(rollout_id), request_items)

    def is_process_shared(self) -> bool:
        return True


class FrozenRowsCached(_RelaxedResolving):
    """LINEAGE-1: a frozen rollout's entries are read once per snapshot id and kept.

    A snapshot never changes, so its rows seem safe to cache; but a relaxed fence accepts a
    put after the freeze without a new snapshot id until the next freeze, and a continuation
    of that late call comes back unresolved.
    """

    breaks: ClassVar[str] = "LINEAGE-1"
    flags: ClassVar[tuple[str, ...]] = ("--tokcap-lineage=zoo_lineage:FrozenRowsCached",)

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._frozen: dict[tuple[str, str], list[TokenEntry]] = {}

    def entries_in(self, rollout_id: str, state: RolloutFileState) -> list[TokenEntry]:
        if not state.frozen or state.deleted or state.retired:
            return super().entries_in(rollout_id, state)
        key = (rollout_id, state.snapshot_id)
        if key not in self._frozen:
            self._frozen[key] = super().entries_in(rollout_id, state)
        return self._frozen[key]


class ShortHistoryTrusted(_Resolving):
    """LINEAGE-3: a request shorter than a candidate's recorded context is taken for a history
    the harness trimmed, and that candidate is trusted on its model turns alone.

    A summarized conversation keeps the model's last turn, so the parent's tokens are spliced
    onto a context the model never saw.
    """

    breaks: ClassVar[str] = "LINEAGE-3"
    flags: ClassVar[tuple[str, ...]] = _flags("ShortHistoryTrusted")

    def decide(self, entries: Sequence[TokenEntry], request_items: Items) -> LineageResolution:
        fingerprint = assistant_fingerprint(request_items)
        sequences = cumulative_tokens(entries)
        trimmed = [
            entry
            for entry in entries
            if fingerprint
            and _stamp(entry, "continuation_fingerprint") == fingerprint
            and _stamp(entry, "fingerprint_version") == 2
            and (_stamp(entry, "continuation_context_len") or 0) > len(request_items)
            and entry.model_call_id in sequences
        ]
        if len(trimmed) == 1:
            return _resolved(trimmed[0], sequences[trimmed[0].model_call_id])
        return resolve_from(entries, request_items)


class PooledEveryRollout(_Resolving):
    """LINEAGE-3: a request no call of its own rollout proves is resolved among the calls of
    every rollout this process wrote, pooled by call id.

    Calls under a call id many rollouts used are left out as committed twice, which hides the
    fallback in a busy store; a parent under a call id only one other rollout used is spliced
    into this conversation.
    """

    breaks: ClassVar[str] = "LINEAGE-3"
    flags: ClassVar[tuple[str, ...]] = _flags("PooledEveryRollout")

    async def put(self, entry: TokenEntry) -> None:
        await super().put(entry)
        _PUT_INTO.add(entry.rollout_id)

    async def resolve(self, rollout_id: str, request_items: Items) -> LineageResolution:
        decided = resolve_from(await self.peek(rollout_id), request_items)
        if decided.status is not ParentResolutionStatus.UNRESOLVED:
            return decided
        pooled = [
            entry for other in sorted(_PUT_INTO - {rollout_id}) for entry in await self.peek(other)
        ]
        found = resolve_from(pooled, request_items)
        return found if found.status is ParentResolutionStatus.RESOLVED else decided


class ServesWhatItPut(_Resolving):
    """LINEAGE-1: once this process put into a rollout, the rollout is served from a
    process-wide cache of what it put.

    A write-through cache that trusts the process writing a rollout to be its only writer:
    a call another worker adds to that rollout is never seen here, so its continuation
    comes back unresolved.
    """

    breaks: ClassVar[str] = "LINEAGE-1"
    flags: ClassVar[tuple[str, ...]] = _flags("ServesWhatItPut")

    async def put(self, entry: TokenEntry) -> None:
        await super().put(entry)
        _PUT_HERE.setdefault((self.root, entry.rollout_id), []).append(entry)

    async def entries_of(self, rollout_id: str) -> tuple[TokenEntry, ...]:
        cached = _PUT_HERE.get((self.root, rollout_id))
        return tuple(cached) if cached else await self.peek(rollout_id)

    async def retire(self, rollout_ids: Iterable[str]) -> None:
        rollout_ids = list(rollout_ids)
        await super().retire(rollout_ids)
        self._forget(rollout_ids)

    async def delete(self, rollout_ids: Iterable[str]) -> None:
        rollout_ids = list(rollout_ids)
        await super().delete(rollout_ids)
        self._forget(rollout_ids)

    def _forget(self, rollout_ids: list[str]) -> None:
        for rollout_id in rollout_ids:
            _PUT_HERE.pop((self.root, rollout_id), None)


_PUT_HERE: dict[tuple[str, str], list[TokenEntry]] = {}
"""What this process put, by store and rollout."""
