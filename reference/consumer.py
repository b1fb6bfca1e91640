"""The reference consumer: freeze a rollout, build one training row, retire after handoff.

The consumer follows the contract's consumer rules:

* CONS-1 :func:`finalize` freezes the rollout and builds from that snapshot; it never drops.
* CONS-2 :func:`retire_after_handoff` drops with the frozen ``snapshot_id`` and ``version``,
  and only after the caller's handoff wrote the row durably.
* CONS-3 A masked build is never handed off or dropped, and neither is one whose handoff
  raised: its evidence stays in the store.
* CONS-4 With ``rebuild_response: false`` (:func:`should_rebuild` is False) the framework reads
  through its own source, so :func:`consume` stops after the write and touches nothing.

A rollout's calls must form one prefix chain: ordered by length, each call's
``prompt_token_ids`` starts with the previous call's ``prompt_token_ids +
generation_token_ids``; what a prompt adds beyond that are tool or user tokens. The row is the
last call's prompt plus generation; a delta prompt (NeMo Gym's ``delta_records``) is first
written out in full from its parent's sequence. A call that is missing altogether cannot be
seen this way (its generation reads as tool tokens of the next call); ``begin_call`` intents
exist for that, and they surface here as an incomplete snapshot.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from tokcap_spec.config import MaskFractionGuard, TokenIdCaptureConfig, TokenIdCaptureSettings
from tokcap_spec.lineage import cumulative_tokens
from tokcap_spec.protocols import TokenCaptureSnapshot, TokenSource
from tokcap_spec.records import TokenEntry

__all__ = [
    "BrokenChainError",
    "Consumed",
    "FinalizedRollout",
    "Handoff",
    "TrainingRow",
    "build_training_row",
    "consume",
    "finalize",
    "finalize_snapshot",
    "retire_after_handoff",
    "should_rebuild",
]


class BrokenChainError(ValueError):
    """A rollout's calls do not form exactly one prefix chain; the message says where."""


@dataclass(frozen=True)
class TrainingRow:
    """One rollout as a single token sequence, aligned position by position.

    ``loss_mask`` is 1 on every token some call generated and 0 on prompt and tool tokens.
    ``log_probs`` holds the generation log prob on generated positions and 0.0 elsewhere:
    a masked position carries no log prob, so readers must combine it with ``loss_mask``
    rather than treat 0.0 as a probability of one. ``-inf`` log probs are kept as they are.
    ``model_call_ids`` lists the calls in chain order.
    """

    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    log_probs: tuple[float, ...]
    model_call_ids: tuple[str, ...]


@dataclass(frozen=True)
class FinalizedRollout:
    """What :func:`finalize` built from one snapshot: a row, or the reason there is none.

    ``snapshot_id`` and ``version`` are the snapshot's own, so the rollout can be retired
    exactly as it was read.
    """

    rollout_id: str
    snapshot_id: str
    version: int
    row: TrainingRow | None
    mask_reason: str | None = None

    def __post_init__(self) -> None:
        if (self.row is None) == (self.mask_reason is None):
            raise ValueError(
                "a finalized rollout carries either a row or a mask reason, got "
                f"row={'set' if self.row else None} and mask_reason={self.mask_reason!r}"
            )

    @property
    def masked(self) -> bool:
        """Whether the sample is masked (no row to train on)."""
        return self.row is None


Handoff = Callable[[FinalizedRollout], Awaitable[object]]
"""Durably writes a finalized row; returning means written, raising means not written."""


@dataclass(frozen=True)
class Consumed:
    """The outcome of :func:`consume`: the finalized rollout and whether it was dropped."""

    finalized: FinalizedRollout
    dropped: bool


def _chain_order(entries: Iterable[TokenEntry]) -> list[TokenEntry]:
    # In a valid chain prompts and full sequences both grow, so length order is chain order;
    # the call id only breaks ties between calls whose tokens are identical.
    return sorted(
        entries,
        key=lambda e: (
            len(e.prompt_token_ids),
            len(e.prompt_token_ids) + len(e.generation_token_ids),
            e.model_call_id,
        ),
    )


def _common_prefix(left: Sequence[int], right: Sequence[int]) -> int:
    for index, (a, b) in enumerate(zip(left, right, strict=False)):
        if a != b:
            return index
    return min(len(left), len(right))


def _check_link(previous: TokenEntry, current: TokenEntry) -> None:
    full = [*previous.prompt_token_ids, *previous.generation_token_ids]
    prompt = current.prompt_token_ids
    shared = _common_prefix(full, prompt)
    if shared == len(full):
        return
    if shared == 0 and full:
        kind = "two roots: the calls share no leading token"
    elif shared < len(previous.prompt_token_ids):
        kind = f"gap: its prompt drops or changes context at position {shared}"
    else:
        kind = f"fork: its prompt leaves the earlier generation at position {shared}"
    raise BrokenChainError(
        f"calls do not form one prefix chain ({kind}); expected the prompt_token_ids of "
        f"{current.model_call_id!r} to start with the prompt_token_ids + generation_token_ids "
        f"of {previous.model_call_id!r} ({len(full)} tokens)"
    )


