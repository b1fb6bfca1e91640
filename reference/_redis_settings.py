"""What a Redis server's settings make of an acknowledged write.

:func:`judge` reads ``maxmemory-policy``, ``appendonly``, ``appendfsync`` and ``save`` of every
node: a policy that evicts keys without a time to live (``allkeys-*``) deletes captured entries
silently and is refused unless the caller opted in; persistence weaker than an fsynced
append-only file is accepted and named, so the store can warn once and report it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["DURABILITY", "SETTINGS", "ServerFindings", "judge"]

SETTINGS: Final = ("maxmemory-policy", "appendonly", "appendfsync", "save")
"""The server settings the verdict is drawn from."""

DURABILITY: Final = {
    "aof-always": "every acknowledged write is fsynced to the append-only file first",
    "aof-everysec": "about the last second of acknowledged writes is lost on a machine crash",
    "aof-no": "the operating system decides when acknowledged writes reach the disk",
    "rdb-only": "acknowledged writes since the last RDB snapshot are lost on a restart",
    "none": "a restart loses every acknowledged write",
    "unknown": "the server refused CONFIG GET, so how durable a write is cannot be read",
}
"""Each durability level, weakest last but ``unknown``, and what it costs."""

_RANK: Final = ("unknown", "none", "rdb-only", "aof-no", "aof-everysec", "aof-always")


@dataclass(frozen=True)
class ServerFindings:
    """The weakest durability among the nodes, and the nodes whose policy evicts our keys."""

    durability: str
    evicting: tuple[tuple[str, str], ...]


def _durability(values: dict[str, str]) -> str:
    if values.get("appendonly") == "yes":
        level = f"aof-{values.get('appendfsync', '')}"
        return level if level in DURABILITY else "unknown"
    return "rdb-only" if values.get("save", "").strip() else "none"


def judge(per_node: dict[str, dict[str, str]] | None) -> ServerFindings:
    """Return the verdict on every node's settings; ``None`` means they could not be read."""
    if not per_node:
        return ServerFindings("unknown", ())
    levels = [_durability(values) for values in per_node.values()]
    evicting = tuple(
        (node, values["maxmemory-policy"])
        for node, values in sorted(per_node.items())
        if values.get("maxmemory-policy", "").startswith("allkeys-")
    )
    return ServerFindings(min(levels, key=_RANK.index), evicting)
