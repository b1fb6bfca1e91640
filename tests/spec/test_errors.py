"""Tests of tokcap_spec.errors: what each error can be caught as."""

from __future__ import annotations

import pytest

from tokcap_spec import errors
from tokcap_spec.errors import (
    ConflictingEntryError,
    EndpointError,
    InvalidRolloutIdError,
    RolloutFrozenError,
    RolloutRetiredError,
    StoreWriteError,
    TokenCaptureError,
)


class TestHierarchy:
    @pytest.mark.parametrize("name", errors.__all__)
    def test_every_error_is_a_token_capture_error(self, name: str) -> None:
        """Every exported error can be caught as TokenCaptureError."""
        error = getattr(errors, name)
        assert issubclass(error, TokenCaptureError)
        assert issubclass(error, Exception)

    @pytest.mark.parametrize(
        ("error", "builtin"),
        [(InvalidRolloutIdError, ValueError), (EndpointError, ValueError)],
    )
    def test_bad_input_errors_are_value_errors(
        self, error: type[Exception], builtin: type[Exception]
    ) -> None:
        """Errors about a bad id or a bad target are caught by except ValueError."""
        with pytest.raises(builtin, match="bad"):
            raise error("bad")

    def test_store_write_error_is_an_os_error(self) -> None:
        """A failed durable write keeps the OSError errno and is caught as OSError."""
        with pytest.raises(OSError, match="disk") as caught:
            raise StoreWriteError(28, "disk full")
        assert caught.value.errno == 28


class TestGymKinds:
    @pytest.mark.parametrize(
        ("error", "builtin"),
        [
            (ConflictingEntryError, ValueError),
            (RolloutFrozenError, RuntimeError),
            (RolloutRetiredError, RuntimeError),
        ],
    )
    def test_refusals_are_the_builtin_kinds_gym_raises(
        self, error: type[Exception], builtin: type[Exception]
    ) -> None:
        """A conflict is a ValueError, a write after freeze or retirement a RuntimeError."""
        with pytest.raises(builtin, match="refused"):
            raise error("refused")

    def test_a_frozen_rollout_names_the_rollout_and_the_call(self) -> None:
        """The frozen error caught as RuntimeError still names rollout and call id."""
        with pytest.raises(RuntimeError, match=r"'r-1'.*'call-7'"):
            raise RolloutFrozenError.for_call("r-1", "call-7")

    def test_a_retired_rollout_names_the_rollout(self) -> None:
        """The retired error caught as RuntimeError still names the rollout."""
        with pytest.raises(RuntimeError, match="'r-1' was already dropped"):
            raise RolloutRetiredError.for_rollout("r-1")
