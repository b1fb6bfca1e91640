"""Running a Hypothesis state machine as one of the kit's checks: seeded, bounded, replayable."""

from __future__ import annotations

import hypothesis
from hypothesis import HealthCheck, settings
from hypothesis.errors import FlakyFailure
from hypothesis.stateful import RuleBasedStateMachine, get_state_machine_test

from conformance._kit import Kit
from conformance._violation import ClauseViolation

__all__ = ["run_programs"]


def run_programs(
    kit: Kit, machine: type[RuleBasedStateMachine], *, examples: int, steps: int
) -> None:
    """Run ``examples`` programs of at most ``steps`` steps under the run's seed.

    A program that breaks a clause raises its :class:`ClauseViolation`, also when its failure
    does not replay (a race, a lag): the store still broke the clause.
    """
    test = get_state_machine_test(  # type: ignore[no-untyped-call]
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            print_blob=False,
        ),
    )
    try:
        hypothesis.seed(kit.settings.seed)(test)()
    except FlakyFailure as flaky:
        found = [error for error in flaky.exceptions if isinstance(error, ClauseViolation)]
        if not found:
            raise
        raise found[0] from None
