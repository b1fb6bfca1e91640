"""The history checker on synthetic histories: each anomaly is named, legal histories pass."""

from __future__ import annotations

from typing import Any

from conformance._history.checker import check_history
from conformance._history.events import Event
from conformance._history.model import Rules

ANY = Rules()
STRICT = Rules(fence="strict")
P1 = ("snap-1", 1)
P2 = ("snap-2", 2)


def op(lane: str, index: int, kind: Any, start: int, end: int | None, **fields: Any) -> Event:
    fields.setdefault("outcome", "ok" if end is not None else "unknown")
    fields.setdefault("rollout_id", "r")
    return Event(lane=lane, index=index, kind=kind, invoke=start, complete=end, **fields)


def put(lane: str, index: int, start: int, end: int | None, call: str, **fields: Any) -> Event:
    fields.setdefault("digest", f"d-{call}")
    return op(lane, index, "put", start, end, call_id=call, **fields)


def freeze(
    lane: str,
    index: int,
    start: int,
    end: int,
    calls: list[str],
    pair: tuple[str, int],
    **more: Any,
) -> Event:
    more.setdefault("entries", tuple((call, f"d-{call}") for call in calls))
    return op(lane, index, "freeze", start, end, result=pair, **more)


def drop(
    lane: str, index: int, start: int, end: int, pair: tuple[str, int], returned: bool
) -> Event:
    return op(lane, index, "drop", start, end, pair=pair, returned=returned)


class TestLegalHistories:
    def test_sequential_put_freeze_drop_is_ok(self) -> None:
        """A put, a freeze that holds it and the exact drop form a legal history."""
        history = [
            put("w", 0, 0, 10, "a"),
            freeze("f", 0, 20, 30, ["a"], P1),
            drop("f", 1, 40, 50, P1, True),
        ]
        assert check_history(history, ANY).outcome == "ok"

    def test_put_concurrent_with_freeze_may_be_in_or_out(self) -> None:
        """A put overlapping a freeze may be in the snapshot or not, as long as it drops right."""
        inside = [put("w", 0, 0, 50, "a"), freeze("f", 0, 10, 40, ["a"], P1)]
        outside = [put("w", 0, 0, 50, "a"), freeze("f", 0, 10, 40, [], P1)]
        assert check_history(inside, ANY).outcome == "ok"
        assert check_history(outside, ANY).outcome == "ok"

    def test_relaxed_late_put_moves_the_version(self) -> None:
        """Under any fence, an acked late put with a new pair and a refused stale drop is legal."""
        history = [
            put("w", 0, 0, 10, "a"),
            freeze("f", 0, 20, 30, ["a"], P1),
            put("w", 1, 40, 50, "b"),
            drop("f", 1, 60, 70, P1, False),
            freeze("f", 2, 80, 90, ["a", "b"], P2),
        ]
        assert check_history(history, ANY).outcome == "ok"

    def test_a_conflict_absorbed_by_a_masked_rollout_may_keep_the_version(self) -> None:
        """An acked conflicting re-put that keeps the first payload of a rollout already
        incomplete changes nothing a freeze shows: the pair and its drop still stand."""
        history = [
            put("w", 0, 0, 10, "a"),
            put("w", 1, 20, 30, "a", digest="other"),
            freeze("f", 0, 40, 50, ["a"], P1, incomplete=True),
            put("w", 2, 60, 70, "a", digest="other"),
            freeze("f", 1, 80, 90, ["a"], P1, incomplete=True),
            drop("f", 2, 100, 110, P1, True),
        ]
        assert check_history(history, ANY).outcome == "ok"

    def test_unfinished_put_may_or_may_not_count(self) -> None:
        """A put that never completed may appear in a later snapshot or not."""
        for calls in (["a"], []):
            history = [put("w", 0, 0, None, "a"), freeze("f", 0, 20, 30, calls, P1)]
            assert check_history(history, ANY).outcome == "ok"

    def test_rollouts_are_judged_apart(self) -> None:
        """A put into one rollout is not expected in another rollout's snapshot."""
        history = [
            put("w", 0, 0, 10, "a", rollout_id="one"),
            freeze("f", 0, 20, 30, [], P1, rollout_id="two"),
        ]
        assert check_history(history, ANY).outcome == "ok"


