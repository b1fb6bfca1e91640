"""Stores that pass every single-process check yet break the contract under concurrency.

Each one is the correct store of ``relaxed`` with one step made wrong in a way real stores get
wrong. The kit must catch each in at least 19 of 20 runs of the ``ci`` profile; run this file
(``python tests/mutants/zoo_concurrency.py [Mutant ...]``) to measure how often it does.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import ClassVar

from relaxed import RelaxedFileStore, RolloutState, StrictFileStore

from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry

__all__ = [
    "CountedVersion",
    "DropRacesMark",
    "LaggingVisibility",
    "TwoStepFreeze",
    "UnlockedReadModifyWrite",
]


class TwoStepFreeze(StrictFileStore):
    """Reads the entries under the lock, then takes it again to set the frozen flag.

    A put landing between the two steps is acked, is missing from the snapshot, and the
    snapshot still drops: the put is lost (FREEZE-5).
    """

    breaks: ClassVar[str] = "FREEZE-5"
    anomaly: ClassVar[str] = "lost-ack"

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        with self.locked(rollout_id):
            entries = dict(self.load(rollout_id)["entries"])
        with self.locked(rollout_id):
            state = self.load(rollout_id)
            self.stamp(rollout_id, state)
        state["entries"] = entries
        return self.snapshot(rollout_id, state)


class CountedVersion(RelaxedFileStore):
    """Computes the version from the entry count, so a mark does not move it (MASK-3).

    A snapshot taken before a mark still drops, and the mark's evidence goes with it.
    """

    breaks: ClassVar[str] = "MASK-3"

    def bump(self, state: RolloutState) -> None:
        state["version"] = len(state["entries"])


class DropRacesMark(RelaxedFileStore):
    """Checks the snapshot under the lock, then deletes its records one lock at a time.

    Deleting record by record is what a store keeping one file or key per entry does. A mark
    or put landing after the check is acked and then erased with the records, while the drop
    reports the snapshot it checked as retired.
    """

    breaks: ClassVar[str] = "FREEZE-5"
    anomaly: ClassVar[str] = "lost-ack"

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        with self.locked(rollout_id):
            checked = self.load(rollout_id)
            if not self.matches(checked, snapshot_id, version):
                return False
        for call in checked["entries"]:
            with self.locked(rollout_id):
                state = self.load(rollout_id)
                state["entries"].pop(call, None)
                self.save(rollout_id, state)
        with self.locked(rollout_id):
            self.retire(rollout_id, checked)
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
        self._closed = False
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    async def put(self, entry: TokenEntry) -> None:
        with self._wake:
            self._backlog.append((time.monotonic() + self.lag_seconds, entry))
            self._wake.notify()

    def _drain(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._backlog or self._closed)
                if not self._backlog:
                    return
                due, entry = self._backlog[0]
            delay = due - time.monotonic()
            if delay > 0 and not self._closed:
                time.sleep(delay)
            self._write(entry)
            with self._wake:
                self._backlog.popleft()

    def _write(self, entry: TokenEntry) -> None:
        payload = entry.to_json_bytes().decode("utf-8")
        try:
            with self.locked(entry.rollout_id):
                state = self.load(entry.rollout_id)
                self.apply_put(entry.rollout_id, state, entry.model_call_id, payload)
        except Exception:
            return  # The put was already acked; its refusal has nowhere to go.

    async def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join()


class UnlockedReadModifyWrite(RelaxedFileStore):
    """Reads the rollout before taking its lock, then writes back what it read plus its entry.

    One writer alone never notices. Writers in several processes putting into one rollout
    overwrite each other's acked entries (SPAWN-4).
    """

    breaks: ClassVar[str] = "SPAWN-4"
    also: ClassVar[tuple[str, ...]] = ("FREEZE-5",)
    anomaly: ClassVar[str] = "lost-ack"

    async def put(self, entry: TokenEntry) -> None:
        rollout_id = entry.rollout_id
        payload = entry.to_json_bytes().decode("utf-8")
        state = self.load(rollout_id)
        with self.locked(rollout_id):
            self.apply_put(rollout_id, state, entry.model_call_id, payload)


def _measure(runs: int = 20) -> None:
    """Run the concurrency checks ``runs`` times against each mutant and print catch rates."""
    import sys
    import tempfile

    from conformance.registry import checks_by_id
    from conformance.runner import run_check
    from conformance.settings import KitSettings
    from conformance.violation import ClauseViolation

    wanted = [c for c in checks_by_id().values() if c.clause in ("FREEZE-5", "SPAWN-4")]
    wanted += [c for c in checks_by_id().values() if "model-based" in c.slug]
    names = sys.argv[1:] or list(__all__)
    for name in names:
        caught, clauses = 0, {}
        started = time.monotonic()
        for seed in range(runs):
            settings = KitSettings(
                sink=f"zoo_concurrency:{name}",
                sink_kwargs={"root": tempfile.mkdtemp()},
                seed=seed,
            )
            failed = []
            for found in wanted:
                try:
                    run_check(settings, found)
                except ClauseViolation as exc:
                    failed.append(f"{found.id}->{exc.clause}")
            caught += bool(failed)
            for key in failed:
                clauses[key] = clauses.get(key, 0) + 1
        elapsed = time.monotonic() - started
        print(f"{name}: caught {caught}/{runs} in {elapsed:.0f}s; {clauses}", flush=True)


if __name__ == "__main__":
    _measure()
