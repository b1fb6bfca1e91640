"""The sequential model admits the contract's freedoms, and the model-based check uses it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from conformance._history.events import Event
from conformance._history.model import ModelRollout, Rules, init, step
from conformance._registry import checks_by_id
from conformance._runner import run_check
from conformance._settings import KitSettings
from conformance._violation import ClauseViolation

MUTANTS = Path(__file__).parents[1] / "mutants"
P1 = ("snap-1", 1)


def event(kind: Any, outcome: Any = "ok", **fields: Any) -> Event:
    return Event("t", 0, kind, "r", 0, 1, outcome, **fields)


def run(rules: Rules, *events: Event, state: ModelRollout | None = None) -> tuple[Any, ...]:
    """Step through ``events`` keeping every possible state; return (states, last refusal)."""
    states = (state or init(),)
    refusal = None
    for each in events:
        following: list[ModelRollout] = []
        for current in states:
            found, refusal = step(rules, current, each)
            following.extend(found)
        states = tuple(following)
    return states, refusal


FROZEN = (
    event("put", call_id="a", digest="da"),
    event("freeze", entries=(("a", "da"),), result=P1),
)


class TestRetireAndDelete:
    def test_retire_fences_for_good_and_again_is_a_no_op(self) -> None:
        """After retire (twice) a put must raise, and a freeze shows no records."""
        retired = (*FROZEN, event("retire"), event("retire"))
        states, _ = run(Rules(), *retired)
        assert states
        assert all(state.retired and not state.entries for state in states)
        _, refusal = run(Rules(), *retired, event("put", call_id="b", digest="db"))
        assert (refusal.clause, refusal.anomaly) == ("EXT-RETIRE-1", "lost-ack")
        shown = event("freeze", entries=(("a", "da"),), result=P1)
        _, refusal = run(Rules(), *retired, shown)
        assert (refusal.clause, refusal.anomaly) == ("EXT-RETIRE-1", "phantom")

    def test_retire_keeps_records_under_no_delete(self) -> None:
        shown = event("freeze", entries=(("a", "da"),), result=P1)
        states, _ = run(Rules(keeps_records=True), *FROZEN, event("retire"), shown)
        assert states

    def test_delete_starts_the_id_again_from_nothing(self) -> None:
        """After delete the id takes puts, marks and intents again, and freezes clean."""
        again = (
            *FROZEN,
            event("mark"),
            event("delete"),
            event("put", call_id="a", digest="d2"),
            event("freeze", entries=(("a", "d2"),), result=("snap-2", 1)),
        )
        states, refusal = run(Rules("strict"), *again)
        assert states, refusal

    @pytest.mark.parametrize(
        "after",
        [
            event("freeze", entries=(("a", "da"),), result=("snap-2", 1)),
            event("freeze", entries=(), incomplete=True, result=("snap-2", 1)),
            event("put", "fail", call_id="b", digest="db"),
            event("mark", "fail"),
            event("begin", "fail", call_id="c"),
        ],
        ids=["records-kept", "mark-kept", "put-refused", "mark-refused", "intent-refused"],
    )
    def test_what_delete_leaves_behind_is_ext_retire_1s(self, after: Event) -> None:
        marked = (*FROZEN, event("mark"), event("delete"), after)
        states, refusal = run(Rules("strict"), *marked)
        assert not states
        assert refusal.clause == "EXT-RETIRE-1"

    def test_a_raising_retire_is_ext_retire_1s(self) -> None:
        _, refusal = run(Rules(), event("retire", "fail"))
        assert refusal.clause == "EXT-RETIRE-1"

    def test_a_raising_delete_changes_nothing(self) -> None:
        states, _ = run(Rules(), *FROZEN, event("delete", "fail"))
        assert states
        assert all(state.entries == (("a", "da"),) for state in states)


class TestFences:
    @pytest.mark.parametrize("fence", ["any", "relaxed"])
    def test_relaxed_fence_accepts_a_late_put(self, fence: Any) -> None:
        """An acked new call after freeze is legal unless a strict fence is required."""
        states, _ = run(Rules(fence=fence), *FROZEN, event("put", call_id="b", digest="db"))
        assert states
        assert all(state.epoch > state.frozen_at for state in states if state.frozen_at)

    def test_strict_fence_refuses_a_late_ack(self) -> None:
        """Under a required strict fence an acked new call after freeze is refused (FENCE-1)."""
        states, refusal = run(Rules("strict"), *FROZEN, event("put", call_id="b", digest="db"))
        assert not states
        assert refusal.clause == "FENCE-1"

    @pytest.mark.parametrize("fence", ["any", "strict"])
    def test_strict_fence_may_raise(self, fence: Any) -> None:
        """A new call after freeze may raise unless a relaxed fence is required."""
        late = event("put", "fail", call_id="b", digest="db")
        assert run(Rules(fence=fence), *FROZEN, late)[0]
        assert not run(Rules("relaxed"), *FROZEN, late)[0]

    def test_late_put_voids_the_old_snapshot(self) -> None:
        """After an acked late put, dropping the earlier snapshot must return False."""
        late = event("put", call_id="b", digest="db")
        assert run(Rules(), *FROZEN, late, event("drop", pair=P1, returned=False))[0]
        states, refusal = run(Rules(), *FROZEN, late, event("drop", pair=P1, returned=True))
        assert not states
        assert refusal.anomaly == "version-stuck"


class TestConflicts:
    def test_acked_conflict_marks(self) -> None:
        """A conflicting re-put that is acked leaves the rollout incomplete, either payload kept."""
        states, _ = run(Rules(), FROZEN[0], event("put", call_id="a", digest="other"))
        assert {state.incomplete for state in states} == {True}
        assert {state.payload("a") for state in states} == {"da", "other"}

    def test_raised_conflict_may_mark(self) -> None:
        """A conflicting re-put that raised may or may not have marked the rollout."""
        states, _ = run(Rules(), FROZEN[0], event("put", "fail", call_id="a", digest="other"))
        assert {state.incomplete for state in states} == {True, False}

    def test_identical_re_put_keeps_the_entries(self) -> None:
        """An identical re-put changes no entry and no flag."""
        states, _ = run(Rules(), FROZEN[0], FROZEN[0])
        assert {(state.entries, state.incomplete) for state in states} == {((("a", "da"),), False)}


class TestDrops:
    def test_exact_drop_retires_and_fences(self) -> None:
        """The exact drop succeeds; afterwards a put must raise (FENCE-2)."""
        dropped = (*FROZEN, event("drop", pair=P1, returned=True))
        states, _ = run(Rules(), *dropped)
        assert states
        assert all(state.dropped and not state.entries for state in states)
        _, refusal = run(Rules(), *dropped, event("put", call_id="c", digest="dc"))
        assert refusal.clause == "FENCE-2"

    def test_exact_drop_refused_is_illegal(self) -> None:
        """Refusing the drop of the current snapshot breaks DROP-1."""
        _, refusal = run(Rules(), *FROZEN, event("drop", pair=P1, returned=False))
        assert refusal.clause == "DROP-1"

    def test_no_delete_keeps_the_records(self) -> None:
        """With no-delete a successful drop leaves the entries readable."""
        states, _ = run(Rules(keeps_records=True), *FROZEN, event("drop", pair=P1, returned=True))
        assert all(state.entries == (("a", "da"),) for state in states)

    def test_mark_after_drop_shows(self) -> None:
        """A mark acked after the drop must show in the next freeze (MASK-1)."""
        dropped = (*FROZEN, event("drop", pair=P1, returned=True), event("mark"))
        clean = event("freeze", result=("snap-9", 9))
        _, refusal = run(Rules(), *dropped, clean)
        assert refusal.anomaly == "lost-ack"
        assert run(Rules(), *dropped, event("freeze", incomplete=True, result=("snap-9", 9)))[0]


class TestModelBasedCheck:
    @pytest.fixture(autouse=True)
    def _mutants(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.syspath_prepend(str(MUTANTS))

    def settings(self, target: str, tmp_path: Path) -> KitSettings:
        return KitSettings(sink=target, sink_kwargs={"root": str(tmp_path)}, profile="ci")

    def test_passes_a_relaxed_store(self, tmp_path: Path) -> None:
        """Random programs against a correct relaxed-fence store raise nothing."""
        check = checks_by_id()["model-based"]
        run_check(self.settings("base:RelaxedFileStore", tmp_path), check)

    def violation(self, check_id: str, target: str, tmp_path: Path) -> ClauseViolation:
        """Run ``check_id`` against ``target``; return the violation it must raise."""
        with pytest.raises(ClauseViolation) as raised:
            run_check(self.settings(target, tmp_path), checks_by_id()[check_id])
        return raised.value

    @staticmethod
    def steps(violation: ClauseViolation) -> list[str]:
        """The operations of the program a violation prints, in order."""
        return re.findall(r"^ +\d+\. (\w+)\(", violation.observed, re.MULTILINE)

    def test_prints_the_shrunk_program(self, tmp_path: Path) -> None:
        """A version counted from entries fails MASK-3 with the short program that shows it."""
        found = self.violation("model-based", "zoo_concurrency:CountedVersion", tmp_path)
        assert found.clause == "MASK-3"
        steps = self.steps(found)
        assert "freeze" in steps
        assert "mark" in steps
        assert len(steps) <= 4

    def test_endings_pass_a_relaxed_store(self, tmp_path: Path) -> None:
        """Programs with retire and delete among their steps raise nothing on a correct store."""
        check = checks_by_id()["model-based-endings"]
        run_check(self.settings("base:RelaxedFileStore", tmp_path), check)

    @pytest.mark.parametrize(
        ("target", "operation"),
        [("zoo_ext:RetireWithoutFence", "retire"), ("zoo_ext:DeleteKeepsFence", "delete")],
    )
    def test_endings_find_what_retire_or_delete_leaves(
        self, tmp_path: Path, target: str, operation: str
    ) -> None:
        """A retire without fence, a delete keeping the fence: EXT-RETIRE-1, shown by a program
        that takes that step."""
        found = self.violation("model-based-endings", target, tmp_path)
        assert found.clause == "EXT-RETIRE-1"
        assert operation in self.steps(found)
