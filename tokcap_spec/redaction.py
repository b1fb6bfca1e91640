"""Keeping sink kwargs out of messages.

Sink and source kwargs routinely carry credentials (a password in a URL, a token). Nothing
tokcap prints, logs or reports may contain them, even when a constructor echoes what it was
given in its own error text, or quotes only the password part of a URL it was given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["REDACTED", "Redactor", "redact", "secret_values"]

REDACTED = "***"
_SHORTEST = 3
"""Shorter values are not masked: replacing every ``1`` or ``on`` would garble every message."""


def redact(text: str, kwargs: Mapping[str, Any]) -> str:
    """Return ``text`` with every secret of ``kwargs`` (see :func:`secret_values`) as ``***``."""
    return Redactor(secret_values(kwargs))(text)


def secret_values(kwargs: Mapping[str, Any]) -> list[str]:
    """Every string a message must not contain, longest first.

    Each leaf value (nested in lists and mappings too) in its ``str`` and ``repr`` forms, and,
    for a value that is a URL, its password, its user where it has no password (a token), and
    the values of its query parameters, each also percent-decoded.
    """
    found: set[str] = set()
    for leaf in _leaf_values(kwargs):
        found.update((str(leaf), repr(leaf)))
        if isinstance(leaf, str):
            found.update(_url_secrets(leaf))
    return sorted((value for value in found if len(value) >= _SHORTEST), key=len, reverse=True)


class Redactor:
    """Masks a fixed set of secret strings in any text given to it."""

    def __init__(self, values: Iterable[str]) -> None:
        self.values = sorted(
            {value for value in values if len(value) >= _SHORTEST}, key=len, reverse=True
        )

    def __call__(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, REDACTED)
        return text


def _url_secrets(value: str) -> list[str]:
    if "://" not in value:
        return []
    try:
        parts = urlsplit(value.strip())
        password, user = parts.password, parts.username
        query = parse_qsl(parts.query)
    except ValueError:
        return []
    found = [each for _, each in query]
    if password:
        found.append(password)
    elif user:
        found.append(user)
    return [form for each in found for form in {each, unquote(each)}]


def _leaf_values(data: Any) -> list[Any]:
    if isinstance(data, Mapping):
        return [leaf for value in data.values() for leaf in _leaf_values(value)]
    if isinstance(data, (list, tuple)):
        return [leaf for value in data for leaf in _leaf_values(value)]
    if data is None or isinstance(data, bool):
        return []
    return [data]
