"""FREEZE-5 and SPAWN-4: freezes and drops under real concurrent writes from spawned processes.

Writers in spawned interpreters put and mark while freezers in other processes (and this one)
freeze and drop in the middle of the writes. The whole history is then judged against the
contract's sequential model; a failure names the anomaly, prints a minimal witness and points
to a timeline of the run.
"""

from __future__ import annotations

import re
import tempfile
import warnings
from pathlib import Path

from conformance._history.checker import check_history
from conformance._history.events import Event
from conformance._history.model import Rules
from conformance._history.record import Action, Lane, LaneTargets, Recorder, Workload
from conformance._history.timeline import write_timeline
from conformance._kit import Endpoint, Kit
from conformance._profiles import Budget, budget
from conformance._reading import entry_view
from conformance._registry import check
from conformance._violation import NotClaimed

PROCESS_LOCAL = "the target declares process-local: it does not claim to serve spawned workers"


def _put(kit: Kit, rollout_id: str, call_id: str) -> Action:
    entry = kit.entries.entry(rollout_id, call_id, prompt_len=4, generation_len=2)
    return Action("put", rollout_id, call_id, entry_view(entry).payload)


def _writes(actions: list[Action]) -> int:
    return sum(action.kind in ("put", "mark") for action in actions)


def _freeze_together(kit: Kit, recorder: Recorder, sources: list[Endpoint], rollout: str) -> None:
    """Freeze one rollout from several fresh sources at once."""
    kit.gather(*(recorder.freeze(source.raw, rollout) for source in sources))


def _settle(kit: Kit, recorder: Recorder, rollouts: list[str]) -> None:
    """After the writers: freeze every rollout twice at once, drop it, and freeze it again."""
    sources = [kit.source(), kit.source()]
    for rollout in rollouts:
        _freeze_together(kit, recorder, sources, rollout)
        pair = recorder.frozen.get(rollout)
        if pair is not None:
            kit.run(recorder.drop(sources[0].raw, rollout, pair))
        kit.run(recorder.freeze(sources[1].raw, rollout))


def _judge(kit: Kit, events: list[Event], problems: list[str], plan: Budget) -> None:
    """Fail the check's clause when a lane went wrong or the history has no legal order."""
    clause = kit.blame()
    if problems:
        kit.fail(
            expected="every spawned worker to build its endpoints and finish its operations",
            observed=kit.redact("; ".join(problems)),
            hint="a worker builds from the target string and kwargs alone; a hang is a deadlock "
            "between processes",
        )
    rules = Rules.judging(kit.fence, kit.settings.capabilities)
    verdict = check_history(events, rules, budget=plan.search)
    kit.observe(f"history-{clause.lower()}", f"{verdict.outcome}, {len(events)} operations")
    if verdict.outcome == "unknown":
        # The kit's own search budget ran out: not the target's fault, but not a pass to hide.
        warnings.warn(
            f"tokcap: {kit.check_id}: history verdict unknown ({verdict.note})", stacklevel=1
        )
    if verdict.outcome != "illegal":
        return
    picture = write_timeline(_picture_path(kit), events, verdict, f"{kit.check_id} history")
    first = verdict.anomalies[0]
    # Under concurrency which promise gave way first depends on the interleaving; the check's
    # own clause is the stable verdict, and a promise one process can break is a basic that
    # blocks this check instead (conformance._basics). The message names no other clause, so
    # no clause reads as broken here while the report lists it passed.
    kit.fail(
        expected=f"a history some sequential order of the contract explains (first anomaly: "
        f"{first.name})",
        observed=kit.redact(
            f"anomalies: {', '.join(verdict.names)}\n"
            + "\n".join(anomaly.describe(clause=False) for anomaly in verdict.anomalies[:3])
            + f"\n  timeline: {picture}"
        ),
        hint=_HINTS.get(first.name, "see the witness: these operations admit no legal order"),
    )


_HINTS = {
    "lost-ack": "an acked write must be visible to every freeze that starts after it returns, "
    "and a drop must refuse a snapshot that misses it: check and change state under one lock",
    "phantom": "a snapshot may only hold what was put into that rollout",
    "torn": "store and read each entry whole: write to a temporary name and rename",
    "duplicate": "key entries by model_call_id",
    "split-freeze": "mint the snapshot_id once per state, under the rollout's lock",
    "version-stuck": "move the version on every state change, marks included, not with the "
    "entry count",
    "refused": "an open rollout must accept puts, marks and freezes",
}


