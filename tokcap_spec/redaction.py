"""Keeping sink kwargs out of messages.

Sink and source kwargs routinely carry credentials (a password in a URL, a token). Nothing
tokcap prints, logs or reports may contain them, even when a constructor echoes what it was
given in its own error text, or quotes only the password part of a URL it was given.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit

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
    the values of its query parameters. Each of these also in every encoded form a transport
    or a log may show it in: percent-decoded, percent-encoded, with ``+`` for a space either
    way, and, for a URL's user info, in base64 as an HTTP ``Authorization: Basic`` header
    carries it.
    """
    found: set[str] = set()
    for leaf in _leaf_values(kwargs):
        found.update((str(leaf), repr(leaf)))
        if isinstance(leaf, str):
            found.update(_url_secrets(leaf))
    found = {form for value in found for form in _encoded_forms(value)}
    return sorted((value for value in found if len(value) >= _SHORTEST), key=len, reverse=True)


def _encoded_forms(value: str) -> set[str]:
    """``value`` as it is, decoded and encoded the ways URLs and forms spell it."""
    forms = {value, unquote(value), unquote_plus(value)}
    for each in list(forms):
        # A lone surrogate has no UTF-8 form, so no URL can spell it: only its text counts.
        if each.encode("utf-8", "surrogatepass").decode("utf-8", "replace") != each:
            continue
        forms.update((quote(each, safe=""), quote(each), quote_plus(each), quote_plus(each, "/")))
    return forms


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
    except ValueError:
        return []
    # The query's values as written, not parsed: parsing decodes, and the written form leaks
    # just as well.
    found = [pair.partition("=")[2] for pair in parts.query.split("&")]
    if password:
        found.append(password)
        found += _basic_auth(user or "", password)
    elif user:
        found.append(user)
        found += _basic_auth(user, "")
    return found


def _basic_auth(user: str, password: str) -> list[str]:
    """The user info as base64, in the forms an ``Authorization: Basic`` header may take."""
    found = []
    for name in {user, unquote(user)}:
        for secret in {password, unquote(password)}:
            for text in {f"{name}:{secret}", secret} - {""}:
                for encode in (base64.b64encode, base64.urlsafe_b64encode):
                    encoded = encode(text.encode()).decode()
                    found += [encoded, encoded.rstrip("=")]
    return found


def _leaf_values(data: Any) -> list[Any]:
    if isinstance(data, Mapping):
        return [leaf for value in data.values() for leaf in _leaf_values(value)]
    if isinstance(data, (list, tuple)):
        return [leaf for value in data for leaf in _leaf_values(value)]
    if data is None or isinstance(data, bool):
        return []
    return [data]
