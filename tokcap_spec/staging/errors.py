"""The errors a staging source raises when it cannot return what was asked for.

Both are ``KeyError`` or ``ValueError`` as well, so code that catches the built-in exception
catches them too.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["StagedCallCorruptError", "StagedCallMissingError"]


class StagedCallMissingError(KeyError):
    """No staged call is stored under one or more of the keys asked for.

    ``keys`` holds every missing key, each once, in the order first asked for.
    """

    def __init__(self, keys: Iterable[str]) -> None:
        self.keys: tuple[str, ...] = tuple(dict.fromkeys(keys))
        super().__init__(f"no staged call under {len(self.keys)} key(s): {list(self.keys)!r}")

    def __str__(self) -> str:
        # KeyError would print the message as a repr, quotes and all.
        return str(self.args[0])


class StagedCallCorruptError(ValueError):
    """What is stored under a key is not a valid staged call: it was damaged after staging.

    ``key`` names the key; the message says what is wrong.
    """

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        super().__init__(f"the staged call under {key!r} is unreadable: {reason}")
