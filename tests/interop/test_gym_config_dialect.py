"""tokcap reads a NeMo Gym 0.7.0 capture block as the released Gym does, and judges its sink.

The 0.7.0 dialect (``tokcap_spec.gym07_config``) is held against the released config module:
same keys, same defaults, and the same blocks accepted and refused. The kit then runs on
0.7.0's own documented example, taken from the released module at test time, and on a custom
sink that accepts unresolved continuations.
"""

from __future__ import annotations

import json
import textwrap
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from tokcap_spec.config import TOKEN_ID_CAPTURE_BLOCK
from tokcap_spec.gym07_config import (
    GYM07_DIALECT,
    Gym07CaptureConfig,
    Gym07CaptureSettings,
    capture_config_dialect,
)

BLOCKS: list[dict[str, Any]] = [
    {},
    {"enabled": True, "dir": "/d", "delta_records": True},
    {"enabled": True, "dir": "relative", "delta_records": True},
    {"enabled": True, "delta_records": True},
    {"enabled": True, "rebuild_response": False, "delta_records": True},
    {"enabled": True, "sink": "m:S", "delta_records": True},
    {"enabled": True, "sink": "m:S", "lineage_store": "m:R"},
    {"enabled": True, "sink": "m:S", "allow_unresolved_continuations": True, "dir": "/d"},
    {"enabled": False, "sink": "m:S", "delta_records": True},
    {"external_staging": True, "rebuild_response": False},
    {"enabled": True, "external_staging": True, "dir": "/d"},
    {"enabled": True, "external_staging": True, "rebuild_response": False},
    {"external_staging_backend": "megatron_worker"},
    {"external_staging_backend": "tpu_worker", "delta_records": True},
    {"control_auth_token_env": "", "delta_records": True},
    {"control_auth_token_env": "MY_TOKEN", "delta_records": True},
    {"max_mask_fraction": 1.5, "mask_fraction_min_samples": 0, "delta_records": True},
    {"delta_records": True, "lineage_stor": "m:R"},
    {"delta_records": "yes please"},
    {"lineage_store_kwargs": ["not", "a", "mapping"]},
]
"""Blocks, valid and invalid, in the 0.7.0 dialect (each uses a key 0.7.0 added, or none)."""


def accepts(model: Any, raw: dict[str, Any]) -> bool:
    """Return whether ``model`` validates the global config ``raw``."""
    try:
        model.model_validate(raw)
    except (ValidationError, ValueError):
        return False
    return True


def test_the_dialect_has_the_released_keys_and_defaults(gym: SimpleNamespace) -> None:
    """Every key of the released block exists here with the same default, and no other."""
    released = gym.config.TokenIdCaptureSettings()
    assert Gym07CaptureSettings().model_dump() == released.model_dump()


@pytest.mark.parametrize("block", BLOCKS, ids=[json.dumps(b) for b in BLOCKS])
def test_the_dialect_accepts_what_the_release_accepts(
    gym: SimpleNamespace, block: dict[str, Any]
) -> None:
    """A block is valid in tokcap's 0.7.0 dialect exactly when the released Gym accepts it."""
    raw = {TOKEN_ID_CAPTURE_BLOCK: block}
    assert accepts(Gym07CaptureConfig, raw) == accepts(gym.config.TokenIdCaptureConfig, raw)


def documented_example(gym: SimpleNamespace) -> dict[str, Any]:
    """The YAML example of the released config module's docstring, parsed."""
    doc = gym.config.__doc__
    start = doc.index("```yaml\n") + len("```yaml\n")
    loaded: dict[str, Any] = yaml.safe_load(doc[start : doc.index("```", start)])
    return loaded


