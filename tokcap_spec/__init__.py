"""The training-token capture contract: records, protocols, ids, errors and config.

This package is what a framework imports to implement or consume token capture. It imports
nothing from ``reference`` or ``conformance``.
"""

from tokcap_spec.config import (
    TOKEN_ID_CAPTURE_BLOCK,
    MaskFractionGuard,
    TokenIdCaptureConfig,
    TokenIdCaptureSettings,
    token_id_capture_config,
    token_id_capture_enabled_for_agent,
)
from tokcap_spec.errors import (
    ConflictingEntryError,
    CorruptStoreError,
    EndpointError,
    InvalidRolloutIdError,
    MaskFractionExceededError,
    RolloutFrozenError,
    RolloutRetiredError,
    StoreWriteError,
    TokenCaptureError,
)
from tokcap_spec.ids import (
    ROLLOUT_ID_PATTERN,
    is_valid_rollout_id,
    rollout_route,
    training_capture_route,
    validate_rollout_id,
)
from tokcap_spec.protocols import (
    CallIntentSink,
    RetiringSource,
    TokenCaptureSnapshot,
    TokenSink,
    TokenSource,
    install_token_sink,
    install_token_source,
    installed_token_sink,
    installed_token_source,
)
from tokcap_spec.records import TOKEN_ENTRY_RECORD_SCHEMA_VERSION, TOKEN_FIELDS, TokenEntry

SPEC_REVISION = "2026.12.1"
"""The revision of the clause catalog this package and the kit implement.

The kit's ``conformance/contract.lock.json`` records each revision's clauses; this is its
newest revision (the project's tests hold the two equal), and
``python -m conformance.revision --write`` sets it when it records a new one."""

__all__ = [
    "ROLLOUT_ID_PATTERN",
    "SPEC_REVISION",
    "TOKEN_ENTRY_RECORD_SCHEMA_VERSION",
    "TOKEN_FIELDS",
    "TOKEN_ID_CAPTURE_BLOCK",
    "CallIntentSink",
    "ConflictingEntryError",
    "CorruptStoreError",
    "EndpointError",
    "InvalidRolloutIdError",
    "MaskFractionExceededError",
    "MaskFractionGuard",
    "RetiringSource",
    "RolloutFrozenError",
    "RolloutRetiredError",
    "StoreWriteError",
    "TokenCaptureError",
    "TokenCaptureSnapshot",
    "TokenEntry",
    "TokenIdCaptureConfig",
    "TokenIdCaptureSettings",
    "TokenSink",
    "TokenSource",
    "install_token_sink",
    "install_token_source",
    "installed_token_sink",
    "installed_token_source",
    "is_valid_rollout_id",
    "rollout_route",
    "token_id_capture_config",
    "token_id_capture_enabled_for_agent",
    "training_capture_route",
    "validate_rollout_id",
]
