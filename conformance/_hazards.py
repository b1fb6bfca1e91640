"""A grammar of the ids and values transports confuse, drawn from rather than listed.

Stores meet trouble in combinations: a rollout id and a call id that, joined, spell another
pair's join; a mapping equal to another but built in another order; text holding a character
that some line reader takes for a line break. Each production here makes every instance of one
such class from a base the check supplies, so a check reaches the whole class in every run,
and :func:`join_recipes` draws further combinations with Hypothesis under the run's seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = [
    "CALL_SEPARATORS",
    "LINE_BREAKS",
    "ROLLOUT_SEPARATORS",
    "JoinRecipe",
    "chained_pairs",
    "folded_twins",
    "join_recipes",
    "joined_pairs",
    "line_break_text",
    "reordered",
]

ROLLOUT_SEPARATORS = (".", "-", "_", "")
"""What a key scheme may put between a rollout id and a call id that can also stand inside a
rollout id (``""``: the two simply concatenated)."""
CALL_SEPARATORS = (".", "/", ":", "-", "_", "%", "\\", " ", "|", "#")
"""Separators a key scheme joins with, any of which a call id may hold."""
LINE_BREAKS = ("\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
"""Every string ``str.splitlines`` breaks at: a JSON writer escapes the first ones, while
U+0085, U+2028 and U+2029 stay raw unless it writes ASCII only."""


def joined_pairs(base: str) -> Iterator[tuple[str, str]]:
    """Yield ``(rollout, call)`` pairs, each of whose joins spells another pair's.

    For every separator ``s`` a rollout id can hold: ``base`` with call ``a{s}x`` and
    ``base{s}a`` with call ``x`` (both joined ``base{s}a{s}x``), and ``base{s}a`` with call
    ``x{s}y`` against ``base`` with call ``a{s}x{s}y``. Rollout ids are distinct across pairs.
    """
    for separator in ROLLOUT_SEPARATORS:
        word = "q" if separator == "" else "a"
        extended = f"{base}{separator}{word}"
        yield base, f"{word}{separator}x"
        yield extended, "x"
        yield extended, f"x{separator}y"
        yield base, f"{word}{separator}x{separator}y"


JoinRecipe = tuple[str, tuple[str, ...], str]
"""How :func:`chained_pairs` builds pairs: the rollout separator, the words each rollout id
extends the last by, and the separator the call ids join words with."""


def join_recipes() -> SearchStrategy[JoinRecipe]:
    """Recipes for :func:`chained_pairs`, drawn by Hypothesis (imported only here, so that
    what spawned workers import of the grammar stays light)."""
    from hypothesis import strategies as st

    return st.tuples(
        st.sampled_from(ROLLOUT_SEPARATORS[:-1]),
        st.lists(st.text("abcXYZ019", min_size=1, max_size=3), min_size=1, max_size=3).map(tuple),
        st.sampled_from(CALL_SEPARATORS),
    )


def chained_pairs(base: str, recipe: JoinRecipe) -> list[tuple[str, str]]:
    """A chain of rollout ids, each extending the last by one word, and call ids that complete
    each into the same join: ``base`` with ``w1.w2.z``, ``base.w1`` with ``w2.z``,
    ``base.w1.w2`` with ``z`` (when both separators are ``.``). Each pair has its own rollout."""
    separator, words, call_separator = recipe
    pairs = []
    rollout = base
    for index, word in enumerate(words):
        pairs.append((rollout, call_separator.join([*words[index:], "z"])))
        rollout = f"{rollout}{separator}{word}"
    pairs.append((rollout, "z"))
    return pairs


def folded_twins(base: str) -> Iterator[tuple[str, str]]:
    """Yield pairs of distinct ids that one folding or another makes equal: case, padding,
    composed against decomposed accents, a compatibility character, a tab against a space,
    one separator against another."""
    yield f"{base}-A", f"{base}-a"
    yield base, f"{base} "
    yield f" {base}", base
    yield f"{base}-\u00e9", f"{base}-e\u0301"
    yield f"{base}-\ufb01", f"{base}-fi"
    yield f"{base}\tx", f"{base} x"
    yield f"{base}/x", f"{base}_x"


def reordered(value: Any) -> Any:
    """``value`` rebuilt with every mapping's keys in reverse order: equal, built differently."""
    if isinstance(value, dict):
        return {key: reordered(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [reordered(each) for each in value]
    return value


def line_break_text(prefix: str = "line") -> str:
    """Text holding every line break ``str.splitlines`` knows, each between two words."""
    return prefix + "".join(f"{brk}{prefix}{number}" for number, brk in enumerate(LINE_BREAKS))
