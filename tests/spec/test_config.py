"""Tests of tokcap_spec.config: the token_id_capture block (CFG-1 to CFG-6, BUILD-2)."""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from tokcap_spec import config as config_module
from tokcap_spec.config import (
    TOKEN_ID_CAPTURE_BLOCK,
    MaskFractionGuard,
    TokenIdCaptureConfig,
    TokenIdCaptureSettings,
    logger,
    token_id_capture_config,
    token_id_capture_enabled_for_agent,
)
from tokcap_spec.errors import EndpointError, MaskFractionExceededError
from tokcap_spec.protocols import TokenSink, TokenSource, install_token_sink

# The seed's TokenIdCaptureSettings: every field, its annotation and its default.
SEED_SETTINGS: dict[str, tuple[Any, Any]] = {
    "enabled": (bool, False),
    "dir": (Path | None, None),
    "sink": (str | None, None),
    "sink_kwargs": (dict[str, Any], {}),
    "all_agents": (bool, False),
    "rebuild_response": (bool, True),
    "max_mask_fraction": (float | None, None),
    "mask_fraction_min_samples": (int, 50),
}

SEED_EXAMPLE = """
env:
  nemo_gym:
    token_id_capture:
      enabled: true
      dir: /tmp/ng_tokcap
      sink: my_pkg.sinks:MyDataPlaneSink
"""

SECRET = "hunter2-s3cr3t-value"
TOKEN = "tok-0f9e8d7c6b5a"
KWARGS = {"url": f"redis://user:{SECRET}@host", "token": TOKEN}


def capture(**block: Any) -> dict[str, Any]:
    """A global config dict holding only a token_id_capture block."""
    return {TOKEN_ID_CAPTURE_BLOCK: block}


def chain_texts(exc: BaseException) -> Iterator[str]:
    """The text of an exception and of everything chained to it."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield f"{current!s} {current!r}"
        pending += [current.__cause__, current.__context__]


class TestSeedNames:
    def test_every_seed_name_imports(self) -> None:
        """The seed module's names exist in tokcap_spec.config with the seed's values (CFG-1)."""
        assert TOKEN_ID_CAPTURE_BLOCK == "token_id_capture"
        assert isinstance(logger, logging.Logger)
        assert logger.name == "tokcap_spec.config"
        for name in ("TokenIdCaptureConfig", "TokenIdCaptureSettings"):
            assert name in config_module.__all__

    def test_function_signatures_match_the_seed(self) -> None:
        """The two functions take the seed's parameters (CFG-1)."""
        assert list(inspect.signature(token_id_capture_config).parameters) == ["global_config_dict"]
        assert list(inspect.signature(token_id_capture_enabled_for_agent).parameters) == [
            "global_config_dict",
            "agent_name",
        ]

    def test_config_members_match_the_seed(self) -> None:
        """TokenIdCaptureConfig has the seed's fields, property, methods and static builder."""
        members = vars(TokenIdCaptureConfig)
        assert isinstance(members["enabled"], property)
        assert isinstance(members["_build_endpoint"], staticmethod)
        assert list(inspect.signature(TokenIdCaptureConfig._build_endpoint).parameters) == [
            "target",
            "kwargs",
            "protocol",
            "kind",
        ]
        for method in ("_validate", "build_sink", "resolved_dir"):
            assert callable(getattr(TokenIdCaptureConfig, method))
        assert set(TokenIdCaptureConfig.model_fields) == {
            "model_call_capture_dir",
            "token_id_capture",
        }


