"""Lineage: which captured call a new request continues, decided before the model runs.

A serving process asks a :class:`LineageResolver` about each request of a multi-call rollout.
The answer (:class:`LineageResolution`) is one of three:

- ``root``: the request has no model-authored item, so it continues nothing;
- ``resolved``: exactly one captured call of the rollout is proven to be its parent, and the
  answer carries that call's id and its cumulative tokens (prompt then generation);
- ``unresolved``: no parent can be proven. This is always a safe answer: the call is captured
  without a parent and the rollout is masked downstream, never trained on a guessed history.

The proof is by request fingerprints (:mod:`tokcap_spec.fingerprint`): the parent's entry is
stamped with the fingerprint of its conversation including its own answer, and with the digest
of the request items it answered. A later request resolves to it when its model-authored items
fingerprint alike and its leading items digest to the recorded context. A resolver never picks
among several such calls unless they hold the very same tokens.

Once a sink's ``put`` returned, every resolver over the same store, in any serving process,
built before or after the put, sees the entry (LINEAGE-1). The types are those of NeMo Gym
0.7.0: a status compares equal to Gym's and a resolver of either serves the other's capture path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from tokcap_spec.fingerprint import (
    FINGERPRINT_VERSION,
    assistant_fingerprint,
    context_digest,
    token_digest,
)
from tokcap_spec.records import TokenEntry, as_token_entry

__all__ = [
    "LineageMatch",
    "LineageResolution",
    "LineageResolver",
    "ParentResolutionStatus",
    "cumulative_tokens",
    "resolve_from",
]


class ParentResolutionStatus(str, Enum):
    """Whether a request continues a proven captured call; equal to its value as a string."""

    ROOT = "root"
    RESOLVED = "resolved"
    UNRESOLVED = "unresolved"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class LineageMatch:
    """The one captured call a request was proven to continue.

    ``cumulative_token_ids`` is the parent's prompt followed by its generation: the sequence
    the new call's prompt starts with. ``digest`` is :func:`tokcap_spec.fingerprint.token_digest`
    of it, and ``prev_len`` its length. The staging fields stay empty on the capture path.
    """

    model_call_id: str
    cumulative_token_ids: tuple[int, ...]
    digest: str
    staging_chain: tuple[str, ...] = ()
    prev_len: int = 0
    chain_hash: str = ""


@dataclass(frozen=True)
class LineageResolution:
    """One request-time decision: a status, the match when resolved, and why when not.

    A ``resolved`` answer always carries a match and no other answer carries one; building
    anything else raises :class:`ValueError`.
    """

    status: ParentResolutionStatus
    match: LineageMatch | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        status = ParentResolutionStatus(self.status)
        object.__setattr__(self, "status", status)
        if status is ParentResolutionStatus.RESOLVED and self.match is None:
            raise ValueError("a resolved lineage needs the match it resolved to")
        if status is not ParentResolutionStatus.RESOLVED and self.match is not None:
            raise ValueError(f"a {status.value} lineage carries no match")


@runtime_checkable
class LineageResolver(Protocol):
    """A read-only view of what a sink committed, answering which call a request continues.

    Promises (LINEAGE-1 to LINEAGE-3):

    - once ``put`` returned, ``resolve`` in any process that shares the store sees the entry,
      whether the resolver was built before or after the put;
    - a request with no model-authored item is ``root``; one that continues exactly one
      committed call whose recorded context it repeats is ``resolved`` to it;
    - anything else is ``unresolved``: no candidate, a context that was rewritten, candidates
      with different tokens, a call id committed twice with different payloads, or an entry
      stamped by another fingerprint version. A resolver never guesses.

    ``is_process_shared`` says whether resolvers in other processes see this one's store;
    ``close`` releases resources, may be called twice, and has nothing to flush.
    """

    async def resolve(
        self, rollout_id: str, request_items: Sequence[dict[str, Any]]
    ) -> LineageResolution:
        """Decide the parent of a request made of ``request_items`` in ``rollout_id``."""
        ...

    def is_process_shared(self) -> bool:
        """Whether other serving processes' resolvers see the same committed entries."""
        ...

    async def close(self) -> None:
        """Release resources; idempotent."""
        ...


