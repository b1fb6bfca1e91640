"""The secrets of this process's run, kept out of everything the kit prints or writes.

The plugin, every spawned worker and every recorded lane declare the kwargs they were given
with :func:`keep`; :func:`scrub` then masks them in any text: event errors, timelines,
reports, terminal output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokcap_spec.redaction import Redactor, secret_values

__all__ = ["keep", "scrub"]

_redactor = Redactor(())


def keep(kwargs: Mapping[str, Any]) -> None:
    """Add every secret of ``kwargs`` to what :func:`scrub` masks in this process."""
    global _redactor
    _redactor = Redactor([*_redactor.values, *secret_values(kwargs)])


def scrub(text: str) -> str:
    """Return ``text`` with every secret declared in this process masked."""
    return _redactor(text)