class TestTokenIdCaptureSettings:
    def test_fields_and_defaults_match_the_seed(self) -> None:
        """Every field has the seed's annotation and default, and there are no others (CFG-1)."""
        fields = TokenIdCaptureSettings.model_fields
        assert set(fields) == set(SEED_SETTINGS)
        defaults = TokenIdCaptureSettings()
        for name, (annotation, default) in SEED_SETTINGS.items():
            assert fields[name].annotation == annotation, name
            assert getattr(defaults, name) == default, name

    def test_unknown_key_is_refused(self) -> None:
        """A misspelt key in the block is refused, naming it (CFG-1)."""
        assert TokenIdCaptureSettings.model_config["extra"] == "forbid"
        with pytest.raises(ValidationError, match="enabeld"):
            token_id_capture_config(capture(enabeld=True))

    @pytest.mark.parametrize("fraction", [-0.01, 1.01, float("nan")])
    def test_mask_fraction_outside_unit_interval_is_refused(self, fraction: float) -> None:
        """max_mask_fraction must lie in [0, 1] (CFG-6)."""
        with pytest.raises(ValidationError, match="max_mask_fraction"):
            TokenIdCaptureSettings(max_mask_fraction=fraction)

    @pytest.mark.parametrize("fraction", [0.0, 1.0, None])
    def test_mask_fraction_bounds_are_accepted(self, fraction: float | None) -> None:
        """0, 1 and None are legal limits (CFG-6)."""
        assert TokenIdCaptureSettings(max_mask_fraction=fraction).max_mask_fraction == fraction

    def test_min_samples_below_one_is_refused(self) -> None:
        """mask_fraction_min_samples must be at least 1 (CFG-6)."""
        with pytest.raises(ValidationError, match="mask_fraction_min_samples"):
            TokenIdCaptureSettings(mask_fraction_min_samples=0)

    def test_errors_do_not_echo_kwargs(self) -> None:
        """A malformed block's error never prints sink_kwargs values (BUILD-2)."""
        with pytest.raises(ValidationError) as caught:
            token_id_capture_config(capture(enabled=True, sink_kwargs=SECRET))
        with pytest.raises(ValidationError) as unknown:
            token_id_capture_config(capture(enabled=True, sink="x:Y", sink_kwargs=KWARGS, z=1))
        for exc in (caught.value, unknown.value):
            assert SECRET not in str(exc)


class TestTokenIdCaptureConfig:
    def test_unrelated_top_level_keys_are_ignored(self) -> None:
        """Keys of the global config other than the block and the fallback dir are ignored."""
        config = token_id_capture_config({"policy_model": {"x": 1}, "seed": 3})
        assert not config.enabled
        assert config.model_call_capture_dir is None

    def test_dir_wins_over_the_fallback(self) -> None:
        """resolved_dir is token_id_capture.dir when it is set (CFG-2)."""
        config = token_id_capture_config(
            {"model_call_capture_dir": "/fallback", **capture(dir="/tokens")}
        )
        assert config.resolved_dir() == Path("/tokens")

    def test_fallback_dir_is_used(self) -> None:
        """resolved_dir falls back to model_call_capture_dir (CFG-2)."""
        config = token_id_capture_config({"model_call_capture_dir": "/fallback"})
        assert config.resolved_dir() == Path("/fallback")

    def test_no_dir_resolves_to_none(self) -> None:
        """resolved_dir is None when neither directory is set (CFG-2)."""
        assert token_id_capture_config({}).resolved_dir() is None

    def test_enabled_mirrors_the_block(self) -> None:
        """The enabled property is the block's enabled flag."""
        assert token_id_capture_config(capture(enabled=True, dir="/d")).enabled
        assert not token_id_capture_config(capture(enabled=False)).enabled

    def test_none_reads_as_an_empty_config(self) -> None:
        """A global config of None gives the disabled default."""
        assert token_id_capture_config(None) == TokenIdCaptureConfig()

    def test_non_mapping_is_refused(self) -> None:
        """A global config that is not a mapping raises TypeError naming its type."""
        with pytest.raises(TypeError, match="mapping, got list"):
            token_id_capture_config([1])

    def test_seed_example_reads(self, caplog: pytest.LogCaptureFixture) -> None:
        """The seed's YAML example parses into an enabled config with its sink and dir."""
        loaded = yaml.safe_load(SEED_EXAMPLE)["env"]["nemo_gym"]
        with caplog.at_level(logging.WARNING, logger=logger.name):
            config = token_id_capture_config(loaded)
        assert config.token_id_capture.sink == "my_pkg.sinks:MyDataPlaneSink"
        assert config.resolved_dir() == Path("/tmp/ng_tokcap")


