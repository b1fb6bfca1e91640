"""Tests of tokcap_spec.staging.keys: distinct pairs of ids get distinct staging keys."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokcap_spec.staging import distinct_staging_key, split_staging_key, staging_key

ids = st.text(st.sampled_from("ab/%2F5"), min_size=1, max_size=8) | st.text(min_size=1)
"""Ids dense in ``/``, ``%`` and the characters of their escapes, and any text."""

plain_ids = st.text(st.characters(exclude_characters="/%"), min_size=1)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(ids, ids, ids, ids)
def test_distinct_pairs_get_distinct_keys(a: str, b: str, c: str, d: str) -> None:
    assert (distinct_staging_key(a, b) == distinct_staging_key(c, d)) == ((a, b) == (c, d))


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(ids, ids)
def test_a_key_splits_back_into_its_ids(rollout_id: str, model_call_id: str) -> None:
    """The key determines the pair, so no two pairs can share it."""
    assert split_staging_key(distinct_staging_key(rollout_id, model_call_id)) == (
        rollout_id,
        model_call_id,
    )


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(plain_ids, plain_ids)
def test_ids_without_slash_or_percent_keep_the_default_key(a: str, b: str) -> None:
    assert distinct_staging_key(a, b) == staging_key(a, b)


def test_the_pairs_the_default_key_confuses_are_kept_apart() -> None:
    assert staging_key("a/b", "c") == staging_key("a", "b/c")
    assert distinct_staging_key("a/b", "c") == "a%2Fb/c"
    assert distinct_staging_key("a", "b/c") == "a/b%2Fc"
    assert distinct_staging_key("a%2Fb", "c") == "a%252Fb/c"


@pytest.mark.parametrize(("rollout_id", "model_call_id"), [("", "c"), ("r", ""), ("", "")])
def test_an_empty_id_is_refused(rollout_id: str, model_call_id: str) -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        distinct_staging_key(rollout_id, model_call_id)


def test_an_id_that_is_not_text_is_refused() -> None:
    with pytest.raises(TypeError, match="model_call_id must be a str"):
        distinct_staging_key("r", 7)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["abc", "/c", "r/", "a/b/c", "a%2/c", "a%2f/c", "%/c"])
def test_split_refuses_what_no_pair_makes(key: str) -> None:
    with pytest.raises(ValueError, match=r"staging key|'%'"):
        split_staging_key(key)
