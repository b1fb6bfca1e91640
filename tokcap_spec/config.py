"""Run-wide training-token capture settings: the ``token_id_capture`` config block.

The block decides whether capture runs, where records go (the embedded file store under
``dir``, or a ``sink`` class built in every serving process), who reads them back
(``rebuild_response``), and how many masked rollouts a run tolerates.

    env:
      nemo_gym:
        token_id_capture:
          enabled: true
          dir: /tmp/ng_tokcap
          sink: my_pkg.sinks:MyDataPlaneSink
          sink_kwargs: {url: "redis://..."}

A sink is named as ``module.path:ClassName`` and built from plain keyword arguments, once per
process, because spawned workers do not inherit anything a launcher installed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tokcap_spec.endpoints import build_endpoint, split_target
from tokcap_spec.errors import MaskFractionExceededError
from tokcap_spec.protocols import TokenSink, installed_token_sink

__all__ = [
    "FILE_STORE_TARGET",
    "TOKEN_ID_CAPTURE_BLOCK",
    "build_endpoint",
    "MaskFractionGuard",
    "TokenIdCaptureConfig",
    "TokenIdCaptureSettings",
    "logger",
    "token_id_capture_config",
    "token_id_capture_enabled_for_agent",
]

TOKEN_ID_CAPTURE_BLOCK: Final = "token_id_capture"

FILE_STORE_TARGET: Final = "reference:FileTokenStore"
"""The target of the file store a capture block with no ``sink`` writes to, rooted at its
directory (:meth:`TokenIdCaptureConfig.resolved_dir`)."""

logger = logging.getLogger(__name__)


class TokenIdCaptureSettings(BaseModel):
    """The ``token_id_capture`` block. Unknown keys are refused, so typos fail loudly.

    Validation errors never echo their input, because ``sink_kwargs`` may hold credentials.
    """

    # hide_input_in_errors: pydantic would otherwise print sink_kwargs values in its errors.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    enabled: bool = False
    dir: Path | None = None
    sink: str | None = None
    sink_kwargs: dict[str, Any] = Field(default_factory=dict)
    all_agents: bool = False
    rebuild_response: bool = True
    max_mask_fraction: float | None = Field(default=None, ge=0.0, le=1.0)
    mask_fraction_min_samples: int = Field(default=50, ge=1)


class TokenIdCaptureConfig(BaseModel):
    """The capture block plus ``model_call_capture_dir``, the one top-level key it falls back to.

    Every other top-level key of a global config is ignored.
    """

    model_config = ConfigDict(extra="ignore", hide_input_in_errors=True)

    model_call_capture_dir: Path | None = None
    token_id_capture: TokenIdCaptureSettings = TokenIdCaptureSettings()

    @property
    def enabled(self) -> bool:
        """Whether training-token capture is on for this run."""
        return self.token_id_capture.enabled

    def resolved_dir(self) -> Path | None:
        """Return the file store's directory: ``dir``, else ``model_call_capture_dir``."""
        return self.token_id_capture.dir or self.model_call_capture_dir

    @model_validator(mode="after")
    def _validate(self) -> TokenIdCaptureConfig:
        settings = self.token_id_capture
        if not settings.enabled:
            return self
        if settings.sink is not None:
            split_target(settings.sink, "sink")
            if self.resolved_dir() is not None:
                logger.warning(
                    "token_id_capture: sink %s replaces the file store; the configured "
                    "directory %s is not used for training tokens",
                    settings.sink,
                    self.resolved_dir(),
                )
            return self
        if installed_token_sink() is not None or not settings.rebuild_response:
            return self
        directory = self.resolved_dir()
        if directory is None or not directory.is_absolute():
            raise ValueError(
                "token_id_capture is enabled without a sink, so the file store needs an "
                "absolute directory: set token_id_capture.dir (or model_call_capture_dir) to an "
                f"absolute path, got {directory}"
            )
        return self

    def build_sink(self) -> TokenSink | None:
        """Construct the configured sink, or return None when the file store is in use.

        Call this once in each server process: a sink installed by a launcher does not
        reach spawned workers. Every call returns a new, validated instance.
        """
        settings = self.token_id_capture
        if not settings.enabled or settings.sink is None:
            return None
        sink = self._build_endpoint(settings.sink, settings.sink_kwargs, TokenSink, "sink")
        assert isinstance(sink, TokenSink)
        return sink

    @staticmethod
    def _build_endpoint(target: str, kwargs: dict[str, Any], protocol: type, kind: str) -> Any:
        """The seed's name for :func:`build_endpoint`, kept for callers of Gym's config."""
        return build_endpoint(target, kwargs, protocol, kind)