class TestValidate:
    def test_disabled_validates_nothing(self, caplog: pytest.LogCaptureFixture) -> None:
        """A disabled block accepts a bad sink and a relative dir without a warning (CFG-3)."""
        with caplog.at_level(logging.WARNING, logger=logger.name):
            config = token_id_capture_config(capture(sink="no-colon", dir="relative"))
        assert not config.enabled
        assert caplog.records == []

    def test_malformed_sink_is_refused(self) -> None:
        """An enabled sink without ':' is refused at validation (CFG-3, BUILD-2)."""
        with pytest.raises(ValidationError, match=r"'module\.path:ClassName'"):
            token_id_capture_config(capture(enabled=True, sink="no-colon", sink_kwargs=KWARGS))

    @pytest.mark.parametrize("target", [":Cls", "mod:", "mod"])
    def test_sink_needs_both_halves(self, target: str) -> None:
        """A sink with an empty module or class half is refused (BUILD-2)."""
        with pytest.raises(ValidationError, match=repr(target)):
            token_id_capture_config(capture(enabled=True, sink=target))

    def test_sink_alone_is_valid_without_warning(self, caplog: pytest.LogCaptureFixture) -> None:
        """An enabled sink with no directory is valid and logs nothing (CFG-3)."""
        with caplog.at_level(logging.WARNING, logger=logger.name):
            config = token_id_capture_config(capture(enabled=True, sink="pkg.mod:Sink"))
        assert config.token_id_capture.sink == "pkg.mod:Sink"
        assert caplog.records == []

    @pytest.mark.parametrize(
        "extra",
        [{TOKEN_ID_CAPTURE_BLOCK: {"dir": "/d"}}, {"model_call_capture_dir": "/d"}],
    )
    def test_sink_with_dir_warns(
        self, caplog: pytest.LogCaptureFixture, extra: dict[str, Any]
    ) -> None:
        """A sink plus any directory logs one warning naming both on the config logger (CFG-3)."""
        block = {"enabled": True, "sink": "pkg.mod:Sink", **extra.get(TOKEN_ID_CAPTURE_BLOCK, {})}
        raw = {**extra, TOKEN_ID_CAPTURE_BLOCK: block}
        with caplog.at_level(logging.WARNING, logger=logger.name):
            token_id_capture_config(raw)
        (record,) = caplog.records
        assert (record.name, record.levelno) == ("tokcap_spec.config", logging.WARNING)
        assert "pkg.mod:Sink" in record.getMessage()
        assert "/d" in record.getMessage()

    @pytest.mark.parametrize("directory", [None, "relative/dir"])
    @pytest.mark.usefixtures("clean_install")
    def test_file_store_needs_an_absolute_dir(self, directory: str | None) -> None:
        """Enabled without sink and with no absolute directory is refused, naming it (CFG-3)."""
        with pytest.raises(ValidationError, match="absolute") as caught:
            token_id_capture_config(capture(enabled=True, dir=directory))
        assert str(directory) in str(caught.value)

    @pytest.mark.usefixtures("clean_install")
    def test_fallback_dir_satisfies_the_file_store(self) -> None:
        """An absolute model_call_capture_dir is enough for the file store (CFG-3)."""
        config = token_id_capture_config({"model_call_capture_dir": "/d", **capture(enabled=True)})
        assert config.resolved_dir() == Path("/d")

    @pytest.mark.usefixtures("clean_install")
    def test_installed_sink_replaces_the_dir(self, targets: str) -> None:
        """With a sink installed in this process, no directory is needed (CFG-3)."""
        install_token_sink(importlib.import_module(targets).GoodSink())
        assert token_id_capture_config(capture(enabled=True)).enabled

    @pytest.mark.usefixtures("clean_install")
    def test_no_rebuild_needs_no_dir(self) -> None:
        """With rebuild_response false, no directory is needed (CFG-3)."""
        config = token_id_capture_config(capture(enabled=True, rebuild_response=False))
        assert config.resolved_dir() is None


class TestBuildSink:
    def test_disabled_builds_nothing(self) -> None:
        """A disabled block returns None without importing its sink (CFG-4)."""
        config = token_id_capture_config(capture(sink="no_such_module_tokcap:Sink"))
        assert config.build_sink() is None

    def test_no_sink_builds_nothing(self) -> None:
        """An enabled block without a sink returns None: the file store is in use (CFG-4)."""
        assert token_id_capture_config(capture(enabled=True, dir="/d")).build_sink() is None

    @pytest.mark.parametrize("attribute", ["GoodSink", "Outer.Inner", "make_sink"])
    def test_each_call_builds_a_new_instance(self, targets: str, attribute: str) -> None:
        """Each call returns a new sink built from the kwargs (CFG-4, BUILD-1)."""
        config = token_id_capture_config(
            capture(enabled=True, sink=f"{targets}:{attribute}", sink_kwargs=KWARGS)
        )
        first, second = config.build_sink(), config.build_sink()
        assert first is not None
        assert second is not None
        assert first is not second
        assert isinstance(first, TokenSink)
        assert (getattr(first, "url", None), getattr(first, "token", None)) == (
            KWARGS["url"],
            TOKEN,
        )

    def test_bad_target_raises_an_endpoint_error(self) -> None:
        """build_sink raises EndpointError for a target that cannot be built (CFG-4)."""
        config = token_id_capture_config(capture(enabled=True, sink="no_such_module_tokcap:S"))
        with pytest.raises(EndpointError, match="cannot be imported"):
            config.build_sink()


