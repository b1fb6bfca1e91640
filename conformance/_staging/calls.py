"""Valid staged calls for the staging checks: chains of deltas with their hashes and digests.

Every call the factory makes validates as a :class:`~tokcap_spec.staging.StagedCallRecord`:
a root, or a child continuing the tokens of a call made before it, with its chain hash,
cumulative hash, extras digest and digest computed from its fields. Ids are unique to the
run unless a check names them. Variants (:meth:`CallFactory.variant`) change fields and seal
the result again, so a check can make the call a store must tell apart from another.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence
from typing import Any

from tokcap_spec.staging import (
    EXTRAS_DIGEST_VERSION,
    STAGING_DIGEST_VERSION,
    STAGING_SCHEMA_VERSION,
    StagedCallRecord,
    chain_hash,
    cumulative_hash,
    extras_digest,
    staged_call_digest,
)

__all__ = ["FLOAT32_SUBNORMAL", "CallFactory", "float32_bits", "next_float32", "sealed"]

FLOAT32_SUBNORMAL = struct.unpack(">f", bytes.fromhex("00000001"))[0]
"""The smallest positive float32, 2**-149: a subnormal a float32 cast keeps and a careless
encoding flushes to zero."""

_DIGESTED = (
    "schema_version",
    "digest_version",
    "extras_digest_version",
    "rollout_id",
    "model_call_id",
    "parent_call_id",
    "mode",
    "prev_len",
    "delta_len",
    "cum_len",
    "weight_version",
    "token_ids_delta",
    "token_mask_delta",
    "generation_log_probs_delta",
    "extras_digest",
    "chain_hash",
    "cumulative_hash",
)


def float32_bits(value: float) -> bytes:
    """The float32 bits ``value`` is committed to (big-endian), ``-0.0`` apart from ``0.0``."""
    return struct.pack(">f", value)


def next_float32(value: float) -> float:
    """The float32 next above ``value`` (as a float): a log prob one float32 step away."""
    (bits,) = struct.unpack(">I", float32_bits(value))
    step = -1 if value < 0 else 1
    return float(struct.unpack(">f", struct.pack(">I", bits + step))[0])


def sealed(fields: dict[str, Any]) -> StagedCallRecord:
    """``fields`` with their extras digest and digest computed, validated as a staged call."""
    fields = dict(fields)
    fields["extras_digest"] = extras_digest(fields.get("extras"))
    fields["digest"] = staged_call_digest(**{name: fields[name] for name in _DIGESTED})
    return StagedCallRecord.model_validate(fields)


class CallFactory:
    """Makes the staged calls of one check from its seeded random source."""

    def __init__(self, rng: random.Random, prefix: str) -> None:
        self.random = rng
        self._prefix = prefix
        self._count = 0
        self._tokens: dict[tuple[str, str], list[int]] = {}

    def rollout_id(self, label: str = "r") -> str:
        """A rollout id no other check, run or process uses."""
        self._count += 1
        return f"{self._prefix}-{label}-{self._count:04d}"

    def root(
        self,
        rollout_id: str | None = None,
        model_call_id: str = "call-0",
        *,
        length: int | None = None,
        **fields: Any,
    ) -> StagedCallRecord:
        """A call with no parent: ``mode`` text, ``prev_len`` 0; ``fields`` override the delta."""
        rollout = rollout_id if rollout_id is not None else self.rollout_id()
        return self._call(rollout, model_call_id, None, [], length, fields)

    def child(
        self,
        parent: StagedCallRecord,
        model_call_id: str | None = None,
        *,
        length: int | None = None,
        **fields: Any,
    ) -> StagedCallRecord:
        """A call continuing every token ``parent`` (made by this factory) ends with."""
        before = self._tokens[(parent.rollout_id, parent.model_call_id)]
        call = model_call_id or f"{parent.model_call_id}.{self._count_up()}"
        return self._call(
            parent.rollout_id,
            call,
            parent,
            before,
            length,
            {"parent_chain": parent.chain_hash, **fields},
        )

    def chain(self, calls: int, rollout_id: str | None = None) -> list[StagedCallRecord]:
        """A root and ``calls - 1`` children, each continuing the one before."""
        made = [self.root(rollout_id)]
        while len(made) < calls:
            made.append(self.child(made[-1]))
        return made

    def variant(self, call: StagedCallRecord, **changes: Any) -> StagedCallRecord:
        """``call`` with ``changes`` applied and sealed again: another call with the same ids."""
        fields = call.model_dump()
        fields.update(changes)
        return sealed(fields)

    def _count_up(self) -> int:
        self._count += 1
        return self._count

    def _call(
        self,
        rollout_id: str,
        model_call_id: str,
        parent: StagedCallRecord | None,
        before: Sequence[int],
        length: int | None,
        fields: dict[str, Any],
    ) -> StagedCallRecord:
        rng = self.random
        size = length if length is not None else rng.randint(1, 24)
        tokens = fields.pop("token_ids_delta", None)
        if tokens is None:
            tokens = [rng.randrange(0, 2**17) for _ in range(size)]
        size = len(tokens)
        mask = fields.pop("token_mask_delta", None)
        log_probs = fields.pop("generation_log_probs_delta", None)
        if mask is None and log_probs is not None:
            mask = [1.0] * size  # every given log prob is kept: a masked token's is zero
        if mask is None:
            mask = [float(rng.random() < 0.8) for _ in range(size)]
        if log_probs is None:
            log_probs = [-rng.random() * 8 if kept else 0.0 for kept in mask]
        parent_chain = fields.pop("parent_chain", None)
        extras = fields.pop("extras", None)
        record: dict[str, Any] = {
            "rollout_id": rollout_id,
            "model_call_id": model_call_id,
            "parent_call_id": None if parent is None else parent.model_call_id,
            "mode": "text" if parent is None else "token_in",
            "prev_len": len(before),
            "delta_len": size,
            "cum_len": len(before) + size,
            "weight_version": rng.randint(0, 40),
            "token_ids_delta": list(tokens),
            "token_mask_delta": list(mask),
            "generation_log_probs_delta": list(log_probs),
            "chain_hash": chain_hash(parent_chain, tokens),
            "cumulative_hash": cumulative_hash([*before, *tokens]),
            "schema_version": STAGING_SCHEMA_VERSION,
            "digest_version": STAGING_DIGEST_VERSION,
            "extras_digest_version": EXTRAS_DIGEST_VERSION,
        }
        if extras is not None:
            record["extras"] = extras
        record.update(fields)
        made = sealed(record)
        self._tokens[(rollout_id, model_call_id)] = [*before, *tokens]
        return made