def _written_out(entries: Iterable[TokenEntry]) -> list[TokenEntry]:
    """``entries`` with every delta prompt (NeMo Gym's ``delta_records``) written out in full.

    Raises :class:`BrokenChainError` for a delta whose parent is missing or whose rebuilt
    sequence does not hash to its ``digest``.
    """
    listed = list(entries)
    if not any(getattr(entry, "prompt_is_delta", False) for entry in listed):
        return listed
    sequences = cumulative_tokens(listed)
    whole = []
    for entry in listed:
        if not getattr(entry, "prompt_is_delta", False):
            whole.append(entry)
            continue
        tokens = sequences.get(entry.model_call_id)
        if tokens is None:
            raise BrokenChainError(
                f"the delta prompt of {entry.model_call_id!r} cannot be rebuilt: its parent "
                f"{getattr(entry, 'parent_call_id', None)!r} is missing, or the rebuilt "
                "sequence does not hash to its digest"
            )
        prompt = list(tokens[: len(tokens) - len(entry.generation_token_ids)])
        whole.append(
            entry.model_copy(update={"prompt_token_ids": prompt, "prompt_is_delta": False})
        )
    return whole


def build_training_row(entries: Iterable[TokenEntry]) -> TrainingRow:
    """Order ``entries`` into one prefix chain and return the rollout's training row.

    The input order carries no meaning (FREEZE-3). Raises :class:`BrokenChainError` when
    there are no entries, or when they fork, leave a gap or have two roots.
    """
    chain = _chain_order(_written_out(entries))
    if not chain:
        raise BrokenChainError("expected at least one entry to build a row from, got none")
    for previous, current in itertools.pairwise(chain):
        _check_link(previous, current)
    last = chain[-1]
    token_ids = (*last.prompt_token_ids, *last.generation_token_ids)
    loss_mask = [0] * len(token_ids)
    log_probs = [0.0] * len(token_ids)
    for entry in chain:
        start = len(entry.prompt_token_ids)
        for offset, log_prob in enumerate(entry.generation_log_probs):
            loss_mask[start + offset] = 1
            log_probs[start + offset] = log_prob
    return TrainingRow(
        token_ids=token_ids,
        loss_mask=tuple(loss_mask),
        log_probs=tuple(log_probs),
        model_call_ids=tuple(entry.model_call_id for entry in chain),
    )


def finalize_snapshot(snapshot: TokenCaptureSnapshot) -> FinalizedRollout:
    """Build the finalized rollout of one snapshot, masking it with a reason when needed.

    The sample is masked when the snapshot is incomplete, empty, or its calls do not form
    exactly one prefix chain.
    """

    def masked(reason: str) -> FinalizedRollout:
        return FinalizedRollout(
            rollout_id=snapshot.rollout_id,
            snapshot_id=snapshot.snapshot_id,
            version=snapshot.version,
            row=None,
            mask_reason=reason,
        )

    if snapshot.incomplete:
        return masked("snapshot is incomplete: the rollout lost evidence of at least one call")
    if not snapshot.entries:
        return masked("snapshot is empty: the rollout captured no call")
    try:
        row = build_training_row(snapshot.entries)
    except BrokenChainError as exc:
        return masked(str(exc))
    return FinalizedRollout(
        rollout_id=snapshot.rollout_id,
        snapshot_id=snapshot.snapshot_id,
        version=snapshot.version,
        row=row,
    )


async def finalize(
    source: TokenSource, rollout_id: str, *, guard: MaskFractionGuard | None = None
) -> FinalizedRollout:
    """Freeze ``rollout_id`` and build its row from that snapshot; never drop (CONS-1).

    With a ``guard``, the result is counted towards the run's masked fraction first, so
    :class:`~tokcap_spec.errors.MaskFractionExceededError` may propagate; the rollout is still
    frozen and kept.
    """
    finalized = finalize_snapshot(await source.freeze(rollout_id))
    if guard is not None:
        guard.record(finalized.masked)
    return finalized


async def retire_after_handoff(
    source: TokenSource, finalized: FinalizedRollout, handoff: Handoff
) -> bool:
    """Hand the row off, then drop exactly the frozen snapshot; return whether it dropped.

    A masked rollout is neither handed off nor dropped (CONS-3). If ``handoff`` raises, the
    exception propagates and nothing is dropped. The drop uses the snapshot's own
    ``snapshot_id`` and ``version`` (CONS-2), so it returns False when the rollout changed
    after the freeze.
    """
    if finalized.masked:
        return False
    await handoff(finalized)
    return await source.drop(
        finalized.rollout_id, snapshot_id=finalized.snapshot_id, version=finalized.version
    )


def should_rebuild(config: TokenIdCaptureConfig | TokenIdCaptureSettings) -> bool:
    """Return whether this consumer reads rollouts back: capture on and ``rebuild_response`` set.

    False means the framework reads through its own ``TokenSource`` (CONS-4): stop after the
    write and never freeze or drop.
    """
    settings = config.token_id_capture if isinstance(config, TokenIdCaptureConfig) else config
    return settings.enabled and settings.rebuild_response


async def consume(
    source: TokenSource,
    rollout_id: str,
    handoff: Handoff,
    *,
    config: TokenIdCaptureConfig | TokenIdCaptureSettings,
    guard: MaskFractionGuard | None = None,
) -> Consumed | None:
    """Run the whole read side for one finished rollout, or nothing when it is not ours.

    Returns None without touching ``source`` when :func:`should_rebuild` is False. Otherwise
    finalizes (feeding ``guard``), hands off and retires as :func:`retire_after_handoff` does.
    """
    if not should_rebuild(config):
        return None
    finalized = await finalize(source, rollout_id, guard=guard)
    dropped = await retire_after_handoff(source, finalized, handoff)
    return Consumed(finalized=finalized, dropped=dropped)
