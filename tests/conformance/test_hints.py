"""A failure caused by a usual first-implementation mistake names the mistake and its fix."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from conformance._hints import NULL_LOG_PROB, null_log_prob
from tokcap_spec.errors import InvalidEntryError
from tokcap_spec.records import TokenEntry, refusing_invalid

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "first_sink" / "mysink.py"


def refusal_of_a_null_log_prob() -> ValidationError:
    try:
        TokenEntry.model_validate(
            {
                "rollout_id": "r",
                "model_call_id": "c",
                "generation_token_ids": [1, 2],
                "generation_log_probs": [-0.5, None],
            }
        )
    except ValidationError as exc:
        return exc
    raise AssertionError("a None log prob was accepted")


def test_pydantic_refusing_a_null_log_prob_names_inf() -> None:
    """Pydantic's error on a log prob that is None is named as -inf encoded as null."""
    assert null_log_prob(refusal_of_a_null_log_prob()) == NULL_LOG_PROB
    assert "-inf" in NULL_LOG_PROB
    assert "to_json_bytes()" in NULL_LOG_PROB


def test_the_cause_of_a_wrapped_error_counts() -> None:
    """A store's own error raised from pydantic's is named the same way."""
    with (
        pytest.raises(InvalidEntryError) as raised,
        refusing_invalid({"rollout_id": "r", "model_call_id": "c"}),
    ):
        raise refusal_of_a_null_log_prob()
    assert null_log_prob(raised.value) == NULL_LOG_PROB


def test_other_validation_errors_get_no_log_prob_hint() -> None:
    """A NaN log prob or a bad token id is not mistaken for a nulled -inf."""
    for fields in (
        {"generation_token_ids": [1], "generation_log_probs": [math.nan]},
        {"generation_token_ids": [-1], "generation_log_probs": [0.0]},
        {"generation_token_ids": [1], "generation_log_probs": ["x"]},
    ):
        with pytest.raises(ValidationError) as raised:
            TokenEntry.model_validate({"rollout_id": "r", "model_call_id": "c", **fields})
        assert null_log_prob(raised.value) == ""


def test_a_store_that_nulls_inf_fails_put_2_naming_the_cause(pytester: pytest.Pytester) -> None:
    """A store writing model_dump_json fails PUT-2 with a hint naming -inf and the fix."""
    source = EXAMPLE.read_text()
    lossy = source.replace(
        "payload = entry.checked_json_bytes()",
        "payload = entry.checked_json_bytes() and entry.model_dump_json().encode()",
    )
    assert lossy != source
    pytester.makepyfile(mysink=lossy)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--tokcap-sink=mysink:SqliteSink",
        '--tokcap-sink-kwargs={"root": "{tmp_path}"}',
        "-k",
        "PUT-2",
        "--tokcap-report=r.json",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    failure = json.loads((pytester.path / "r.json").read_text())["clauses"]["PUT-2"]
    assert failure["outcome"] == "failed"
    assert f"hint:     {NULL_LOG_PROB}" in failure["message"]
