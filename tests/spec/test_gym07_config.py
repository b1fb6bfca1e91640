"""Tests of tokcap_spec.gym07_config: the block as NeMo Gym 0.7.0 reads it, beside the seed's."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tokcap_spec.config import TOKEN_ID_CAPTURE_BLOCK, TokenIdCaptureConfig
from tokcap_spec.gym07_config import (
    GYM07_DIALECT,
    GYM07_KEYS,
    SEED_DIALECT,
    Gym07CaptureConfig,
    Gym07CaptureSettings,
    capture_config_dialect,
    logger,
    read_capture_config,
)

SECRET = "hunter2-s3cr3t-value"
SINK = "pkg.mod:Sink"


def capture(**block: Any) -> dict[str, Any]:
    """A global config dict holding only a token_id_capture block."""
    return {TOKEN_ID_CAPTURE_BLOCK: block}


def test_the_seven_keys_are_those_0_7_0_added() -> None:
    """The 0.7.0 keys are exactly the block's keys the seed's settings lack."""
    from tokcap_spec.config import TokenIdCaptureSettings

    added = set(Gym07CaptureSettings.model_fields) - set(TokenIdCaptureSettings.model_fields)
    assert added == GYM07_KEYS
    assert len(GYM07_KEYS) == 7
    assert set(TokenIdCaptureSettings.model_fields) < set(Gym07CaptureSettings.model_fields)


def test_0_7_0_defaults() -> None:
    """Every new key defaults as in 0.7.0: off, empty, the vllm backend, the token variable."""
    settings = Gym07CaptureSettings()
    assert (settings.lineage_store, settings.lineage_store_kwargs) == (None, {})
    assert not settings.allow_unresolved_continuations
    assert not settings.delta_records
    assert not settings.external_staging
    assert settings.external_staging_backend == "vllm_worker"
    assert settings.control_auth_token_env == "NEMO_GYM_TOKEN_CAPTURE_CONTROL_TOKEN"


class TestDialect:
    @pytest.mark.parametrize("key", sorted(GYM07_KEYS))
    def test_any_new_key_selects_0_7_0(self, key: str) -> None:
        """A block using any one of the seven keys is read as 0.7.0's."""
        raw = capture(
            **{key: Gym07CaptureSettings.model_fields[key].get_default(call_default_factory=True)}
        )
        assert capture_config_dialect(raw) == GYM07_DIALECT
        assert isinstance(read_capture_config(raw), Gym07CaptureConfig)

    @pytest.mark.parametrize("raw", [None, {}, capture(enabled=True, sink=SINK), {"x": 1}])
    def test_a_block_without_them_is_the_seeds(self, raw: Any) -> None:
        """A block with none of the seven keys (or no block) is read by the seed's settings."""
        assert capture_config_dialect(raw) == SEED_DIALECT
        assert isinstance(read_capture_config(raw), TokenIdCaptureConfig)

    def test_the_seed_dialect_keeps_its_bounds(self) -> None:
        """A seed block keeps the seed's mask-fraction bounds; 0.7.0 has none."""
        with pytest.raises(ValidationError, match="max_mask_fraction"):
            read_capture_config(capture(max_mask_fraction=1.5))
        config = read_capture_config(capture(max_mask_fraction=1.5, delta_records=True))
        assert config.token_id_capture.max_mask_fraction == 1.5

    def test_a_non_mapping_is_refused(self) -> None:
        """A global config that is not a mapping raises TypeError naming its type."""
        with pytest.raises(TypeError, match="mapping, got list"):
            read_capture_config([1])


