"""Resolving the kit's options from the command line, the environment and ini files."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conformance._settings import DEFAULT_SEED, Option, SettingsError, resolve_settings
from reference import FileTokenStore
from tokcap_spec.config import build_endpoint
from tokcap_spec.protocols import TokenSink


def lookup(values: dict[str, Any], where: str) -> Any:
    def find(option: Option) -> tuple[Any, str]:
        return values.get(option.name), where

    return find


def resolve(
    cli: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    ini: dict[str, Any] | None = None,
    scratch: Path | None = None,
) -> Any:
    def make() -> Path:
        if scratch is None:
            raise AssertionError("the scratch directory was made though no kwarg uses it")
        scratch.mkdir()
        return scratch

    return resolve_settings(lookup(cli or {}, "cli"), env or {}, lookup(ini or {}, "ini"), make)


class TestResolveSettings:
    def test_no_target_leaves_the_kit_inactive(self) -> None:
        """Without a sink or a config file the kit resolves to nothing."""
        assert resolve(cli={"seed": "3"}) is None

    def test_command_line_beats_environment_beats_ini(self) -> None:
        """A value on the command line wins over the environment, which wins over ini."""
        env = {"TOKCAP_SEED": "2"}
        ini = {"sink": "m:C", "seed": "1"}
        assert resolve(cli={"seed": "3"}, env=env, ini=ini).seed == 3
        assert resolve(env=env, ini=ini).seed == 2
        assert resolve(ini=ini).seed == 1

    def test_source_defaults_to_the_sink(self) -> None:
        """Without a source target the sink target and kwargs serve as the source."""
        settings = resolve(cli={"sink": "m:C", "sink-kwargs": '{"a": 1}'})
        assert (settings.source, dict(settings.source_kwargs)) == ("m:C", {"a": 1})

    def test_the_lineage_resolver_reads_the_sinks_store_unless_told_otherwise(
        self, tmp_path: Path
    ) -> None:
        """--tokcap-lineage takes the sink's kwargs ({tmp_path} the same folder) by default."""
        cli = {"sink": "m:C", "sink-kwargs": '{"root": "{tmp_path}"}', "lineage": "m:R"}
        settings = resolve(cli=cli, scratch=tmp_path / "s")
        assert settings.lineage == "m:R"
        assert dict(settings.lineage_kwargs) == {"root": str(tmp_path / "s")}
        assert settings.roles()[-1] == ("lineage", "m:R")
        given = resolve(env={"TOKCAP_LINEAGE": "m:R"}, cli={"sink": "m:C", "lineage-kwargs": "{}"})
        assert (given.lineage, dict(given.lineage_kwargs)) == ("m:R", {})
        assert resolve(cli={"sink": "m:C"}).lineage == ""
        assert "lineage" in resolve(cli=cli, scratch=tmp_path / "t").secrets

    def test_lineage_kwargs_without_a_resolver_are_refused(self) -> None:
        with pytest.raises(
            SettingsError, match=r"--tokcap-lineage-kwargs .*needs --tokcap-lineage"
        ):
            resolve(cli={"sink": "m:C", "lineage-kwargs": "{}"})
        with pytest.raises(SettingsError, match=r"module\.path:ClassName"):
            resolve(cli={"sink": "m:C", "lineage": "no-colon"})

    def test_defaults(self) -> None:
        """An unset fence is any, the seed is fixed and no capability is claimed."""
        settings = resolve(cli={"sink": "m:C"})
        assert (settings.fence, settings.seed, settings.capabilities) == (
            "any",
            DEFAULT_SEED,
            frozenset(),
        )

    def test_tmp_path_is_substituted_in_kwargs(self, tmp_path: Path) -> None:
        """'{tmp_path}' in any kwarg string becomes the scratch directory the caller made."""
        settings = resolve(
            cli={"sink": "m:C", "sink-kwargs": '{"root": "{tmp_path}/x", "l": ["{tmp_path}"]}'},
            scratch=tmp_path / "scratch",
        )
        assert settings.sink_kwargs["l"] == [str(tmp_path / "scratch")]
        assert settings.sink_kwargs["root"] == f"{tmp_path / 'scratch'}/x"
        assert (tmp_path / "scratch").is_dir()

    def test_no_scratch_directory_without_tmp_path(self) -> None:
        """Kwargs that do not use '{tmp_path}' make no directory at all."""
        settings = resolve(cli={"sink": "m:C", "sink-kwargs": '{"root": "/data"}'})
        assert settings.sink_kwargs == {"root": "/data"}

    @pytest.mark.parametrize(
        ("profile", "seconds"), [("quick", 30.0), ("ci", 30.0), ("thorough", 120.0)]
    )
    def test_timeout_defaults_scale_with_the_profile(self, profile: str, seconds: float) -> None:
        """Without --tokcap-timeout each profile has its own deadline per call."""
        assert resolve(cli={"sink": "m:C", "profile": profile}).timeout == seconds

    def test_timeout_from_the_environment(self) -> None:
        """TOKCAP_TIMEOUT sets the deadline in seconds, fractions allowed."""
        assert resolve(cli={"sink": "m:C"}, env={"TOKCAP_TIMEOUT": "2.5"}).timeout == 2.5

    @pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
    def test_unusable_timeout_is_refused(self, value: str) -> None:
        """A deadline that is not a positive finite number is refused naming its source."""
        with pytest.raises(SettingsError, match=r"--tokcap-timeout=.* \(from cli\) must be"):
            resolve(cli={"sink": "m:C", "timeout": value})

    def test_capabilities_accept_commas_and_repeats(self) -> None:
        """Capabilities may be repeated or comma-separated."""
        settings = resolve(cli={"sink": "m:C", "capability": ["no-delete,process-local"]})
        assert settings.capabilities == {"no-delete", "process-local"}

    def test_environment_capabilities_split_on_commas(self) -> None:
        """TOKCAP_CAPABILITY holds a comma-separated list."""
        settings = resolve(
            env={"TOKCAP_SINK": "m:C", "TOKCAP_CAPABILITY": "no-delete, process-local"}
        )
        assert settings.capabilities == {"no-delete", "process-local"}

    @pytest.mark.parametrize(
        ("cli", "env", "expected"),
        [
            ({"sink": "m:C", "fence": "loose"}, {}, "--tokcap-fence='loose' (from cli)"),
            ({"sink": "m:C"}, {"TOKCAP_FENCE": "loose"}, "environment variable TOKCAP_FENCE"),
            ({"sink": "m:C", "capability": ["fast"]}, {}, "unknown capabilities fast"),
            ({"sink": "nocolon"}, {}, "must have the form 'module.path:ClassName'"),
            ({"sink": "m:C", "seed": "x"}, {}, "must be an integer"),
            ({"sink": "m:C", "profile": "huge"}, {}, "is not one of: quick, ci, thorough"),
            ({"source": "m:C"}, {}, "needs --tokcap-sink or --tokcap-config"),
            ({"sink": "m:C", "sink-kwargs": "[1]"}, {}, "must be a JSON object"),
        ],
    )
    def test_bad_values_name_the_option_and_where_it_came_from(
        self, cli: dict[str, Any], env: dict[str, str], expected: str
    ) -> None:
        """A bad value is refused with the option and its origin in the message."""
        with pytest.raises(SettingsError, match=None) as info:
            resolve(cli=cli, env=env)
        assert expected in str(info.value)

    def test_bad_json_kwargs_never_echo_their_text(self) -> None:
        """Malformed kwargs are refused without repeating what was passed."""
        with pytest.raises(SettingsError) as info:
            resolve(cli={"sink": "m:C", "sink-kwargs": '{"password": "hunter2-secret"'})
        assert "hunter2-secret" not in str(info.value)
        assert "not valid JSON" in str(info.value)

    def test_gym_config_names_the_sink(self, tmp_path: Path) -> None:
        """A Gym config file under env.nemo_gym gives the sink target and kwargs."""
        path = tmp_path / "gym.yaml"
        block = {"enabled": True, "sink": "m:C", "sink_kwargs": {"url": "x"}}
        path.write_text(json.dumps({"env": {"nemo_gym": {"token_id_capture": block}}}))
        settings = resolve(cli={"config": str(path), "allow-real-store": True})
        assert (settings.sink, dict(settings.sink_kwargs), settings.config) == (
            "m:C",
            {"url": "x"},
            path,
        )
        assert settings.real_store

    def test_gym_config_without_sink_uses_the_file_store(self, tmp_path: Path) -> None:
        """A config with only a dir judges the file store in a fresh folder inside that dir."""
        path = tmp_path / "gym.yaml"
        path.write_text(f"token_id_capture:\n  enabled: true\n  dir: {tmp_path}/store\n")
        settings = resolve(cli={"config": str(path)})
        assert settings.sink == "reference:FileTokenStore"
        built = build_endpoint(settings.sink, {"root": str(tmp_path / "built")}, TokenSink, "sink")
        assert isinstance(built, FileTokenStore)
        root = Path(settings.sink_kwargs["root"])
        assert root.parent == tmp_path / "store"
        assert root.name.startswith(".tokcap-conformance-")
        assert settings.judged_directory == root

    def test_gym_config_with_a_sink_is_judged_where_it_points(self, tmp_path: Path) -> None:
        """A config naming its sink has no folder of the kit's to remove."""
        path = tmp_path / "gym.yaml"
        block = {"enabled": True, "sink": "m:C", "sink_kwargs": {"root": str(tmp_path)}}
        path.write_text(json.dumps({"token_id_capture": block}))
        settings = resolve(cli={"config": str(path)}, env={"TOKCAP_ALLOW_REAL_STORE": "true"})
        assert settings.judged_directory is None

    def test_a_config_naming_a_real_store_needs_it_allowed(self, tmp_path: Path) -> None:
        """A config whose sink is not a scratch file store is refused unless allowed."""
        path = tmp_path / "gym.yaml"
        path.write_text(json.dumps({"token_id_capture": {"enabled": True, "sink": "m:C"}}))
        with pytest.raises(SettingsError) as info:
            resolve(cli={"config": str(path)})
        assert str(info.value) == (
            f"--tokcap-config={str(path)!r} (from cli) names the sink m:C, which the kit would "
            "judge where the config points: its test rollouts (ids unique to this run) would "
            "stay in that store. Pass --tokcap-allow-real-store (env "
            "TOKCAP_ALLOW_REAL_STORE=true, ini tokcap_allow_real_store = true) to judge it "
            "there, or judge a scratch instance with --tokcap-sink and --tokcap-sink-kwargs"
        )
        assert resolve(cli={"config": str(path), "allow-real-store": True}).real_store
        assert resolve(cli={"config": str(path)}, ini={"allow-real-store": "yes"}).real_store

    def test_a_config_on_the_file_store_in_scratch_is_no_real_store(self, tmp_path: Path) -> None:
        """A config on the reference file store rooted in {tmp_path} needs nothing allowed."""
        path = tmp_path / "gym.yaml"
        block = {"enabled": True, "sink": "reference:FileTokenStore"}
        block["sink_kwargs"] = {"root": "{tmp_path}"}
        path.write_text(json.dumps({"token_id_capture": block}))
        settings = resolve(cli={"config": str(path)}, scratch=tmp_path / "scratch")
        assert not settings.real_store
        assert settings.sink_kwargs["root"] == str(tmp_path / "scratch")

    def test_a_config_and_a_sink_together_are_refused(self, tmp_path: Path) -> None:
        """Both a config and a sink name the sink: the error names each and where it came from."""
        path = tmp_path / "gym.yaml"
        with pytest.raises(SettingsError) as info:
            resolve(cli={"sink": "m:C"}, env={"TOKCAP_CONFIG": str(path)})
        assert str(info.value) == (
            f"--tokcap-sink='m:C' (from cli) and --tokcap-config={str(path)!r} (from "
            "environment variable TOKCAP_CONFIG) both name the sink to judge; give one of them"
        )

    def test_a_switch_takes_only_true_or_false(self) -> None:
        """A switch spelled neither true nor false is refused, naming where it came from."""
        with pytest.raises(SettingsError) as info:
            resolve(cli={"sink": "m:C"}, env={"TOKCAP_ALLOW_REAL_STORE": "maybe"})
        assert "(from environment variable TOKCAP_ALLOW_REAL_STORE) is not one of: true" in str(
            info.value
        )

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("token_id_capture:\n  enabled: false\n", "enabled is false"),
            ("other: 1\n", "has no 'token_id_capture' block"),
            ("token_id_capture:\n  enabled: true\n  typo_key: s3cr3t-value\n", "typo_key"),
            ("[1, 2", "is not valid YAML"),
        ],
    )
    def test_bad_gym_config_is_refused_clearly(
        self, tmp_path: Path, text: str, expected: str
    ) -> None:
        """An unusable config file is refused naming the file and the problem, never values."""
        path = tmp_path / "gym.yaml"
        path.write_text(text)
        with pytest.raises(SettingsError) as info:
            resolve(cli={"config": str(path)})
        assert expected in str(info.value)
        assert str(path) in str(info.value)
        assert "s3cr3t-value" not in str(info.value)