class TestAnomalies:
    def test_lost_ack_before_freeze(self) -> None:
        """A put acked before a freeze began and missing from it is a lost ack, both ops shown."""
        history = [put("w", 0, 0, 10, "a"), freeze("f", 0, 20, 30, [], P1)]
        verdict = check_history(history, ANY)
        assert verdict.outcome == "illegal"
        assert verdict.names == ["lost-ack"]
        assert verdict.anomalies[0].witness == tuple(history)

    def test_lost_ack_behind_a_drop(self) -> None:
        """An acked put missing from a snapshot that still dropped is a lost ack."""
        history = [
            put("w", 0, 0, 10, "a"),
            freeze("f", 0, 15, 25, ["a"], P1),
            put("w", 1, 20, 40, "b"),
            drop("f", 1, 45, 55, P1, True),
        ]
        verdict = check_history(history, ANY)
        assert verdict.names == ["lost-ack"]
        assert verdict.anomalies[0].clause == "FREEZE-5"
        assert [e.kind for e in verdict.anomalies[0].witness] == ["put", "freeze", "drop"]

    def test_lost_mark_after_a_drop(self) -> None:
        """An acked mark racing a drop must show in the next freeze; if not, it is a lost ack."""
        history = [
            freeze("f", 0, 0, 10, [], P1),
            op("w", 0, "mark", 15, 40),
            drop("f", 1, 20, 30, P1, True),
            freeze("f", 2, 50, 60, [], P2),
        ]
        verdict = check_history(history, ANY)
        assert verdict.names == ["lost-ack"]
        assert verdict.anomalies[0].clause == "MASK-1"

    def test_phantom(self) -> None:
        """A snapshot holding a call nobody put is a phantom."""
        verdict = check_history([freeze("f", 0, 0, 10, ["ghost"], P1)], ANY)
        assert verdict.names == ["phantom"]

    def test_torn(self) -> None:
        """A snapshot holding bytes no put carried is torn."""
        history = [
            put("w", 0, 0, 10, "a"),
            freeze("f", 0, 20, 30, [], P1, entries=(("a", "half-written"),)),
        ]
        assert check_history(history, ANY).names == ["torn"]

    def test_duplicate(self) -> None:
        """A snapshot listing one call twice is a duplicate."""
        history = [put("w", 0, 0, 10, "a"), freeze("f", 0, 20, 30, ["a", "a"], P1)]
        assert check_history(history, ANY).names == ["duplicate"]

    def test_split_freeze(self) -> None:
        """Two freezes of one unchanged state that disagree on the pair are a split freeze."""
        history = [
            put("w", 0, 0, 10, "a"),
            freeze("f", 0, 20, 30, ["a"], P1),
            freeze("g", 0, 22, 32, ["a"], P2),
        ]
        verdict = check_history(history, ANY)
        assert verdict.names == ["split-freeze"]
        assert verdict.anomalies[0].clause == "FREEZE-2"

    def test_version_stuck_after_a_mark(self) -> None:
        """A clean snapshot that still drops after an acked mark is a stuck version."""
        history = [
            freeze("f", 0, 0, 10, [], P1),
            op("w", 0, "mark", 20, 30),
            drop("f", 1, 40, 50, P1, True),
        ]
        verdict = check_history(history, ANY)
        assert verdict.names == ["version-stuck"]
        assert verdict.anomalies[0].clause == "DROP-4"

    def test_version_stuck_after_a_conflict_on_a_clean_rollout(self) -> None:
        """A conflict acked after a clean freeze masks the rollout: the old pair must not drop."""
        history = [
            put("w", 0, 0, 10, "a"),
            freeze("f", 0, 20, 30, ["a"], P1),
            put("w", 1, 40, 50, "a", digest="other"),
            drop("f", 1, 60, 70, P1, True),
        ]
        assert check_history(history, ANY).names == ["version-stuck"]

    def test_version_stuck_across_states(self) -> None:
        """One pair naming two different states is a stuck version."""
        history = [
            freeze("f", 0, 0, 10, [], P1),
            op("w", 0, "mark", 20, 30),
            freeze("f", 1, 40, 50, [], P1, incomplete=True),
        ]
        assert check_history(history, ANY).names == ["version-stuck"]

    def test_refused_put_on_an_open_rollout(self) -> None:
        """A put that raises on a rollout nobody froze is refused, found by the search."""
        history = [put("w", 0, 0, 10, "a", outcome="fail", error="OSError: disk")]
        verdict = check_history(history, ANY)
        assert verdict.names == ["refused"]

    def test_strict_fence_refuses_a_late_ack(self) -> None:
        """Under a required strict fence, a new call acked after freeze is illegal."""
        history = [freeze("f", 0, 0, 10, [], P1), put("w", 0, 20, 30, "a")]
        assert check_history(history, ANY).outcome == "ok"
        verdict = check_history(history, STRICT)
        assert verdict.outcome == "illegal"
        assert verdict.anomalies[0].clause == "FENCE-1"


class TestBudget:
    def test_out_of_budget_is_unknown(self) -> None:
        """A search that runs out of budget says unknown, not ok."""
        history = [put("w", i, i * 10, i * 10 + 5, f"c{i}") for i in range(5)]
        history.append(freeze("f", 0, 100, 110, [f"c{i}" for i in range(5)], P1))
        assert check_history(history, ANY, budget=2).outcome == "unknown"
        assert check_history(history, ANY).outcome == "ok"