class TestBuildEndpoint:
    @pytest.mark.parametrize(
        ("attribute", "kwargs", "expected"),
        [
            ("Missing", KWARGS, "has no attribute 'Missing'"),
            ("Outer.Missing", KWARGS, "has no attribute 'Outer.Missing'"),
            ("NOT_CALLABLE", KWARGS, "'NOT_CALLABLE' is not callable"),
            ("GoodSink", {**KWARGS, "password": SECRET}, r"keyword arguments \(password, token"),
            ("EchoingSink", KWARGS, r"keyword arguments \(token, url\): ValueError"),
            ("NoMarkSink", KWARGS, r"TokenSink: mark_incomplete\(\) is missing"),
            ("SyncPutSink", KWARGS, r"TokenSink: put\(\) is not a coroutine function"),
        ],
    )
    def test_bad_target_is_refused_without_values(
        self, targets: str, attribute: str, kwargs: dict[str, str], expected: str
    ) -> None:
        """Each BUILD-2 failure names the target and never a kwarg value, even when chained."""
        target = f"{targets}:{attribute}"
        with pytest.raises(EndpointError, match=expected) as caught:
            TokenIdCaptureConfig._build_endpoint(target, kwargs, TokenSink, "sink")
        assert repr(target) in str(caught.value)
        for text in chain_texts(caught.value):
            assert SECRET not in text
            assert TOKEN not in text

    @pytest.mark.parametrize("target", ["no_colon", "no_such_module_tokcap:Sink"])
    def test_unimportable_target_is_refused_without_values(self, target: str) -> None:
        """A target without ':' or with a missing module is refused by name (BUILD-2)."""
        with pytest.raises(EndpointError, match=r"must have the form|cannot be imported") as caught:
            TokenIdCaptureConfig._build_endpoint(target, KWARGS, TokenSink, "sink")
        assert repr(target) in str(caught.value)
        for text in chain_texts(caught.value):
            assert SECRET not in text

    def test_echoed_value_is_redacted(self, targets: str) -> None:
        """A constructor that echoes its kwargs has them replaced by *** (BUILD-2)."""
        with pytest.raises(EndpointError, match=r"cannot connect to \*\*\* with token \*\*\*"):
            TokenIdCaptureConfig._build_endpoint(
                f"{targets}:EchoingSink", KWARGS, TokenSink, "sink"
            )

    def test_kind_is_named(self, targets: str) -> None:
        """The message says which kind of endpoint failed and which protocol it misses."""
        with pytest.raises(EndpointError, match=r"^token source .*freeze\(\) is missing"):
            TokenIdCaptureConfig._build_endpoint(f"{targets}:GoodSink", {}, TokenSource, "source")


class TestEnabledForAgent:
    ON = capture(enabled=True, rebuild_response=False)

    def agent(self, *bodies: Any) -> dict[str, Any]:
        return {"responses_api_agents": {f"impl{i}": body for i, body in enumerate(bodies)}}

    def test_disabled_is_false_for_every_agent(self) -> None:
        """With capture disabled no agent participates, flag or not (CFG-5)."""
        raw = {**capture(all_agents=True), "a": self.agent({"token_id_capture": True})}
        assert not token_id_capture_enabled_for_agent(raw, "a")

    @pytest.mark.parametrize("name", ["a", "unknown", None])
    def test_all_agents_is_true_for_every_agent(self, name: str | None) -> None:
        """all_agents makes every agent participate, even unknown or unnamed ones (CFG-5)."""
        raw = capture(enabled=True, rebuild_response=False, all_agents=True)
        assert token_id_capture_enabled_for_agent(raw, name)

    def test_agent_flag_enables_that_agent(self) -> None:
        """An agent whose responses_api_agents entry sets token_id_capture participates (CFG-5)."""
        raw = {**self.ON, "a": self.agent({"x": 1}, {"token_id_capture": True}), "b": self.agent()}
        assert token_id_capture_enabled_for_agent(raw, "a")
        assert not token_id_capture_enabled_for_agent(raw, "b")

    @pytest.mark.parametrize(
        "agent",
        [
            {"responses_api_agents": {"impl": {"token_id_capture": False}}},
            {"responses_api_agents": {"impl": "token_id_capture"}},
            {"responses_api_agents": ["token_id_capture"]},
            {"token_id_capture": True},
            "not a mapping",
        ],
    )
    def test_agent_without_the_flag_is_false(self, agent: Any) -> None:
        """An agent with no truthy flag in a responses_api_agents entry does not take part."""
        assert not token_id_capture_enabled_for_agent({**self.ON, "a": agent}, "a")

    @pytest.mark.parametrize("name", ["missing", None])
    def test_unknown_or_unnamed_agent_is_false(self, name: str | None) -> None:
        """Without all_agents, an unknown or unnamed agent does not take part (CFG-5)."""
        assert not token_id_capture_enabled_for_agent(self.ON, name)


