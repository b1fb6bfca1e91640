"""Valid staged calls for the staging tests: fields filled in, digests computed from them."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from tokcap_spec.staging import (
    EMPTY_EXTRAS_DIGEST,
    chain_hash,
    cumulative_hash,
    extras_digest,
    staged_call_digest,
)
from tokcap_spec.staging.versions import (
    EXTRAS_DIGEST_VERSION,
    STAGING_DIGEST_VERSION,
    STAGING_SCHEMA_VERSION,
)

FLOAT32_MAX = struct.unpack(">f", bytes.fromhex("7f7fffff"))[0]
FLOAT32_TINIEST = struct.unpack(">f", bytes.fromhex("00000001"))[0]
"""The smallest positive float32, a subnormal: 2**-149."""

PARENT_CHAIN_HASH = chain_hash(None, [1, 2, 3, 4])
VERSIONS = {
    "schema_version": STAGING_SCHEMA_VERSION,
    "digest_version": STAGING_DIGEST_VERSION,
    "extras_digest_version": EXTRAS_DIGEST_VERSION,
}


def call_fields(
    token_ids: Sequence[int] = (7, 8, 9),
    mask: Sequence[float] = (0.0, 1.0, 1.0),
    log_probs: Sequence[float] = (0.0, -0.5, -1.25),
    *,
    parent_call_id: str | None = "call-0",
    extras: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """The fields of a valid staged call with this delta, sealed by :func:`seal`.

    A child of ``parent_call_id`` continuing four tokens, or a root when it is ``None``;
    ``extras`` are included, and digested, unless ``None``. ``fields`` replace any field before
    the digest is computed.
    """
    root = parent_call_id is None
    prev_len = 0 if root else 4
    record: dict[str, Any] = {
        "rollout_id": "rollout-1",
        "model_call_id": "call-1",
        "parent_call_id": parent_call_id,
        "mode": "text" if root else "token_in",
        "prev_len": prev_len,
        "delta_len": len(token_ids),
        "cum_len": prev_len + len(token_ids),
        "weight_version": 3,
        "token_ids_delta": list(token_ids),
        "token_mask_delta": list(mask),
        "generation_log_probs_delta": list(log_probs),
        "extras_digest": extras_digest(extras),
        "chain_hash": chain_hash(None if root else PARENT_CHAIN_HASH, token_ids),
        "cumulative_hash": cumulative_hash([*([1] * prev_len), *token_ids]),
    }
    if extras is not None:
        record["extras"] = extras
    record.update(fields)
    return seal(record)


def digest_arguments(fields: dict[str, Any]) -> dict[str, Any]:
    """The keywords of ``staged_call_digest`` for a record's fields: every field but ``digest``
    and ``extras``, with the record's defaults for the versions and ``extras_digest``."""
    defaults = {**VERSIONS, "extras_digest": EMPTY_EXTRAS_DIGEST}
    return {
        name: value
        for name, value in {**defaults, **fields}.items()
        if name not in {"digest", "extras"}
    }


def seal(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with ``digest`` set to the staged call digest of the other fields."""
    return {**fields, "digest": staged_call_digest(**digest_arguments(fields))}
