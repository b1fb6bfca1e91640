"""reference._redis_url: showing a Redis URL without the secrets it carries."""

from __future__ import annotations

import pytest

from reference._redis_url import ShownUrl


class TestParse:
    @pytest.mark.parametrize(
        ("url", "shown"),
        [
            ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
            ("redis://:pw-one@h:1/2", "redis://:***@h:1/2"),
            ("rediss://alice:pw-two@h/0", "rediss://alice:***@h/0"),
            ("redis://alice@h/0", "redis://alice@h/0"),
            ("redis://h/0?password=pw-three&db=1", "redis://h/0?password=***&db=***"),
            ("unix:///run/redis.sock?password=pw-four", "unix:///run/redis.sock?password=***"),
        ],
    )
    def test_shows_the_server_but_hides_secrets(self, url: str, shown: str) -> None:
        """The displayed form keeps scheme, user, host, port and path, never a secret."""
        assert ShownUrl.parse(url).text == shown

    def test_refuses_another_scheme_without_echoing_the_url(self) -> None:
        """A URL of another scheme is refused naming the scheme only."""
        with pytest.raises(ValueError, match="got scheme 'https'") as caught:
            ShownUrl.parse("https://user:hidden-pw@h/")
        assert "hidden-pw" not in str(caught.value)

    def test_refuses_a_bad_port_without_echoing_the_url(self) -> None:
        """A port out of range is refused without repeating the URL."""
        with pytest.raises(ValueError, match="port number in 0-65535") as caught:
            ShownUrl.parse("redis://:hidden-pw@h:99999/0")
        assert "hidden-pw" not in str(caught.value)

    def test_refuses_what_is_not_a_string(self) -> None:
        """A URL that is not a str is refused, naming the type seen."""
        with pytest.raises(TypeError, match="got bytes"):
            ShownUrl.parse(b"redis://h/0")


class TestScrub:
    def test_removes_every_secret_from_other_text(self) -> None:
        """Passwords from user info and query are replaced by *** wherever they appear."""
        url = ShownUrl.parse("redis://:pw-one@h:1/0?password=pw-one-longer")
        text = "auth pw-one-longer failed, then pw-one failed"
        assert url.scrub(text) == "auth *** failed, then *** failed"

    def test_leaves_plain_options_and_short_values_alone(self) -> None:
        """Non-secret query values and values under three characters are not scrubbed."""
        url = ShownUrl.parse("redis://:pw@h:1/0?db=1&socket_timeout=2.5")
        assert url.scrub("Error 111 at h:1 after 2.5 s, pw") == "Error 111 at h:1 after 2.5 s, pw"

    def test_leaves_text_alone_without_secrets(self) -> None:
        """A URL without secrets changes nothing."""
        assert ShownUrl.parse("redis://h:1/0").scrub("Error 111 at h:1") == "Error 111 at h:1"