EXAMPLE_PACKAGE = '''
"""The example's sink and resolver: a file store whose root comes from the environment."""

import os

from reference.file_store import FileTokenStore
from reference.lineage import FileLineageResolver


class MyDataPlaneSink(FileTokenStore):
    def __init__(self) -> None:
        super().__init__(root=os.environ["MY_PKG_SINK_ROOT"])


class MyResolver(FileLineageResolver):
    def __init__(self) -> None:
        super().__init__(root=os.environ["MY_PKG_SINK_ROOT"])


class GuessingResolver(MyResolver):
    """Resolves every request that has history to the first call it finds: never proven."""

    async def resolve(self, rollout_id, request_items):
        answer = await super().resolve(rollout_id, request_items)
        if answer.status != "unresolved":
            return answer
        entries = await self._store.peek(rollout_id)
        if not entries:
            return answer
        from tokcap_spec.lineage import LineageMatch, LineageResolution

        first = entries[0]
        tokens = (*first.prompt_token_ids, *first.generation_token_ids)
        return LineageResolution("resolved", LineageMatch(first.model_call_id, tokens, ""))
'''


def run_kit_on_config(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, config: dict[str, Any]
) -> pytest.RunResult:
    """Write ``config`` as YAML and run the whole kit on it in a fresh interpreter."""
    package = pytester.mkpydir("my_pkg")
    (package / "sinks.py").write_text(textwrap.dedent(EXAMPLE_PACKAGE), encoding="utf-8")
    monkeypatch.setenv("MY_PKG_SINK_ROOT", str(pytester.mkdir("sink-root")))
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    path = pytester.path / "gym.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    # The config names a sink of its own, which the kit judges only when told to; its store
    # is a folder of this test's.
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        f"--tokcap-config={path}",
        "--tokcap-allow-real-store",
        timeout=600,
    )


@pytest.mark.slow
def test_the_kit_judges_the_documented_example(
    gym: SimpleNamespace, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.7.0's own example (a sink, a lineage_store, delta_records) is read and its sink judged."""
    example = documented_example(gym)
    block = example["env"]["nemo_gym"][TOKEN_ID_CAPTURE_BLOCK]
    assert capture_config_dialect(example["env"]["nemo_gym"]) == GYM07_DIALECT
    assert {"sink", "lineage_store", "delta_records"} <= set(block)
    result = run_kit_on_config(pytester, monkeypatch, example)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["LINEAGE * 3 * 0 * 0 * 0 * 0", "clauses: * passed, 0 failed, *"])


@pytest.mark.slow
def test_the_kit_judges_the_resolver_a_config_names(
    gym: SimpleNamespace, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example with a resolver that guesses fails LINEAGE-3, and nothing else."""
    example = documented_example(gym)
    block = example["env"]["nemo_gym"][TOKEN_ID_CAPTURE_BLOCK]
    block["lineage_store"] = "my_pkg.sinks:GuessingResolver"
    result = run_kit_on_config(pytester, monkeypatch, example)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["clauses: * passed, 1 failed, *(failed: LINEAGE-3)*"])


@pytest.mark.slow
def test_the_kit_judges_a_sink_that_accepts_unresolved_continuations(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A custom sink with allow_unresolved_continuations and no resolver is judged."""
    block = {
        "enabled": True,
        "sink": "reference.file_store:FileTokenStore",
        "sink_kwargs": {"root": "{tmp_path}"},
        "allow_unresolved_continuations": True,
        "rebuild_response": False,
    }
    result = run_kit_on_config(pytester, monkeypatch, {TOKEN_ID_CAPTURE_BLOCK: block})
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["clauses: * passed, 0 failed, *"])


def test_a_sink_without_a_resolver_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 0.7.0 block whose custom sink has no resolver stops the run, naming lineage_store."""
    block = {"enabled": True, "sink": "reference.file_store:FileTokenStore", "delta_records": True}
    result = run_kit_on_config(pytester, monkeypatch, {TOKEN_ID_CAPTURE_BLOCK: block})
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*read as NeMo Gym 0.7.0's*lineage_store*"])
