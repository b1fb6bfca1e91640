"""Tests of tokcap_spec.ids: rollout ids and the routes that carry them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokcap_spec.errors import InvalidRolloutIdError
from tokcap_spec.ids import (
    ROLLOUT_ID_PATTERN,
    is_valid_rollout_id,
    rollout_id_from_path,
    rollout_route,
    training_capture_route,
    validate_call_id,
    validate_rollout_id,
    validate_rollout_ids,
)

valid_ids = st.from_regex(ROLLOUT_ID_PATTERN, fullmatch=True)
INVALID_IDS = ["", ".", "..", "-a", "_a", ".hidden", "a/b", "a\\b", "a b", "a\n", "é", "a" * 201]


class TestIsValidRolloutId:
    @given(valid_ids)
    def test_pattern_ids_are_valid(self, rollout_id: str) -> None:
        """Every id matching the documented pattern is valid."""
        assert is_valid_rollout_id(rollout_id)

    @pytest.mark.parametrize("rollout_id", INVALID_IDS)
    def test_unsafe_ids_are_invalid(self, rollout_id: str) -> None:
        """Empty, dot-led, separator-bearing, non-ASCII and over-long ids are invalid."""
        assert not is_valid_rollout_id(rollout_id)

    def test_longest_id_is_valid(self) -> None:
        """An id of exactly 200 characters is valid."""
        assert is_valid_rollout_id("a" * 200)

    @pytest.mark.parametrize("rollout_id", [None, 7, b"abc"])
    def test_non_strings_are_invalid(self, rollout_id: object) -> None:
        """A value that is not a str is never a valid id."""
        assert not is_valid_rollout_id(rollout_id)


class TestValidateRolloutId:
    @given(valid_ids)
    def test_valid_id_is_returned_unchanged(self, rollout_id: str) -> None:
        """A valid id comes back as it was given."""
        assert validate_rollout_id(rollout_id) == rollout_id

    @pytest.mark.parametrize(
        ("rollout_id", "reason"),
        [
            (7, "must be a str, got int"),
            ("", "must not be empty"),
            ("a" * 201, "at most 200 characters, got 201"),
            ("a/b", "may hold only letters, digits"),
            ("-a", "must start with a letter or digit"),
        ],
    )
    def test_invalid_id_is_refused_saying_why(self, rollout_id: object, reason: str) -> None:
        """An invalid id raises InvalidRolloutIdError naming the id and the rule it breaks."""
        with pytest.raises(InvalidRolloutIdError, match=reason) as caught:
            validate_rollout_id(rollout_id)
        assert repr(rollout_id)[:20] in str(caught.value)

    def test_error_is_a_value_error(self) -> None:
        """Code catching ValueError also catches an invalid id."""
        with pytest.raises(ValueError, match="invalid rollout id"):
            validate_rollout_id("../etc")

    def test_long_id_is_shown_shortened(self) -> None:
        """The message shows at most 80 characters of a long id."""
        with pytest.raises(InvalidRolloutIdError) as caught:
            validate_rollout_id("b" * 500)
        assert "b" * 81 not in str(caught.value)


class TestRoutes:
    def test_rollout_route_has_the_evaluation_prefix(self) -> None:
        """Evaluation capture lives under /ng-rollout/<id>/."""
        assert rollout_route("r-1") == "/ng-rollout/r-1/"
        assert rollout_route("r-1", "/requests/3") == "/ng-rollout/r-1/requests/3"

    def test_training_route_has_the_training_segment(self) -> None:
        """Training capture lives under /ng-rollout/<id>/training-token-capture/."""
        assert training_capture_route("r-1") == "/ng-rollout/r-1/training-token-capture/"
        assert training_capture_route("r-1", "/put") == "/ng-rollout/r-1/training-token-capture/put"

    @pytest.mark.parametrize("route", [rollout_route, training_capture_route])
    def test_routes_refuse_invalid_ids(self, route: Callable[[str], str]) -> None:
        """No route is built for an id that could escape its segment."""
        with pytest.raises(InvalidRolloutIdError):
            route("../x")

    @given(valid_ids, st.sampled_from(["", "x", "training-token-capture/put"]))
    def test_id_is_read_back_from_both_routes(self, rollout_id: str, rest: str) -> None:
        """rollout_id_from_path reads the id back from every route built for it."""
        assert rollout_id_from_path(rollout_route(rollout_id, rest)) == rollout_id
        assert rollout_id_from_path(training_capture_route(rollout_id, rest)) == rollout_id

    @pytest.mark.parametrize(
        "path", ["/other/r1/", "/ng-rollout/", "/ng-rollout/../x", "ng-rollout/r1/"]
    )
    def test_paths_without_a_valid_id_read_as_none(self, path: str) -> None:
        """A path outside /ng-rollout/ or with an invalid id segment carries no id."""
        assert rollout_id_from_path(path) is None

    def test_id_alone_after_the_prefix_is_read(self) -> None:
        """A path that ends right after the id still carries it."""
        assert rollout_id_from_path("/ng-rollout/r1") == "r1"


class TestValidateCallId:
    def test_any_non_empty_string_comes_back_unchanged(self) -> None:
        """Call ids are never normalized: look-alikes stay distinct (PUT-6)."""
        odd = ["a/b", "a_b", "A", "a", "e\u0301", "\u00e9", "x ", "multi\nline"]
        assert [validate_call_id(call) for call in odd] == odd

    def test_empty_is_refused_unless_allowed(self) -> None:
        """An empty call id is refused, except where the caller allows it (MASK-6)."""
        with pytest.raises(ValueError, match="non-empty"):
            validate_call_id("")
        assert validate_call_id("", allow_empty=True) == ""

    def test_non_strings_are_refused(self) -> None:
        """A call id that is not a str is refused with its type named."""
        with pytest.raises(TypeError, match="got int"):
            validate_call_id(7)


class TestValidateRolloutIds:
    def test_a_batch_comes_back_validated(self) -> None:
        """Every id of a batch is validated and returned as a list."""
        assert validate_rollout_ids(iter(["a", "b.c"])) == ["a", "b.c"]

    def test_a_lone_string_is_refused_not_iterated(self) -> None:
        """A single string is refused rather than retired character by character."""
        with pytest.raises(TypeError, match="wrap it in a list"):
            validate_rollout_ids("abc")

    def test_one_bad_id_refuses_the_batch(self) -> None:
        """A batch with one invalid id is refused as a whole."""
        with pytest.raises(InvalidRolloutIdError):
            validate_rollout_ids(["ok", ".."])
