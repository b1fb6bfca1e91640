"""Tests of tokcap_spec.redaction: kwarg values never reach a message."""

from __future__ import annotations

import base64

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tokcap_spec.redaction import REDACTED, redact


class TestRedact:
    def test_values_are_replaced(self) -> None:
        """Every kwarg value found in the text becomes ***."""
        text = redact("connect redis://u:pw1@h as bob", {"url": "redis://u:pw1@h", "user": "bob"})
        assert text == f"connect {REDACTED} as {REDACTED}"

    def test_nested_values_are_replaced(self) -> None:
        """Values inside lists and mappings count too."""
        kwargs = {"hosts": ["alpha", {"password": "s3cret"}]}
        assert redact("alpha s3cret", kwargs) == f"{REDACTED} {REDACTED}"

    def test_repr_forms_are_replaced(self) -> None:
        """A value shown by repr, quotes included, is replaced whole."""
        assert redact("got 'token'", {"t": "token"}) == f"got {REDACTED}"

    def test_numbers_are_replaced_as_text(self) -> None:
        """Non-string values are matched by their text."""
        assert redact("port 63790 refused", {"port": 63790}) == f"port {REDACTED} refused"

    def test_short_values_are_kept(self) -> None:
        """Values under three characters are too common to replace."""
        assert redact("db 42 on", {"db": "42", "flag": True, "none": None}) == "db 42 on"

    def test_longer_value_wins_over_its_substring(self) -> None:
        """A value containing another is replaced whole, not piecewise."""
        assert redact("key=abcdef", {"a": "abc", "b": "abcdef"}) == f"key={REDACTED}"

    @given(st.text(st.characters(exclude_characters="*"), min_size=3), st.text(), st.text())
    @example("00\ud800", "", "")  # a lone surrogate, which no URL encoding can spell
    def test_value_never_survives(self, secret: str, before: str, after: str) -> None:
        """Whatever surrounds it, a value of three or more characters (no '*') is gone."""
        assert secret not in redact(before + secret + after, {"k": secret})


class TestEncodedForms:
    URL = "redis://alice:p%40ss+w0rd@h:1/0?password=q%2Fz+y7&db=1"

    @pytest.mark.parametrize(
        "form",
        [
            "p%40ss+w0rd",  # the password as written
            "p@ss+w0rd",  # decoded
            "p%40ss%2Bw0rd",  # percent-encoded whole
            "q%2Fz+y7",  # the query value as written
            "q/z y7",  # decoded, + for a space
            "q/z+y7",  # percent-decoded only
            "q%2Fz%20y7",  # re-encoded with %20
            base64.b64encode(b"alice:p@ss+w0rd").decode(),  # Authorization: Basic
            base64.b64encode(b"alice:p%40ss+w0rd").decode().rstrip("="),
        ],
    )
    def test_every_encoded_form_of_a_url_secret_is_masked(self, form: str) -> None:
        """A URL's password and query values are masked however they are encoded."""
        assert redact(f"saw {form} here", {"url": self.URL}) == f"saw {REDACTED} here"

    def test_a_token_user_is_masked_in_base64(self) -> None:
        """A URL whose user is its token has the token masked in base64 too."""
        encoded = base64.b64encode(b"tok-4Lx9:").decode()
        assert redact(encoded, {"url": "https://tok-4Lx9@h/x"}) == REDACTED