def _picture_path(kit: Kit) -> Path:
    folder = kit.settings.report.parent if kit.settings.report else Path(tempfile.mkdtemp())
    name = re.sub(r"[^A-Za-z0-9]+", "-", kit.check_id).strip("-").lower()
    return folder / f"tokcap-{name}-timeline.html"


def _round_writer(
    kit: Kit, number: int, writers: int, rounds: list[str], share: str, plan: Budget
) -> list[Action]:
    """Put into each round's rollout in turn, with a mark, a re-put and a shared put among them."""
    actions: list[Action] = []
    every = max(1, len(rounds) // plan.shared_puts)
    for k, rollout in enumerate(rounds):
        calls = [f"w{number}-c{j}" for j in range(plan.puts_per_round)]
        actions.append(_put(kit, rollout, calls[0]))
        if (k + number) % writers == 0:
            actions.append(Action("mark", rollout, calls[0]))
        actions.extend(_put(kit, rollout, call) for call in calls[1:])
        if number == 0:
            actions.append(actions[-1])
        if k % every == 0:
            actions.append(_put(kit, share, f"w{number}-s{k}"))
    return actions


def _round_freezer(number: int, rounds: list[str], share: str, writes: int) -> list[Action]:
    """Retire each round's rollout while the writers are about halfway through it."""
    per_round = max(1, writes // len(rounds))
    actions: list[Action] = []
    for k, rollout in enumerate(rounds):
        actions.append(Action("wait", count=per_round * k + per_round // 2))
        actions.append(Action("retire", rollout, count=3))
        if k % 7 == number:
            actions.append(Action("freeze", share))
    return actions


def _race_rounds(
    kit: Kit, races: list[str], writers: int, offset: int
) -> tuple[list[Action], list[list[Action]]]:
    """One freezer and every writer meet on each race rollout in turn.

    Each round the freezer signals and every writer makes two writes from that instant. The
    freezer then freezes once the first of them is acked, so the rest race the freeze; or it
    froze already and drops, so that two marks, or a put and a mark, race the drop.
    """
    freezer: list[Action] = []
    racers: list[list[Action]] = [[] for _ in range(writers)]
    for k, rollout in enumerate(races):
        begin = offset + k * (2 * writers + 1)
        freezer.append(Action("wait", count=begin))
        signal, freeze = Action("signal"), Action("freeze", rollout)
        if k % 3 == 0:
            freezer += [signal, Action("wait", count=begin + 2), freeze]
        else:
            freezer += [freeze, signal]
        freezer.append(Action("drop", rollout))
        for number, actions in enumerate(racers):
            actions.append(Action("wait", count=begin + 1))
            mark = Action("mark", rollout, f"before-race-{number}")
            race = [mark, mark] if k % 3 == 1 else [_put(kit, rollout, f"race-w{number}"), mark]
            actions += race if (number + k) % 2 == 0 else race[::-1]
    return freezer, racers


_QUIET_ROUNDS = 6
_QUIET_PUTS = 10
"""After the races, each round every writer puts this many calls into one quiet rollout, and
once all are acked every process freezes it at the same moment."""


def _quiet_rounds(
    kit: Kit, quiet: str, writers: list[list[Action]], freezers: list[list[Action]], steps: int
) -> None:
    """Rounds of writes to ``quiet``, each followed by freezes of it from several processes at
    once; ``steps`` is the count of steps the lanes made before the first round.

    The freezer lanes and the first writer race freezes of one unchanged state, each the first
    of that state, which must agree: a snapshot id minted outside the rollout's lock shows as
    two ids, and the rollout grows each round, so the read between the check and the mint
    takes longer. Only one writer freezes: a writer that freezes builds a source as well.
    """
    lanes = [(actions, number == 0) for number, actions in enumerate(writers)]
    lanes += [(actions, True) for actions in freezers]
    per_round = len(writers) * _QUIET_PUTS + len(lanes)
    for number in range(_QUIET_ROUNDS):
        begin = steps + number * per_round
        for writer, actions in enumerate(writers):
            actions.append(Action("wait", count=begin))
            calls = [f"quiet-w{writer}-{number}-{k}" for k in range(_QUIET_PUTS)]
            actions += [_put(kit, quiet, call) for call in calls]
        for actions, freezes in lanes:
            actions.append(Action("wait", count=begin + len(writers) * _QUIET_PUTS))
            actions += [Action("freeze", quiet)] if freezes else []
            actions.append(Action("signal"))


@check("FREEZE-5", "cut-under-writes", covers=("FENCE-1", "DROP-4", "MASK-1"))
def cut_under_writes(kit: Kit) -> None:
    """Freezes and drops amid writes from spawned workers admit a legal order of every operation."""
    if kit.claims("process-local"):
        raise NotClaimed(PROCESS_LOCAL)
    plan = budget(kit.settings.profile)
    share = kit.rollout_id("shared")
    rounds = [kit.rollout_id(f"round{k}") for k in range(plan.rounds)]
    races = [kit.rollout_id(f"race{k}") for k in range(plan.rounds)]
    writers = [
        _round_writer(kit, number, plan.writers, rounds, share, plan)
        for number in range(plan.writers)
    ]
    writes = sum(_writes(w) for w in writers)
    freezers = [_round_freezer(number, rounds, share, writes) for number in range(plan.freezers)]
    for number, actions in enumerate(writers):
        actions += [_put(kit, rollout, f"before-race-{number}") for rollout in races]
    total = sum(_writes(w) for w in writers)
    racing, racers = _race_rounds(kit, races, plan.writers, total)
    freezers[0] += racing
    for actions, more in zip(writers, racers, strict=True):
        actions += more
    quiet = kit.rollout_id("quiet")
    _quiet_rounds(kit, quiet, writers, freezers, total + len(races) * (2 * plan.writers + 1))
    lanes = [Lane(f"writer-{n}", tuple(actions)) for n, actions in enumerate(writers)]
    lanes += [Lane(f"freezer-{n}", tuple(actions)) for n, actions in enumerate(freezers)]
    workload = Workload(LaneTargets.of(kit.settings), lanes)
    recorder = Recorder("parent")
    workload.start()
    workload.wait_for(total // 2)
    _freeze_together(kit, recorder, [kit.source(), kit.source()], share)
    events, problems = workload.finish()
    _settle(kit, recorder, [share, *rounds, *races, quiet])
    _judge(kit, events + recorder.events, problems, plan)


_SPAWN_4_ROUNDS = 4
_SPAWN_4_EXTRA_WRITERS = 2
"""How many times the profile's shared puts each SPAWN-4 writer makes: an unlocked
read-modify-write or a record written in two pieces loses a race only now and then."""


@check("SPAWN-4", "one-and-many-rollouts", covers=("SPAWN-3", "FREEZE-2", "PUT-5"))
def one_and_many_rollouts(kit: Kit) -> None:
    """Workers writing a shared rollout and one each lose nothing, mix nothing, agree on freezes."""
    if kit.claims("process-local"):
        raise NotClaimed(PROCESS_LOCAL)
    plan = budget(kit.settings.profile)
    share = kit.rollout_id("shared")
    # More writers than cores, so that the scheduler switches them in the middle of a write.
    own = [kit.rollout_id(f"own{n}") for n in range(plan.writers + _SPAWN_4_EXTRA_WRITERS)]
    writers: list[list[Action]] = []
    for number, mine in enumerate(own):
        actions: list[Action] = []
        puts = _SPAWN_4_ROUNDS * plan.shared_puts
        # A burst into the shared rollout, every writer at once, then the same call ids into
        # each writer's own rollout (a store that mixes rollouts shows it), then both again.
        for calls in (range(puts // 2), range(puts // 2, puts)):
            actions += [_put(kit, share, f"w{number}-{k}") for k in calls]
            actions += [_put(kit, mine, f"w{number}-{k}") for k in calls]
        actions.append(actions[-1])
        writers.append(actions)
    total = sum(_writes(actions) for actions in writers)
    lanes = [Lane(f"writer-{n}", tuple(actions)) for n, actions in enumerate(writers)]
    for number in range(2):
        freezes = tuple(Action("freeze", rollout) for rollout in [share, *own])
        lanes.append(Lane(f"freezer-{number}", (Action("wait", count=total), *freezes)))
    workload = Workload(LaneTargets.of(kit.settings), lanes)
    workload.start()
    events, problems = workload.finish()
    recorder = Recorder("parent")
    source = kit.source()
    for rollout in [share, *own]:
        kit.run(recorder.freeze(source.raw, rollout))
    _judge(kit, events + recorder.events, problems, plan)
