"""The ``token_id_capture`` block as NeMo Gym 0.7.0 reads it: a second dialect of the config.

NeMo Gym 0.7.0 added seven keys to the block the seed defines (:data:`GYM07_KEYS`): a lineage
resolver (``lineage_store``, ``lineage_store_kwargs``), ``allow_unresolved_continuations``,
``delta_records`` and three keys of external staging (``external_staging``,
``external_staging_backend``, ``control_auth_token_env``). The seed's
:class:`~tokcap_spec.config.TokenIdCaptureSettings` stays as the seed defines it and refuses
them; a block that uses any of them is read here, with every key, default and rule of 0.7.0:

* unknown keys are refused, as in the seed's dialect;
* ``external_staging`` needs ``enabled`` and ``rebuild_response: false``; the
  ``megatron_worker`` backend needs ``external_staging``; the backend is ``vllm_worker`` or
  ``megatron_worker`` and ``control_auth_token_env`` is a non-empty name;
* a disabled block validates nothing more;
* an enabled block with a ``sink`` (or, with no directory, a sink installed in this process)
  needs a ``lineage_store`` or ``allow_unresolved_continuations: true``, since without a
  resolver no continuation finds its parent and every multi-call rollout is masked; a ``dir``
  beside the sink is logged as unused;
* an enabled block without a sink needs an absolute directory (``dir``, else
  ``model_call_capture_dir``) unless ``rebuild_response`` is false.

0.7.0 puts no bounds on ``max_mask_fraction`` or ``mask_fraction_min_samples``; neither does
this dialect. :func:`read_capture_config` picks the dialect of a global config by its keys.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tokcap_spec.config import TOKEN_ID_CAPTURE_BLOCK, TokenIdCaptureConfig
from tokcap_spec.protocols import installed_token_sink

__all__ = [
    "GYM07_DIALECT",
    "GYM07_KEYS",
    "SEED_DIALECT",
    "CaptureDialect",
    "ExternalStagingBackend",
    "Gym07CaptureConfig",
    "Gym07CaptureSettings",
    "capture_config_dialect",
    "read_capture_config",
]

SEED_DIALECT: Final = "seed"
GYM07_DIALECT: Final = "nemo-gym-0.7.0"
CaptureDialect = Literal["seed", "nemo-gym-0.7.0"]

GYM07_KEYS: Final = frozenset(
    {
        "lineage_store",
        "lineage_store_kwargs",
        "allow_unresolved_continuations",
        "delta_records",
        "external_staging",
        "external_staging_backend",
        "control_auth_token_env",
    }
)
"""The keys NeMo Gym 0.7.0 added to the block; any one of them selects its dialect."""

ExternalStagingBackend = Literal["vllm_worker", "megatron_worker"]

logger = logging.getLogger(__name__)


class Gym07CaptureSettings(BaseModel):
    """The block with NeMo Gym 0.7.0's keys and defaults. Unknown keys are refused.

    Validation errors never echo their input: ``sink_kwargs`` and ``lineage_store_kwargs``
    may hold credentials.
    """

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    enabled: bool = False
    all_agents: bool = False
    dir: Path | None = None
    sink: str | None = None
    sink_kwargs: dict[str, Any] = Field(default_factory=dict)
    lineage_store: str | None = None
    lineage_store_kwargs: dict[str, Any] = Field(default_factory=dict)
    rebuild_response: bool = True
    allow_unresolved_continuations: bool = False
    delta_records: bool = False
    max_mask_fraction: float | None = None
    mask_fraction_min_samples: int = 50
    external_staging: bool = False
    external_staging_backend: ExternalStagingBackend = "vllm_worker"
    control_auth_token_env: str = Field(
        default="NEMO_GYM_TOKEN_CAPTURE_CONTROL_TOKEN", min_length=1
    )


class Gym07CaptureConfig(BaseModel):
    """A 0.7.0 block plus ``model_call_capture_dir``; other top-level keys are ignored."""

    model_config = ConfigDict(extra="ignore", hide_input_in_errors=True)

    token_id_capture: Gym07CaptureSettings = Gym07CaptureSettings()
    model_call_capture_dir: Path | None = None

    def resolved_dir(self) -> Path | None:
        """Return the file store's directory: ``dir``, else ``model_call_capture_dir``."""
        return self.token_id_capture.dir or self.model_call_capture_dir

    @model_validator(mode="after")
    def _validate_gym07(self) -> Gym07CaptureConfig:
        block = self.token_id_capture
        if block.external_staging and not block.enabled:
            raise ValueError("token_id_capture.external_staging requires token_id_capture.enabled")
        if block.external_staging and block.rebuild_response:
            raise ValueError(
                "token_id_capture.external_staging requires rebuild_response: false; the "
                "framework finalizes staged records itself"
            )
        if block.external_staging_backend == "megatron_worker" and not block.external_staging:
            raise ValueError(
                "token_id_capture.external_staging_backend megatron_worker requires "
                "external_staging: true"
            )
        if not block.enabled:
            return self
        if block.sink is not None:
            if block.dir is not None:
                logger.warning(
                    "token_id_capture: sink %s replaces the file store; the configured "
                    "directory %s is not used for training tokens",
                    block.sink,
                    block.dir,
                )
            _require_resolver(block)
            return self
        directory = self.resolved_dir()
        if directory is None:
            if installed_token_sink() is not None:
                _require_resolver(block)
                return self
            if not block.rebuild_response:
                return self
            raise ValueError(
                "token_id_capture is enabled with neither a sink nor a directory: set "
                "token_id_capture.dir (or model_call_capture_dir), or a sink"
            )
        if not directory.is_absolute():
            raise ValueError(
                "token_id_capture is enabled without a sink, so the file store needs an "
                f"absolute directory, got {directory}"
            )
        return self