class TestRules:
    def test_an_unknown_key_is_refused(self) -> None:
        """A misspelt key beside a 0.7.0 key is refused, naming it."""
        with pytest.raises(ValidationError, match=r"lineage_stor\b"):
            read_capture_config(capture(delta_records=True, lineage_stor="m:R"))

    def test_a_custom_sink_needs_a_resolver(self) -> None:
        """An enabled sink with neither lineage_store nor the allowance is refused."""
        with pytest.raises(ValidationError, match="lineage_store"):
            read_capture_config(capture(enabled=True, sink=SINK, delta_records=True))

    def test_a_lineage_store_satisfies_a_custom_sink(self) -> None:
        """An enabled sink with a lineage_store is valid and keeps both targets."""
        config = Gym07CaptureConfig.model_validate(
            capture(enabled=True, sink=SINK, lineage_store="m:R")
        )
        assert config.token_id_capture.sink == SINK
        assert config.token_id_capture.lineage_store == "m:R"

    def test_the_allowance_satisfies_a_custom_sink_with_a_warning(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """allow_unresolved_continuations accepts a sink without resolver, logging the cost."""
        with caplog.at_level(logging.WARNING, logger=logger.name):
            read_capture_config(
                capture(enabled=True, sink=SINK, allow_unresolved_continuations=True)
            )
        (record,) = caplog.records
        assert "masked" in record.getMessage()

    def test_a_dir_beside_the_sink_warns(self, caplog: pytest.LogCaptureFixture) -> None:
        """A dir next to a sink is logged as unused, naming both."""
        with caplog.at_level(logging.WARNING, logger=logger.name):
            read_capture_config(capture(enabled=True, sink=SINK, lineage_store="m:R", dir="/d"))
        (record,) = caplog.records
        assert SINK in record.getMessage()
        assert "/d" in record.getMessage()

    @pytest.mark.parametrize(
        ("block", "reason"),
        [
            (
                {"external_staging": True, "rebuild_response": False},
                "requires token_id_capture.enabled",
            ),
            ({"enabled": True, "dir": "/d", "external_staging": True}, "rebuild_response: false"),
            ({"external_staging_backend": "megatron_worker"}, "requires external_staging"),
            ({"external_staging_backend": "tpu_worker"}, "external_staging_backend"),
            ({"control_auth_token_env": ""}, "control_auth_token_env"),
            ({"enabled": True, "delta_records": True}, "neither a sink nor a directory"),
            ({"enabled": True, "dir": "relative", "delta_records": True}, "absolute"),
        ],
        ids=[
            "staging-disabled",
            "staging-rebuild",
            "megatron",
            "backend",
            "token-env",
            "no-dir",
            "relative",
        ],
    )
    def test_what_0_7_0_refuses_is_refused(self, block: dict[str, Any], reason: str) -> None:
        """Each validation rule of 0.7.0 refuses its block with a message naming the rule."""
        with pytest.raises(ValidationError, match=reason):
            Gym07CaptureConfig.model_validate(capture(**block))

    @pytest.mark.parametrize(
        "block",
        [
            {"sink": "no-colon", "dir": "relative", "delta_records": True},
            {"enabled": True, "rebuild_response": False, "delta_records": True},
            {"enabled": True, "external_staging": True, "rebuild_response": False},
            {"enabled": True, "dir": "/d", "mask_fraction_min_samples": 0, "delta_records": True},
        ],
        ids=["disabled", "no-rebuild", "staging", "min-samples"],
    )
    def test_what_0_7_0_accepts_is_accepted(self, block: dict[str, Any]) -> None:
        """A disabled block, a reader-owned block and external staging are valid in 0.7.0."""
        assert isinstance(read_capture_config(capture(**block)), Gym07CaptureConfig)

    def test_the_fallback_dir_is_resolved(self) -> None:
        """resolved_dir falls back to model_call_capture_dir, as in the seed."""
        config = read_capture_config(
            {"model_call_capture_dir": "/fallback", **capture(enabled=True, delta_records=True)}
        )
        assert config.resolved_dir() == Path("/fallback")

    def test_errors_do_not_echo_kwargs(self) -> None:
        """A refused 0.7.0 block never prints sink or lineage kwargs values."""
        kwargs = {"url": f"redis://u:{SECRET}@h"}
        with pytest.raises(ValidationError) as caught:
            read_capture_config(
                capture(enabled=True, sink=SINK, sink_kwargs=kwargs, lineage_store_kwargs=SECRET)
            )
        assert SECRET not in str(caught.value)
