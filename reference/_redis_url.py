"""Showing a Redis URL without its credentials.

A Redis URL may carry a password in its user info (``redis://:pw@host``) or in its query
(``?password=pw``). :class:`ShownUrl` keeps the displayable form (every query value hidden)
and the secrets apart, so a message can name the server and be scrubbed of the password.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

__all__ = ["SCHEMES", "ShownUrl"]

SCHEMES = ("redis", "rediss", "unix")
_HIDDEN = "***"
_SECRET_KEY = re.compile("pass|secret|token|auth|key", re.IGNORECASE)
# Shorter values would scrub unrelated characters out of every message.
_SHORTEST_SECRET = 3


@dataclass(frozen=True)
class ShownUrl:
    """A Redis URL as it may appear in messages, plus the secrets to scrub from other text."""

    text: str
    secrets: tuple[str, ...]

    @classmethod
    def parse(cls, url: object) -> ShownUrl:
        """Return the redacted form of ``url``; raise if it is not a Redis URL.

        The error never repeats the URL, only its scheme.
        """
        if not isinstance(url, str):
            raise TypeError(f"url must be a str, got {type(url).__name__}")
        parts = urlsplit(url)
        if parts.scheme not in SCHEMES:
            raise ValueError(
                f"url must start with one of {', '.join(s + '://' for s in SCHEMES)}; "
                f"got scheme {parts.scheme[:20]!r}"
            )
        secrets = [parts.password or ""]
        netloc = parts.hostname or ""
        try:
            port = parts.port
        except ValueError:
            raise ValueError("url must have a port number in 0-65535, got another port") from None
        if port is not None:
            netloc = f"{netloc}:{port}"
        if parts.username or parts.password:
            user = parts.username or ""
            netloc = f"{user}:{_HIDDEN}@{netloc}" if parts.password else f"{user}@{netloc}"
        query = parse_qsl(parts.query, keep_blank_values=True)
        secrets.extend(value for key, value in query if _SECRET_KEY.search(key))
        shown_query = "&".join(f"{key}={_HIDDEN}" for key, _ in query)
        text = f"{parts.scheme}://{netloc}{parts.path}" + (f"?{shown_query}" if query else "")
        kept = {s for s in secrets if len(s) >= _SHORTEST_SECRET}
        return cls(text, tuple(sorted(kept, key=len, reverse=True)))

    def scrub(self, text: str) -> str:
        """Return ``text`` with every secret of the URL replaced by ``***``."""
        for secret in self.secrets:
            text = text.replace(secret, _HIDDEN)
        return text

    def __str__(self) -> str:
        return self.text
