"""Sink targets for the BUILD-2 tests; tests import a fresh copy under a unique module name."""

from __future__ import annotations

from typing import Any

NOT_CALLABLE = 3


class GoodSink:
    """A conforming sink that remembers its kwargs."""

    def __init__(self, url: str = "", token: str = "") -> None:
        self.url = url
        self.token = token

    async def put(self, entry: Any) -> None:
        pass

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        pass

    async def close(self) -> None:
        pass


class EchoingSink(GoodSink):
    """A sink whose constructor puts the value it was given into its error message."""

    def __init__(self, url: str = "", token: str = "") -> None:
        raise ValueError(f"cannot connect to {url} with token {token!r}")


class SyncPutSink(GoodSink):
    """A sink whose put is a plain function."""

    def put(self, entry: Any) -> None:  # type: ignore[override]
        pass


class NoMarkSink:
    """A sink that lacks mark_incomplete."""

    def __init__(self, url: str = "", token: str = "") -> None:
        pass

    async def put(self, entry: Any) -> None:
        pass

    async def close(self) -> None:
        pass


class Outer:
    """Holds a nested sink class, reachable as ``Outer.Inner``."""

    class Inner(GoodSink):
        pass


def make_sink(**kwargs: str) -> GoodSink:
    """A factory function in a class's place."""
    return GoodSink(**kwargs)
