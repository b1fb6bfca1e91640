"""The digests that tie a staged call's tokens together, byte for byte those of NeMo Gym 0.7.0.

Every digest is a lowercase hex SHA-256 of a domain string followed by fixed-width or
length-delimited fields (integers and lengths as eight big-endian bytes, text as its UTF-8 length
and bytes), so no two different inputs of one kind, and no inputs of two kinds, hash the same
bytes:

- :func:`cumulative_hash`, over the whole token sequence a call has seen: its prompt and its
  generation (domain ``nemo-gym-staging-prefix-v2``, then :func:`encode_token_ids`).
- :func:`chain_hash`, linking one call's token delta to its parent's chain hash, so that a
  consumer can check parent and child continue each other without joining the tokens (domain
  ``nemo-gym-staging-chain-v1``, then the parent's 32 bytes after ``0x01``, or ``0x00`` for a
  root, then the delta as :func:`encode_token_ids`).
- :func:`staged_call_digest`, over every field of a staged call but its extras, which enter
  through their own digest (``tokcap_spec.staging.extras``); domain
  ``nemo-gym-staging-call-v2``, then in this order: the schema, digest and extras digest
  versions as one byte each; ``rollout_id``, ``model_call_id``, ``parent_call_id`` (absent or
  present) and ``mode`` as text; ``prev_len``, ``delta_len``, ``cum_len`` and
  ``weight_version`` as eight bytes each; the token ids, the mask and the log probs as three
  framed columns (ids as eight bytes each, mask and log probs as float32 bits, so ``-0.0`` and
  ``0.0`` differ while floats that round to one float32 do not); the 32 bytes of
  ``extras_digest``; then ``chain_hash`` and ``cumulative_hash``, each as ``0x01`` and its
  32 bytes.

Gym names these ``hash_token_ids``, ``compute_chain_hash`` and ``compute_staging_digest``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final

from tokcap_spec.staging import _layout
from tokcap_spec.staging.versions import (
    EXTRAS_DIGEST_VERSION,
    STAGING_DIGEST_VERSION,
    STAGING_SCHEMA_VERSION,
)

__all__ = ["chain_hash", "cumulative_hash", "encode_token_ids", "staged_call_digest"]

_CALL_DOMAIN: Final = b"nemo-gym-staging-call-v2"
_PREFIX_DOMAIN: Final = b"nemo-gym-staging-prefix-v2"
_CHAIN_DOMAIN: Final = b"nemo-gym-staging-chain-v1"
_MODES: Final = ("text", "token_in")


def encode_token_ids(token_ids: Sequence[int]) -> bytes:
    """The bytes a token sequence is hashed as: its length, then each id, eight big-endian
    bytes each.

    Raises ``ValueError`` for an id that is not an ``int`` from 0 to 2**64 - 1 (a ``bool`` is
    refused).
    """
    return _layout.token_id_column(token_ids)


def cumulative_hash(token_ids: Sequence[int]) -> str:
    """The hash of one exact token sequence: what a staged call's ``cumulative_hash`` holds,
    over its prompt followed by its generation.

    Two sequences hash alike only when they are equal (short of a SHA-256 collision); raises
    as :func:`encode_token_ids` does.
    """
    return hashlib.sha256(_PREFIX_DOMAIN + encode_token_ids(token_ids)).hexdigest()


def chain_hash(parent_chain_hash: str | None, token_ids_delta: Sequence[int]) -> str:
    """The chain hash of a call whose token delta is ``token_ids_delta``.

    ``parent_chain_hash`` is the parent call's chain hash, or ``None`` for a root; a root and
    a child never hash alike. Folding each delta of a chain of calls in turn, from ``None``,
    gives the last call's chain hash. Raises ``ValueError`` for a parent hash that is not 64
    lowercase hex digits, and as :func:`encode_token_ids` does for the delta.
    """
    if parent_chain_hash is None:
        link = _layout.ABSENT
    else:
        link = _layout.PRESENT + _layout.digest_bytes(parent_chain_hash, field="parent_chain_hash")
    return hashlib.sha256(_CHAIN_DOMAIN + link + encode_token_ids(token_ids_delta)).hexdigest()


def staged_call_digest(
    *,
    schema_version: int,
    digest_version: int,
    extras_digest_version: int,
    rollout_id: str,
    model_call_id: str,
    parent_call_id: str | None,
    mode: str,
    prev_len: int,
    delta_len: int,
    cum_len: int,
    weight_version: int,
    token_ids_delta: Sequence[int],
    token_mask_delta: Sequence[float],
    generation_log_probs_delta: Sequence[float],
    extras_digest: str,
    chain_hash: str,
    cumulative_hash: str,
) -> str:
    """The ``digest`` a staged call with these fields carries (digest version 2).

    The keywords are the record's own fields, so ``staged_call_digest(**fields)`` works on
    them. Only a well-formed staged call has a digest; ``ValueError`` says what is wrong with
    any other:

    - a version other than schema 2, digest 2, extras digest 1;
    - an empty ``rollout_id`` or ``model_call_id``, or an empty ``parent_call_id``;
    - a ``mode`` other than ``"text"`` and ``"token_in"``; a root (no parent) that is not
      ``"text"`` with ``prev_len`` 0, or a child that is not ``"token_in"`` with ``prev_len``
      above 0;
    - a ``delta_len`` of 0, or other than the number of token ids; columns of unequal length;
    - a mask value other than ``0.0`` and ``1.0`` (``-0.0`` is one of them), or a log prob other
      than zero (of either sign) where the mask is zero; ``cum_len`` other than
      ``prev_len + delta_len``;
    - a length or id that is not an unsigned 64-bit ``int``, a mask value or log prob that is
      not a finite ``float`` within the float32 range, a digest field that is not 64 lowercase
      hex digits.

    ``TypeError`` is raised for an id or a hash field that is not a string at all.
    """
    _check_versions(schema_version, digest_version, extras_digest_version)
    _check_identity(rollout_id, model_call_id, parent_call_id, mode, prev_len)
    _check_delta(
        prev_len, delta_len, cum_len, token_ids_delta, token_mask_delta, generation_log_probs_delta
    )
    extras = _layout.digest_bytes(extras_digest, field="extras_digest")

    digest = hashlib.sha256(_CALL_DOMAIN)
    digest.update(bytes((schema_version, digest_version, extras_digest_version)))
    digest.update(_layout.text(rollout_id, field="rollout_id"))
    digest.update(_layout.text(model_call_id, field="model_call_id"))
    digest.update(_layout.optional_text(parent_call_id, field="parent_call_id"))
    digest.update(_layout.text(mode, field="mode"))
    for name, value in (
        ("prev_len", prev_len),
        ("delta_len", delta_len),
        ("cum_len", cum_len),
        ("weight_version", weight_version),
    ):
        digest.update(_layout.u64(value, field=name))
    digest.update(_layout.framed(encode_token_ids(token_ids_delta)))
    digest.update(_layout.framed(_layout.float32_column(token_mask_delta, field="mask")))
    digest.update(
        _layout.framed(_layout.float32_column(generation_log_probs_delta, field="log prob"))
    )
    digest.update(extras)
    for name, link in (("chain_hash", chain_hash), ("cumulative_hash", cumulative_hash)):
        if not isinstance(link, str):
            raise TypeError(f"{name} must be a digest string, got {type(link).__name__}")
        digest.update(_layout.PRESENT + _layout.digest_bytes(link, field=name))
    return digest.hexdigest()


def _check_versions(schema: object, digest: object, extras: object) -> None:
    for name, value, expected in (
        ("schema_version", schema, STAGING_SCHEMA_VERSION),
        ("digest_version", digest, STAGING_DIGEST_VERSION),
        ("extras_digest_version", extras, EXTRAS_DIGEST_VERSION),
    ):
        # An exact int: True is not version 1, nor 2.0 version 2.
        if type(value) is not int or value != expected:
            raise ValueError(f"{name} must be {expected}, got {value!r}")


def _check_identity(
    rollout_id: str, model_call_id: str, parent_call_id: str | None, mode: str, prev_len: int
) -> None:
    if not rollout_id or not model_call_id:
        raise ValueError("rollout_id and model_call_id must not be empty")
    if parent_call_id == "":
        raise ValueError("parent_call_id must be None or not empty")
    if mode not in _MODES:
        raise ValueError(f"mode must be 'text' or 'token_in', got {mode!r}")
    if parent_call_id is None and (prev_len != 0 or mode != "text"):
        raise ValueError("a call without a parent is a root: mode 'text' and prev_len 0")
    if parent_call_id is not None and (prev_len == 0 or mode != "token_in"):
        raise ValueError("a call with a parent continues it: mode 'token_in' and prev_len > 0")


def _check_delta(
    prev_len: int,
    delta_len: int,
    cum_len: int,
    token_ids: Sequence[int],
    mask: Sequence[float],
    log_probs: Sequence[float],
) -> None:
    if delta_len == 0:
        raise ValueError("a staged call stages at least one token: delta_len is 0")
    if delta_len != len(token_ids):
        raise ValueError(f"delta_len is {delta_len!r} but there are {len(token_ids)} token ids")
    if not len(token_ids) == len(mask) == len(log_probs):
        raise ValueError(
            f"the columns differ in length: {len(token_ids)} token ids, {len(mask)} mask "
            f"values, {len(log_probs)} log probs"
        )
    if any(value not in (0.0, 1.0) for value in mask):
        raise ValueError("every mask value is 0.0 or 1.0")
    # A masked-out token is prompt carried into the delta: it was never sampled.
    if any(m == 0.0 and lp != 0.0 for m, lp in zip(mask, log_probs, strict=True)):
        raise ValueError("a token whose mask is 0.0 has log prob 0.0")
    if cum_len != prev_len + delta_len:
        raise ValueError(
            f"cum_len must be prev_len + delta_len = {prev_len + delta_len!r}, got {cum_len!r}"
        )