def test_yaml_errors_do_not_quote_the_file(tmp_path: Path) -> None:
    """A YAML syntax error is reported by position, without quoting the offending line."""
    path = tmp_path / "gym.yaml"
    path.write_text('token_id_capture:\n  sink_kwargs: {url: "redis://:pw-s3cr3t@h"\n')
    with pytest.raises(SettingsError) as info:
        resolve(cli={"config": str(path)})
    assert "line" in str(info.value)
    assert "pw-s3cr3t" not in str(info.value)


class TestStagingContract:
    def test_capture_is_the_default_contract(self) -> None:
        """Without --tokcap-contract a run judges the capture contract, as before."""
        settings = resolve(cli={"sink": "m:C"})
        assert (settings.contract, settings.staging) == ("capture", False)
        assert settings.roles() == [("sink", "m:C"), ("source", "m:C")]

    def test_the_staging_sink_and_source_come_from_their_own_options(self) -> None:
        """Under staging-v2 the staging targets are judged; the source defaults to the sink."""
        settings = resolve(
            cli={"contract": "staging-v2", "staging-sink": "m:S"},
            env={"TOKCAP_STAGING_SINK_KWARGS": '{"url": "redis://:pw@h"}'},
        )
        assert (settings.contract, settings.staging) == ("staging-v2", True)
        assert settings.roles() == [("staging-sink", "m:S"), ("staging-source", "m:S")]
        assert dict(settings.source_kwargs) == {"url": "redis://:pw@h"}
        other = resolve(
            ini={
                "contract": "staging-v2",
                "staging-sink": "m:S",
                "staging-source": "m:R",
                "staging-source-kwargs": '{"b": 2}',
            }
        )
        assert other.targets() == [("staging-sink", "m:S", {}), ("staging-source", "m:R", {"b": 2})]

    @pytest.mark.parametrize(
        ("given", "says"),
        [
            ({"staging-sink": "m:S"}, "--tokcap-contract=staging-v2"),
            ({"sink": "m:C", "staging-source": "m:S"}, "--tokcap-contract=staging-v2"),
            ({"contract": "staging-v2"}, "--tokcap-staging-sink"),
            ({"contract": "staging-v2", "sink": "m:C"}, "capture contract"),
            ({"contract": "staging-v2", "staging-sink": "m:S", "lineage": "m:L"}, "lineage"),
            ({"contract": "staging-v3", "staging-sink": "m:S"}, "capture, staging-v2"),
            ({"contract": "staging-v2", "staging-sink": "m"}, "module.path:ClassName"),
            ({"staging-source": "m:S"}, "needs --tokcap-staging-sink"),
        ],
    )
    def test_mixed_or_missing_targets_are_refused_naming_the_fix(
        self, given: dict[str, str], says: str
    ) -> None:
        """Options of the other contract, a missing staging sink or an unknown contract are
        refused with an error that names the option to pass."""
        with pytest.raises(SettingsError, match=re.escape(says)):
            resolve(cli=given)

    def test_staging_kwargs_values_never_appear_in_errors(self) -> None:
        """A malformed staging kwarg is refused by name and position, never by its value."""
        with pytest.raises(SettingsError) as refused:
            resolve(
                cli={
                    "contract": "staging-v2",
                    "staging-sink": "m:S",
                    "staging-sink-kwargs": '{"url": "redis://:hunter2@h"',
                }
            )
        assert "hunter2" not in str(refused.value)
        assert "--tokcap-staging-sink-kwargs" in str(refused.value)
