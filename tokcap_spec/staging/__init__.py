"""Staging: NeMo Gym 0.7.0's external path for training tokens, its records and its digests.

On this path the inference worker hands each model call's new tokens, as a delta on its parent
call's, to a framework-owned :class:`StagingSink` while it serves the call, and the trainer reads
them back through a :class:`StagingSource` by staging key. Digests chain the deltas, so the
trainer can check that a rollout's calls continue each other and that nothing changed on the
way. What crosses the wire is byte for byte Gym's (schema 2, digest 2, extras digest 1).

It is a contract apart from the capture contract of ``tokcap_spec`` (``TokenSink``,
``TokenSource``, ``TokenEntry``):

- **synchronous**: ``stage`` and ``fetch`` are plain methods called from worker threads, where
  ``put`` and ``freeze`` are coroutines;
- **strict records**: a staged record refuses unknown fields, where a ``TokenEntry`` keeps and
  round-trips them; every float must be finite (a ``TokenEntry`` allows ``-inf`` log probs),
  and token ids go up to 2**64 - 1 rather than 2**31 - 1;
- **float32 commitments**: masks and log probs are committed to as float32 bits by a digest the
  record carries and validation recomputes, where two ``TokenEntry`` payloads are the same only
  when every float64 bit is;
- **deltas, not whole calls**: a record holds the tokens after ``prev_len`` only, with the
  chain and cumulative hashes tying it to what came before.

Ids may hold ``/``, so the default :func:`staging_key` can give two calls one key;
:func:`distinct_staging_key` never does. A source that has no row for a key raises
:class:`StagedCallMissingError`, one whose row is damaged :class:`StagedCallCorruptError`.
"""

from tokcap_spec.staging.digest import (
    chain_hash,
    cumulative_hash,
    encode_token_ids,
    staged_call_digest,
)
from tokcap_spec.staging.errors import StagedCallCorruptError, StagedCallMissingError
from tokcap_spec.staging.extras import EMPTY_EXTRAS_DIGEST, extras_digest
from tokcap_spec.staging.keys import distinct_staging_key, split_staging_key
from tokcap_spec.staging.protocols import StagingSink, StagingSource
from tokcap_spec.staging.records import (
    CaptureMode,
    StagedCallBaseSnapshot,
    StagedCallRecord,
    StagedCallSnapshot,
    StageResult,
    staging_key,
)
from tokcap_spec.staging.versions import (
    EXTRAS_DIGEST_VERSION,
    STAGING_DIGEST_VERSION,
    STAGING_SCHEMA_VERSION,
)

__all__ = [
    "EMPTY_EXTRAS_DIGEST",
    "EXTRAS_DIGEST_VERSION",
    "STAGING_DIGEST_VERSION",
    "STAGING_SCHEMA_VERSION",
    "CaptureMode",
    "StageResult",
    "StagedCallBaseSnapshot",
    "StagedCallCorruptError",
    "StagedCallMissingError",
    "StagedCallRecord",
    "StagedCallSnapshot",
    "StagingSink",
    "StagingSource",
    "chain_hash",
    "cumulative_hash",
    "distinct_staging_key",
    "encode_token_ids",
    "extras_digest",
    "staged_call_digest",
    "split_staging_key",
    "staging_key",
]