def _require_resolver(block: Gym07CaptureSettings) -> None:
    """A custom sink needs a resolver, or an explicit acceptance that continuations go masked."""
    if block.lineage_store is not None:
        return
    if block.allow_unresolved_continuations:
        logger.warning(
            "token_id_capture: a custom sink and no lineage_store; every continuation resolves "
            "unresolved and every multi-call rollout is masked"
        )
        return
    raise ValueError(
        "token_id_capture names a custom sink but no lineage_store, so no continuation can "
        "resolve its parent and every multi-call rollout is masked: set "
        "token_id_capture.lineage_store to a resolver over the sink's backend, or "
        "allow_unresolved_continuations: true to accept that"
    )


def capture_config_dialect(global_config_dict: Any) -> CaptureDialect:
    """Return the dialect a global config's block is written in.

    NeMo Gym 0.7.0's when the block uses any key of :data:`GYM07_KEYS`, the seed's otherwise
    (a block without them means the same in both, except that 0.7.0 would also ask a custom
    sink for a resolver). Neither dialect accepts a key of its own to say which it is, since
    both refuse unknown keys.
    """
    block = global_config_dict.get(TOKEN_ID_CAPTURE_BLOCK) if global_config_dict else None
    if isinstance(block, Mapping) and GYM07_KEYS & set(block):
        return GYM07_DIALECT
    return SEED_DIALECT


def read_capture_config(global_config_dict: Any) -> TokenIdCaptureConfig | Gym07CaptureConfig:
    """Read a global config's capture settings in the dialect its block is written in.

    Raises pydantic's ``ValidationError`` (a ``ValueError``) for a block its dialect refuses,
    and ``TypeError`` for a global config that is not a mapping.
    """
    if global_config_dict is None:
        global_config_dict = {}
    if not isinstance(global_config_dict, Mapping):
        raise TypeError(
            f"a global config must be a mapping, got {type(global_config_dict).__name__}"
        )
    if capture_config_dialect(global_config_dict) == GYM07_DIALECT:
        return Gym07CaptureConfig.model_validate(dict(global_config_dict))
    return TokenIdCaptureConfig.model_validate(dict(global_config_dict))
