"""Keeping sink kwargs out of messages.

Sink and source kwargs routinely carry credentials (a password in a URL, a token). Nothing
tokcap prints, logs or reports may contain them, even when a constructor echoes what it was
given in its own error text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["REDACTED", "redact"]

REDACTED = "***"


def redact(text: str, kwargs: Mapping[str, Any]) -> str:
    """Return ``text`` with every kwarg value of three or more characters replaced by ``***``.

    Values nested in lists and mappings count, and so do their ``repr`` forms.
    """
    for value in sorted(_leaf_values(kwargs), key=len, reverse=True):
        if len(value) >= 3:
            text = text.replace(value, REDACTED)
    return text


def _leaf_values(data: Any) -> list[str]:
    if isinstance(data, Mapping):
        return [leaf for value in data.values() for leaf in _leaf_values(value)]
    if isinstance(data, (list, tuple)):
        return [leaf for value in data for leaf in _leaf_values(value)]
    if data is None or isinstance(data, bool):
        return []
    return [str(data), repr(data)]
