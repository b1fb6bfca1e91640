"""The hazard grammar makes what it promises: colliding joins, equal values built differently,
every line break a line reader splits at."""

from __future__ import annotations

from hypothesis import given

from conformance import _hazards as hazards
from tokcap_spec.ids import is_valid_rollout_id

BASE = "tk-run-check-Join-0001"


def _joins(pairs: list[tuple[str, str]], separator: str) -> dict[str, set[tuple[str, str]]]:
    joined: dict[str, set[tuple[str, str]]] = {}
    for rollout, call in pairs:
        joined.setdefault(f"{rollout}{separator}{call}", set()).add((rollout, call))
    return joined


class TestJoinedPairs:
    def test_every_separator_makes_pairs_that_join_alike(self) -> None:
        """For each separator a rollout id can hold, two pairs of different rollouts join to the
        same key."""
        pairs = list(hazards.joined_pairs(BASE))
        for separator in hazards.ROLLOUT_SEPARATORS:
            colliding = [
                group
                for group in _joins(pairs, separator).values()
                if len({rollout for rollout, _ in group}) > 1
            ]
            assert colliding, separator

    def test_every_rollout_id_is_valid_and_pairs_are_distinct(self) -> None:
        """The pairs are valid, distinct puts."""
        pairs = list(hazards.joined_pairs(BASE))
        assert len(set(pairs)) == len(pairs)
        assert all(is_valid_rollout_id(rollout) for rollout, _ in pairs)


class TestChainedPairs:
    @given(hazards.join_recipes())
    def test_a_chain_joins_to_one_key_when_both_separators_agree(
        self, recipe: hazards.JoinRecipe
    ) -> None:
        """Each pair has a rollout of its own; joined with the recipe's separator when it is the
        call separator too, every pair spells the same key."""
        pairs = hazards.chained_pairs(BASE, recipe)
        rollouts = [rollout for rollout, _ in pairs]
        assert len(set(rollouts)) == len(rollouts)
        assert all(is_valid_rollout_id(rollout) for rollout in rollouts)
        separator, _, call_separator = recipe
        if separator == call_separator:
            assert len(_joins(pairs, separator)) == 1


class TestReordered:
    def test_equal_but_every_mapping_in_another_order(self) -> None:
        """The value is equal, and each mapping lists its keys in reverse."""
        value = {"a": 1, "b": [{"x": 1, "y": 2}], "c": {"p": None, "q": "s"}}
        again = hazards.reordered(value)
        assert again == value
        assert list(again) == ["c", "b", "a"]
        assert list(again["b"][0]) == ["y", "x"]
        assert list(again["c"]) == ["q", "p"]


class TestLineBreakText:
    def test_splitlines_breaks_at_every_one(self) -> None:
        """A line reader splits the text at each break: one more line than breaks."""
        text = hazards.line_break_text()
        assert len(text.splitlines()) == len(hazards.LINE_BREAKS) + 1
        assert {"\u2028", "\u2029", "\x85"} <= set(text)


def _folds(call_id: str) -> set[str]:
    """What ``call_id`` becomes under each folding a key scheme or a de-duplicator applies."""
    import unicodedata

    return {
        call_id.casefold(),
        call_id.strip(),
        unicodedata.normalize("NFC", call_id),
        unicodedata.normalize("NFKC", call_id),
        " ".join(call_id.split()),
        call_id.replace("/", "_"),
    }


class TestFoldedTwins:
    def test_each_pair_is_distinct_and_one_folding_makes_it_one(self) -> None:
        pairs = list(hazards.folded_twins("twin"))
        assert len(pairs) >= 6
        for one, two in pairs:
            assert one != two
            assert _folds(one) & _folds(two), (one, two)

    def test_the_pairs_reach_case_padding_unicode_whitespace_and_separators(self) -> None:
        joined = "".join(one + two for one, two in hazards.folded_twins("twin"))
        for needle in ("A", " ", "\u00e9", "e\u0301", "\ufb01", "\t", "/", "_"):
            assert needle in joined, repr(needle)
