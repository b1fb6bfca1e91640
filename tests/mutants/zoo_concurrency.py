"""Stores that pass every single-process check yet break the contract under concurrency.

Each one is the baseline store of ``base`` (strict fence) or ``relaxed`` (relaxed fence) with
one step made wrong in a way real stores get wrong. The kit must catch each in at least 19 of
20 runs of the ``ci`` profile; run this file (``python tests/mutants/zoo_concurrency.py
[Mutant ...]``) to measure how often it does, through the zoo's one kit runner.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from typing import ClassVar

from base import BaseStore, RelaxedFileStore, RolloutFileState

from tokcap_spec.ids import validate_rollout_id
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry

__all__ = [
    "CountedVersion",
    "DropRacesMark",
    "LaggingVisibility",
    "TwoStepFreeze",
    "UnlockedReadModifyWrite",
]


class TwoStepFreeze(BaseStore):
    """Reads the entries under the lock, then takes it again to set the frozen flag.

    A put landing between the two steps is acked, is missing from the snapshot, and the
    snapshot still drops: the put is lost (FREEZE-5).
    """

    breaks: ClassVar[str] = "FREEZE-5"
    anomaly: ClassVar[str] = "lost-ack"

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        rollout_id = validate_rollout_id(rollout_id)
        with self.transaction(rollout_id) as seen:
            entries = tuple(self.decode(stored) for stored in seen.entries.values())
        found = await super().freeze(rollout_id)
        return dataclasses.replace(found, entries=entries)


class CountedVersion(RelaxedFileStore):
    """Computes the version from the entry count, so a mark does not move it (MASK-3).

    A snapshot taken before a mark still drops, and the mark's evidence goes with it.
    """

    breaks: ClassVar[str] = "MASK-3"

    def bump(self, state: RolloutFileState) -> None:
        state.version = len(state.entries)


class DropRacesMark(RelaxedFileStore):
    """Checks the snapshot under the lock, then deletes its records one lock at a time.

    Deleting record by record is what a store keeping one file or key per entry does. A mark
    or put landing after the check is acked and then erased with the records, while the drop
    reports the snapshot it checked as retired.

    Only a put landing inside that window shows it (a mark there may be ordered after the drop),
    and on a loaded two-core machine the ci budget's race rounds missed it in 4 of 20 runs. It
    is judged with the thorough budget, whose 120 rounds of four writers caught it in 20 of 20
    under the same load.
    """

    breaks: ClassVar[str] = "FREEZE-5"
    anomaly: ClassVar[str] = "lost-ack"
    flags: ClassVar[tuple[str, ...]] = ("--tokcap-profile=thorough",)

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        rollout_id = validate_rollout_id(rollout_id)
        with self.transaction(rollout_id) as checked:
            if not self.matches(checked, snapshot_id, version):
                return False
        for call in checked.entries:
            with self.transaction(rollout_id) as state:
                state.entries.pop(call, None)
        with self.transaction(rollout_id) as state:
            self.tombstone(state)
        return True


class LaggingVisibility(RelaxedFileStore):
    """PUT-1: acks a put at once and writes it from a background thread a moment later.

    Close waits for the backlog, so nothing is lost in the end; but a freeze that starts after
    the ack may not see the entry.
    """

    breaks: ClassVar[str] = "PUT-1"
    lag_seconds = 0.05

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._backlog: deque[tuple[float, TokenEntry]] = deque()
        self._wake = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def write(self, entry: TokenEntry) -> None:
        with self._wake:
            self._backlog.append((time.monotonic() + self.lag_seconds, entry))
            self._wake.notify()

    def _drain(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._backlog or self._closing)
                if not self._backlog:
                    return
                due, entry = self._backlog[0]
            delay = due - time.monotonic()
            if delay > 0 and not self._closing:
                time.sleep(delay)
            with contextlib.suppress(Exception):  # Acked already: a refusal has nowhere to go.
                super().write(entry)
            with self._wake:
                self._backlog.popleft()

    async def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join()
        await super().close()


class UnlockedReadModifyWrite(RelaxedFileStore):
    """Reads the rollout before taking its lock, then writes back what it read plus its entry.

    One writer alone never notices. Writers in several processes putting into one rollout
    overwrite each other's acked entries (SPAWN-4).
    """

    breaks: ClassVar[str] = "SPAWN-4"
    also: ClassVar[tuple[str, ...]] = ("FREEZE-5",)
    anomaly: ClassVar[str] = "lost-ack"

    def write(self, entry: TokenEntry) -> None:
        state = self.load(entry.rollout_id)
        with self.locked(entry.rollout_id), self.saving(entry.rollout_id, state):
            self.apply_put(entry.rollout_id, state, entry.model_call_id, self.encode(entry))


def _measure(names: Sequence[str], runs: int = 20) -> None:
    """Print how often the kit fails exactly each named mutant's declared clauses.

    Each of ``runs`` kit runs (seeds 0, 1, ...) goes through :func:`zoo.run_kit` with the
    mutant's own declared flags, narrowed by ``-k`` to the checks that judge or cover one of
    its declared clauses.
    """
    from zoo import mutants, run_kit

    from conformance._registry import all_checks

    for mutant in mutants():
        if mutant.name not in names:
            continue
        judging = [
            found.id
            for found in all_checks()
            if set(mutant.expected) & {found.clause, *found.covers}
        ]
        selection = ["-k", " or ".join(judging)]
        caught, exact, failed = 0, 0, Counter[str]()
        started = time.monotonic()
        for seed in range(runs):
            run = run_kit(mutant, [f"--tokcap-seed={seed}", *selection])
            caught += run.caught
            exact += run.exact
            failed.update(run.failed or [run.problem or "nothing"])
        elapsed = time.monotonic() - started
        print(
            f"{mutant.name}: caught {caught}/{runs}, exactly {exact}/{runs}, in {elapsed:.0f}s; "
            f"failed {dict(failed)}",
            flush=True,
        )


if __name__ == "__main__":
    _measure(sys.argv[1:] or __all__)
