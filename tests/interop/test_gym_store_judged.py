"""The kit, run as a framework author runs it, on NeMo Gym 0.7.0's own ``TokenCaptureStore``.

Judged on Gym's own record class, the released store breaks three promises and keeps every
other one the kit checks: exact round trips (PUT-2: ``-inf`` comes back as ``null``), call
intents whose ids hold a newline (EXT-BEGIN-1: its intents file is line-split), and the retire
of ``version + 1`` after a freeze and a mark (DROP-2: a state no consumer ever saw). With
Gym's own file resolver, it keeps every LINEAGE promise.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

MUTANTS = Path(__file__).resolve().parents[1] / "mutants"
if str(MUTANTS) not in sys.path:
    sys.path.insert(0, str(MUTANTS))

from zoo import JudgedStore, KitRun, run_kit  # noqa: E402

GYM_STORE = "nemo_gym.token_id_capture.store:TokenCaptureStore"
GYM_ENTRY = "nemo_gym.token_id_capture.records:TokenEntry"
GYM_LINEAGE = "nemo_gym.token_id_capture.lineage:FileLineageStore"

BROKEN_BY_GYM = {"PUT-2", "EXT-BEGIN-1", "DROP-2"}
"""The clauses NeMo Gym 0.7.0's file store breaks."""

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("gym_pythonpath")]


def _messages(run: KitRun) -> str:
    shown = [
        f"{c}: {e['message'][:500]}" for c, e in run.clauses.items() if e["outcome"] != "passed"
    ]
    return "\n".join(shown) or run.problem or run.output[-2000:]


def test_gym_store_fails_exactly_its_three_bugs() -> None:
    """On Gym's record class, the ci profile fails PUT-2, EXT-BEGIN-1 and DROP-2, blocks nothing.

    Judged with Gym's own file resolver, the LINEAGE family passes: Gym resolves entries that
    tokcap's code stamped, for requests tokcap's code wrote.
    """
    flags = (f"--tokcap-entry-class={GYM_ENTRY}", f"--tokcap-lineage={GYM_LINEAGE}")
    run = run_kit(JudgedStore("GymTokenCaptureStore", GYM_STORE, flags))
    assert run.exit_code == 1, _messages(run)
    assert set(run.failed) == BROKEN_BY_GYM, _messages(run)
    assert run.blocked == (), _messages(run)
    outcomes = {
        entry["outcome"]
        for clause, entry in run.clauses.items()
        if clause not in BROKEN_BY_GYM and not clause.startswith("COST-")
    }
    assert outcomes <= {"passed", "skipped"}, _messages(run)
    costs = {
        entry["outcome"] for clause, entry in run.clauses.items() if clause.startswith("COST-")
    }
    assert costs == {"not-claimed"}, _messages(run)


def test_without_the_entry_class_the_failure_names_the_flag() -> None:
    """Judged on tokcap's record class, the round-trip failure says which entry class to pass."""
    run = run_kit(JudgedStore("GymTokenCaptureStoreOwnRecords", GYM_STORE))
    assert run.exit_code == 1, _messages(run)
    assert run.failed == ("PUT-2",), _messages(run)
    suggestion = f"--tokcap-entry-class={GYM_ENTRY}"
    assert suggestion in run.clauses["PUT-2"]["message"]
    for clause in run.blocked:
        assert suggestion in run.clauses[clause]["message"], clause