def token_id_capture_config(global_config_dict: Any) -> TokenIdCaptureConfig:
    """Read the capture settings out of a global config dict (None reads as empty)."""
    return TokenIdCaptureConfig.model_validate(_as_dict(global_config_dict))


def token_id_capture_enabled_for_agent(global_config_dict: Any, agent_name: str | None) -> bool:
    """Return whether one configured agent participates in capture.

    False when capture is disabled. True for every agent when ``all_agents`` is set.
    Otherwise true exactly when one of the agent's ``responses_api_agents`` entries sets
    ``token_id_capture``.
    """
    config = token_id_capture_config(global_config_dict)
    if not config.enabled:
        return False
    if config.token_id_capture.all_agents:
        return True
    if agent_name is None:
        return False
    agent = _as_dict(global_config_dict).get(agent_name)
    if not isinstance(agent, Mapping):
        return False
    agents = agent.get("responses_api_agents")
    if not isinstance(agents, Mapping):
        return False
    return any(
        isinstance(body, Mapping) and bool(body.get(TOKEN_ID_CAPTURE_BLOCK))
        for body in agents.values()
    )


def _as_dict(global_config_dict: Any) -> dict[str, Any]:
    if global_config_dict is None:
        return {}
    if isinstance(global_config_dict, Mapping):
        return dict(global_config_dict)
    raise TypeError(f"a global config must be a mapping, got {type(global_config_dict).__name__}")


class MaskFractionGuard:
    """Applies ``max_mask_fraction`` to a run's finalized rollouts (CFG-6).

    Call :meth:`record` once per finalized rollout. Once at least
    ``mask_fraction_min_samples`` rollouts are finalized and the masked fraction is strictly
    above ``max_mask_fraction``, it raises :class:`MaskFractionExceededError`, and keeps
    raising for every later rollout. With no limit set it never raises.
    """

    def __init__(self, max_mask_fraction: float | None, mask_fraction_min_samples: int = 50):
        checked = TokenIdCaptureSettings(
            max_mask_fraction=max_mask_fraction,
            mask_fraction_min_samples=mask_fraction_min_samples,
        )
        self.max_mask_fraction = checked.max_mask_fraction
        self.min_samples = checked.mask_fraction_min_samples
        self.finalized = 0
        self.masked = 0

    @classmethod
    def from_settings(cls, settings: TokenIdCaptureSettings) -> MaskFractionGuard:
        """Build the guard a run's ``token_id_capture`` block asks for."""
        return cls(settings.max_mask_fraction, settings.mask_fraction_min_samples)

    @property
    def fraction(self) -> float:
        """The masked fraction so far (0.0 before any rollout is finalized)."""
        return self.masked / self.finalized if self.finalized else 0.0

    def record(self, masked: bool) -> None:
        """Count one finalized rollout; raise once the run has masked too many."""
        self.finalized += 1
        self.masked += int(masked)
        limit = self.max_mask_fraction
        if limit is not None and self.finalized >= self.min_samples and self.fraction > limit:
            raise MaskFractionExceededError(
                f"{self.masked} of {self.finalized} finalized rollouts were masked "
                f"({self.fraction:.3f}), above token_id_capture.max_mask_fraction={limit}; "
                "the captured tokens are too incomplete to train on"
            )
