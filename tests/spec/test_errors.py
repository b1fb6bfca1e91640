"""Tests of tokcap_spec.errors: what each error can be caught as."""

from __future__ import annotations

import pytest

from tokcap_spec import errors
from tokcap_spec.errors import (
    EndpointError,
    InvalidRolloutIdError,
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
