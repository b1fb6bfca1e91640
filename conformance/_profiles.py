"""How much work the concurrency and model-based checks do under each ``--tokcap-profile``.

``quick`` is for a first look, ``ci`` (the default) keeps the whole kit under a minute and a
half on a two-core machine, ``thorough`` is for a release. Every figure is a budget, not a
promise about what the target does.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Budget", "budget"]


@dataclass(frozen=True)
class Budget:
    """The work one profile buys."""

    writers: int
    """Spawned processes that put and mark concurrently."""
    freezers: int
    """Spawned processes that freeze and drop while the writers write."""
    rounds: int
    """Rollouts written, frozen and dropped one after another under concurrent writes."""
    puts_per_round: int
    """Puts each writer makes into each round's rollout."""
    shared_puts: int
    """Puts each writer makes into the one rollout every writer shares."""
    examples: int
    """Programs the model-based check runs."""
    steps: int
    """Operations per model-based program."""
    search: int
    """Model steps the history checker may take per rollout before saying unknown."""
    reopens: int
    """Times one model-based program may close and rebuild its sink and source."""
    fresh_stores: int
    """Brand-new stores that spawned workers race to set up at one moment."""


_BUDGETS = {
    "quick": Budget(2, 1, 8, 2, 8, 8, 15, 50_000, 1, 1),
    "ci": Budget(3, 1, 30, 3, 12, 40, 40, 200_000, 1, 3),
    "thorough": Budget(4, 2, 120, 4, 40, 200, 60, 2_000_000, 3, 6),
}


def budget(profile: str) -> Budget:
    """Return the budget of ``profile`` (``quick``, ``ci`` or ``thorough``)."""
    return _BUDGETS[profile]