def resolve_from(entries: Iterable[object], request_items: Sequence[object]) -> LineageResolution:
    """Decide the parent of a request among the entries one rollout committed.

    This is the decision :class:`LineageResolver` promises, for a resolver to build on: it
    reads only what it is given and never guesses. ``entries`` may be records of any class
    :func:`tokcap_spec.records.as_token_entry` reads. A candidate is an entry stamped by
    fingerprint version 2 with the request's continuation fingerprint, whose recorded context
    the request repeats, and whose token sequence is known (:func:`cumulative_tokens`).
    Unresolved, with the reason, are: no candidate (``no_match``), candidates with different
    token sequences (``ambiguous``), request items the fingerprint cannot read
    (``unreadable_request``). A call id committed with two payloads is no candidate.
    """
    try:
        fingerprint = assistant_fingerprint(request_items)
    except (TypeError, ValueError) as exc:
        return LineageResolution(
            ParentResolutionStatus.UNRESOLVED, reason=f"unreadable_request: {exc}"
        )
    if not fingerprint:
        return LineageResolution(ParentResolutionStatus.ROOT)
    committed = [as_token_entry(record) for record in entries]
    sequences = cumulative_tokens(committed)
    candidates = [
        entry
        for entry in committed
        if entry.model_call_id in sequences and _continued(entry, fingerprint, request_items)
    ]
    if not candidates:
        return LineageResolution(ParentResolutionStatus.UNRESOLVED, reason="no_match")
    if len({sequences[entry.model_call_id] for entry in candidates}) > 1:
        return LineageResolution(ParentResolutionStatus.UNRESOLVED, reason="ambiguous")
    # Calls holding the very same tokens are interchangeable parents: the lowest id is taken.
    parent = min(candidates, key=lambda entry: entry.model_call_id).model_call_id
    tokens = sequences[parent]
    match = LineageMatch(parent, tokens, token_digest(tokens), prev_len=len(tokens))
    return LineageResolution(ParentResolutionStatus.RESOLVED, match=match)


def cumulative_tokens(entries: Iterable[object]) -> dict[str, tuple[int, ...]]:
    """Each call's whole token sequence (its prompt, then its generation), by call id.

    An entry whose prompt is a delta (``prompt_is_delta``, as NeMo Gym writes with
    ``delta_records``) holds only what its prompt adds to its parent's sequence
    (``parent_call_id``): its sequence is the parent's followed by its own tokens. Left out
    are the calls committed with two different payloads, a delta whose parent is missing or
    left out, and any call whose sequence does not hash to the ``digest`` stamped on it.
    """
    payloads: dict[str, set[bytes]] = {}
    by_call: dict[str, TokenEntry] = {}
    for record in entries:
        entry = as_token_entry(record)
        payloads.setdefault(entry.model_call_id, set()).add(entry.to_json_bytes())
        by_call.setdefault(entry.model_call_id, entry)
    known: dict[str, tuple[int, ...] | None] = {}

    def sequence(call: str, depth: int) -> tuple[int, ...] | None:
        if call in known:
            return known[call]
        entry = by_call.get(call)
        known[call] = None  # a parent chain that comes back here is no chain
        if entry is None or len(payloads[call]) > 1 or depth > len(by_call):
            return None
        own = (*entry.prompt_token_ids, *entry.generation_token_ids)
        if getattr(entry, "prompt_is_delta", False):
            parent = getattr(entry, "parent_call_id", None)
            base = sequence(parent, depth + 1) if isinstance(parent, str) else None
            if base is None:
                return None
            own = (*base, *own)
        digest = getattr(entry, "digest", None)
        if digest and digest != token_digest(own):
            return None
        known[call] = own
        return own

    found = {call: sequence(call, 0) for call in by_call}
    return {call: tokens for call, tokens in found.items() if tokens is not None}


def _continued(entry: TokenEntry, fingerprint: str, request_items: Sequence[object]) -> bool:
    """Whether ``entry`` is a parent the request is proven to continue."""

    def stamped(name: str) -> Any:
        return getattr(entry, name, None)

    if stamped("fingerprint_version") != FINGERPRINT_VERSION:
        return False
    if stamped("continuation_fingerprint") != fingerprint:
        return False
    length, digest = stamped("continuation_context_len"), stamped("continuation_context_digest")
    if type(length) is not int or not 0 <= length <= len(request_items) or not digest:
        return False
    try:
        return bool(context_digest(request_items[:length]) == digest)
    except (TypeError, ValueError):
        return False
