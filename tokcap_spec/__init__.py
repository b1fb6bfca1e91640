"""The training-token capture contract: records, protocols, ids, errors and config.

This package is what a framework imports to implement or consume token capture. It imports
nothing from ``reference`` or ``conformance``, and each name below on first use: importing
the records alone does not build the config models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

SPEC_REVISION = "2026.12.4"
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


_HOMES: dict[str, str] = {
    "TOKEN_ID_CAPTURE_BLOCK": "tokcap_spec.config",
    "MaskFractionGuard": "tokcap_spec.config",
    "TokenIdCaptureConfig": "tokcap_spec.config",
    "TokenIdCaptureSettings": "tokcap_spec.config",
    "token_id_capture_config": "tokcap_spec.config",
    "token_id_capture_enabled_for_agent": "tokcap_spec.config",
    "ConflictingEntryError": "tokcap_spec.errors",
    "CorruptStoreError": "tokcap_spec.errors",
    "EndpointError": "tokcap_spec.errors",
    "InvalidRolloutIdError": "tokcap_spec.errors",
    "MaskFractionExceededError": "tokcap_spec.errors",
    "RolloutFrozenError": "tokcap_spec.errors",
    "RolloutRetiredError": "tokcap_spec.errors",
    "StoreWriteError": "tokcap_spec.errors",
    "TokenCaptureError": "tokcap_spec.errors",
    "ROLLOUT_ID_PATTERN": "tokcap_spec.ids",
    "is_valid_rollout_id": "tokcap_spec.ids",
    "rollout_route": "tokcap_spec.ids",
    "training_capture_route": "tokcap_spec.ids",
    "validate_rollout_id": "tokcap_spec.ids",
    "CallIntentSink": "tokcap_spec.protocols",
    "RetiringSource": "tokcap_spec.protocols",
    "TokenCaptureSnapshot": "tokcap_spec.protocols",
    "TokenSink": "tokcap_spec.protocols",
    "TokenSource": "tokcap_spec.protocols",
    "install_token_sink": "tokcap_spec.protocols",
    "install_token_source": "tokcap_spec.protocols",
    "installed_token_sink": "tokcap_spec.protocols",
    "installed_token_source": "tokcap_spec.protocols",
    "TOKEN_ENTRY_RECORD_SCHEMA_VERSION": "tokcap_spec.records",
    "TOKEN_FIELDS": "tokcap_spec.records",
    "TokenEntry": "tokcap_spec.records",
}
"""Where each public name lives: it is imported on first use, so a process that needs only
records (a spawned worker, say) does not build the config models."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