class TestMaskFractionGuard:
    def test_no_limit_never_aborts(self) -> None:
        """Without max_mask_fraction every rollout may be masked (CFG-6)."""
        guard = MaskFractionGuard(None, 1)
        for _ in range(100):
            guard.record(True)
        assert guard.fraction == 1.0

    def test_exactly_at_the_limit_does_not_abort(self) -> None:
        """A masked fraction equal to the limit is allowed (CFG-6)."""
        guard = MaskFractionGuard(0.3, 10)
        for index in range(10):
            guard.record(index < 3)
        assert (guard.finalized, guard.masked) == (10, 3)

    def test_above_the_limit_aborts_once_min_samples_reached(self) -> None:
        """Strictly above the limit aborts only at the min_samples-th rollout (CFG-6)."""
        guard = MaskFractionGuard(0.0, 3)
        guard.record(True)
        guard.record(True)
        with pytest.raises(MaskFractionExceededError, match=r"2 of 3 .*max_mask_fraction=0\.0"):
            guard.record(False)

    def test_abort_repeats_while_above_the_limit(self) -> None:
        """Every later rollout aborts again while the fraction stays above the limit (CFG-6)."""
        guard = MaskFractionGuard(0.5, 1)
        for _ in range(2):
            with pytest.raises(MaskFractionExceededError):
                guard.record(True)
        with pytest.raises(MaskFractionExceededError):
            guard.record(False)
        guard.record(False)
        assert guard.fraction == 0.5

    def test_limit_one_never_aborts(self) -> None:
        """With a limit of 1 even an all-masked run continues (CFG-6)."""
        guard = MaskFractionGuard(1.0, 1)
        for _ in range(5):
            guard.record(True)
        assert guard.masked == 5

    def test_fraction_starts_at_zero(self) -> None:
        """The fraction is 0.0 before any rollout is finalized."""
        assert MaskFractionGuard(0.1).fraction == 0.0

    @pytest.mark.parametrize(("limit", "samples"), [(-0.1, 50), (1.5, 50), (0.5, 0)])
    def test_bad_settings_are_refused(self, limit: float, samples: int) -> None:
        """A limit outside [0, 1] or fewer than one sample is refused (CFG-6)."""
        with pytest.raises(ValueError, match=r"max_mask_fraction|mask_fraction_min_samples"):
            MaskFractionGuard(limit, samples)

    def test_from_settings_uses_the_block(self) -> None:
        """from_settings takes the limit and minimum from the block."""
        guard = MaskFractionGuard.from_settings(
            TokenIdCaptureSettings(max_mask_fraction=0.25, mask_fraction_min_samples=8)
        )
        assert (guard.max_mask_fraction, guard.min_samples) == (0.25, 8)


class TestPublicBuildEndpoint:
    def test_the_seed_method_is_the_public_builder(self, targets: str) -> None:
        """TokenIdCaptureConfig._build_endpoint builds exactly what build_endpoint builds."""
        from tokcap_spec.config import build_endpoint

        built = build_endpoint(f"{targets}:GoodSink", {}, TokenSink, "sink")
        again = TokenIdCaptureConfig._build_endpoint(f"{targets}:GoodSink", {}, TokenSink, "sink")
        assert type(built) is type(again)
        with pytest.raises(EndpointError, match="has no attribute 'Missing'"):
            build_endpoint(f"{targets}:Missing", {}, TokenSink, "sink")
