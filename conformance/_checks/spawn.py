"""SPAWN: sinks built in freshly spawned interpreters work, together, and are seen by the parent."""

from __future__ import annotations

from typing import Any

from conformance import _steps as step
from conformance._history.record import Action, Lane, LaneTargets, Workload
from conformance._kit import Kit
from conformance._profiles import budget
from conformance._reading import SnapshotView, entry_view, read_snapshot
from conformance._registry import basic, check
from conformance._violation import NotClaimed
from conformance._workers import Operation, WorkerOutcome, WorkerPlan, run_workers

PROCESS_LOCAL = "the target declares process-local: it does not claim to serve spawned workers"


def _require_processes(kit: Kit) -> None:
    if kit.claims("process-local"):
        raise NotClaimed(PROCESS_LOCAL)


def _plan(kit: Kit, entries: list[Any], kwargs: dict[str, Any] | None = None) -> WorkerPlan:
    return WorkerPlan(
        kit.settings.sink,
        dict(kit.settings.sink_kwargs) if kwargs is None else kwargs,
        tuple(Operation("put", entry_view(entry).payload) for entry in entries),
        entry_class=kit.settings.entry_class,
    )


def _expect_all_ok(kit: Kit, outcomes: list[WorkerOutcome], together: str) -> None:
    for number, outcome in enumerate(outcomes):
        if outcome.stage == "build":
            kit.fail(
                expected=f"the sink to build in spawned worker {number}{together}",
                observed=kit.redact(outcome.error),
                hint="a spawned worker gets only the target string and kwargs: nothing the "
                "launcher installed (install_token_sink, globals) reaches it",
            )
        if outcome.stage != "ok":
            kit.fail(
                expected=f"spawned worker {number} to ack every put{together}",
                observed=kit.redact(f"{outcome.stage} after {outcome.acked} acks: {outcome.error}"),
                hint="construction and writes must not depend on the launcher process",
            )


@check("SPAWN-1", "spawned-worker-builds")
def spawned_worker_builds(kit: Kit) -> None:
    """A sink built in a spawned interpreter from the target and kwargs alone acks a put, on
    the run's store and, alone, on a store nothing was ever built on."""
    _require_processes(kit)
    rollout = kit.rollout_id()
    outcomes = run_workers([_plan(kit, [kit.entries.entry(rollout)])], together=False)
    _expect_all_ok(kit, outcomes, "")
    # The first build of a store may well happen in a spawned worker: no launcher set it up.
    fresh = kit.settings.fresh_store_kwargs(kit.rollout_id("first-build"))
    if fresh is not None:
        entry = kit.entries.entry(kit.rollout_id("first"))
        outcomes = run_workers([_plan(kit, [entry], fresh)], together=False)
        _expect_all_ok(kit, outcomes, " on a store never built before, nothing else running")


_BUILDERS = 3
"""Workers that construct at one moment in each of SPAWN-2's races: two make a race, and every
one more is a construction a slow-to-build target pays for, once per new store."""


@check("SPAWN-2", "concurrent-construction")
def concurrent_construction(kit: Kit) -> None:
    """Spawned workers constructing their sinks at the same moment all succeed, on the run's
    store and on stores nothing was ever built on."""
    _require_processes(kit)
    # With {tmp_path} in the kwargs, the workers also race to set up brand-new stores, as the
    # serving processes of a first job do. Whether two setups overlap is a matter of timing, so
    # the profile sets how many new stores they race on.
    stores: list[tuple[dict[str, Any] | None, str]] = [(None, "")]
    for n in range(budget(kit.settings.profile).fresh_stores):
        fresh = kit.settings.fresh_store_kwargs(kit.rollout_id(f"fresh-store{n}"))
        if fresh is not None:
            stores.append((fresh, " on a store never built before"))
    for kwargs, where in stores:
        shared = kit.rollout_id("shared")
        plans = [
            _plan(
                kit,
                [
                    kit.entries.entry(shared, prompt_len=8, generation_len=4),
                    kit.entries.entry(kit.rollout_id(f"own{n}"), prompt_len=8, generation_len=4),
                ],
                kwargs,
            )
            for n in range(_BUILDERS)
        ]
        outcomes = run_workers(plans, together=True)
        _expect_all_ok(kit, outcomes, f" while others construct{where}")


@check("SPAWN-3", "acks-visible-to-parent")
def acks_visible_to_parent(kit: Kit) -> None:
    """Entries acked by sinks in two spawned workers freeze, exactly, from a source here."""
    _require_processes(kit)
    # A rollout each: concurrent writers to one rollout are SPAWN-4's to judge.
    rollouts = [kit.rollout_id(f"w{n}") for n in range(2)]
    batches = [[kit.entries.entry(rollout) for _ in range(3)] for rollout in rollouts]
    # And a rollout each of an entry holding what a transport rounds or drops (64-bit floats,
    # -0.0, extra fields): what comes back here must be what the worker put, to the last bit.
    hazards = [kit.entries.hazardous(kit.rollout_id(f"h{n}")) for n in range(2)]
    plans = [_plan(kit, [*batch, hazard]) for batch, hazard in zip(batches, hazards, strict=True)]
    _expect_all_ok(kit, run_workers(plans), "")
    source = kit.source()
    snapshots = [step.freeze(kit, source, rollout) for rollout in rollouts]
    expected = step.sent(entry for batch in batches for entry in batch)
    seen = {call: payload for view in snapshots for call, payload in step.payloads(view).items()}
    missing = sorted(set(expected) - set(seen))
    if missing:
        kit.fail(
            expected=f"all {len(expected)} entries acked by spawned workers",
            observed=f"{len(missing)} missing: " + "; ".join(map(step.describe, snapshots)),
            hint="records kept in process memory are invisible to other processes; store them "
            "where every process reads (or declare --tokcap-capability=process-local)",
        )
    torn = sorted(call for call in expected if seen.get(call) != expected[call])
    torn += [step.call_of(hazard) for hazard in hazards if not _kept_exactly(kit, hazard)]
    if torn:
        kit.fail(
            expected="each entry exactly as the worker put it",
            observed=f"{len(torn)} entries differ, first call id {torn[0]!r}",
            hint="store each entry whole, every field to its last bit (64-bit floats, -0.0, "
            "extra fields), whichever process put it: a torn or interleaved write, or a record "
            "kept exact only in the writer's memory, changes its fields",
        )


def _round_trip(kit: Kit, rollout: str, entry: Any) -> bool:
    """Whether a freeze here of ``rollout`` answers ``entry`` exactly, and nothing else."""
    try:
        view = read_snapshot(kit.run(kit.source().raw.freeze(rollout)))
    except Exception:
        return False
    return step.payloads(view) == step.sent([entry])


def _kept_exactly(kit: Kit, entry: Any) -> bool:
    """Whether the worker's ``entry`` freezes here exactly, or the same entry put and frozen in
    this process comes back changed too: then the round trip itself changes it (PUT-2's)."""
    if _round_trip(kit, entry_view(entry).rollout_id, entry):
        return True
    fields = dict(entry_view(entry).fields)
    fields["rollout_id"] = kit.rollout_id("twin")
    twin = kit.entries.build(**fields)
    try:
        kit.run(kit.sink().raw.put(twin))
    except Exception:
        return True
    return not _round_trip(kit, fields["rollout_id"], twin)


@check("SPAWN-3", "writers-still-running")
def writers_still_running(kit: Kit) -> None:
    """Entries acked by workers that are still running, their sinks open, freeze here exactly.

    A write-behind buffer that a worker flushes only when it closes, or after a while, hides
    acked entries from every other process for as long as the worker lives: a consumer reads
    while model servers keep serving.
    """
    _require_processes(kit)
    rollouts = [kit.rollout_id(f"live{n}") for n in range(2)]
    batches = [[kit.entries.entry(rollout) for _ in range(3)] for rollout in rollouts]
    snapshots, problems = _frozen_while_writers_live(kit, batches)
    if problems:
        kit.fail(
            expected="every spawned writer to build its sink and ack its puts",
            observed=kit.redact("; ".join(problems)),
            hint="build the sink from the target string and kwargs alone",
        )
    expected = step.sent(entry for batch in batches for entry in batch)
    seen = {call: payload for view in snapshots for call, payload in step.payloads(view).items()}
    if seen != expected:
        missing = sorted(set(expected) - set(seen))
        kit.fail(
            expected=f"all {len(expected)} entries acked by workers that are still running",
            observed=f"{len(missing)} missing: " + "; ".join(map(step.describe, snapshots)),
            hint="an ack must mean the record is where every process reads it now, not once "
            "the writer flushes or closes",
        )


def _frozen_while_writers_live(
    kit: Kit, batches: list[list[Any]], clause: str | None = None
) -> tuple[list[SnapshotView], list[str]]:
    """Spawn a writer per batch, each putting its batch into its rollout and then holding its
    sink open; freeze every rollout here meanwhile, then let the writers close.

    Returns the snapshots, in batch order, and a line per writer that went wrong.
    """
    acked = sum(len(batch) for batch in batches)
    rollouts = [entry_view(batch[0]).rollout_id for batch in batches]
    lanes = [
        Lane(
            f"writer-{n}",
            (
                *(Action("put", r, step.call_of(e), entry_view(e).payload) for e in batch),
                Action("wait", count=acked + 1),
            ),
        )
        for n, (r, batch) in enumerate(zip(rollouts, batches, strict=True))
    ]
    workload = Workload(LaneTargets.of(kit.settings), lanes)
    workload.start()
    try:
        workload.wait_for(acked)
        source = kit.source()
        snapshots = [step.freeze(kit, source, rollout, clause=clause) for rollout in rollouts]
    finally:
        workload.signal()
        _, problems = workload.finish()
    return snapshots, problems


_SPREAD = 12
"""Entries a spawned worker puts into the rollout two more workers then freeze."""


@basic(None, "spawned")
def basic_spawned(kit: Kit) -> None:
    """SPAWN-1, SPAWN-2, SPAWN-3, FREEZE-2, MASK-1: workers build, together too, are seen here,
    and two of them freeze one unchanged rollout to the same snapshot."""
    if kit.claims("process-local"):
        return
    settings = kit.settings
    rollout = kit.rollout_id("spawned")
    marked = kit.rollout_id("spawned-mark")
    # Several entries, so that the workers below freeze a rollout whose order a set or hash()
    # gives differently in each of them.
    entries = [kit.entries.entry(rollout) for _ in range(_SPREAD)]
    masked = kit.entries.entry(marked)
    plan = WorkerPlan(
        settings.sink,
        dict(settings.sink_kwargs),
        (
            *(Operation("put", entry_view(entry).payload) for entry in entries),
            Operation("put", entry_view(masked).payload),
            Operation("mark", rollout_id=marked, model_call_id=step.call_of(masked)),
        ),
        entry_class=settings.entry_class,
    )
    _one_worker_acks(kit, plan, "a put")
    pair = run_workers(
        [
            WorkerPlan(
                settings.sink,
                dict(settings.sink_kwargs),
                (Operation("put", entry_view(kit.entries.entry(kit.rollout_id("pair"))).payload),),
                entry_class=settings.entry_class,
            )
            for _ in range(4)
        ],
        together=True,
    )
    step.expect(
        kit,
        all(o.stage == "ok" for o in pair),
        "four workers constructing at the same moment to succeed",
        kit.redact("; ".join(f"{o.stage}: {o.error}" for o in pair)),
        "construction must not race on first-run setup",
        clause="SPAWN-2",
    )
    view = step.freeze(kit, kit.source(), rollout, clause="SPAWN-3")
    step.expect(
        kit,
        view.payloads() == step.sent(entries),
        "the worker's acked entries visible here",
        step.describe(view),
        "store records where every process reads them",
        clause="SPAWN-3",
    )
    step.expect_spawned_freezes_agree(kit, rollout, clause="FREEZE-2")
    step.expect_masked(
        kit,
        marked,
        "the worker's mark visible here",
        "keep marks where every process reads them",
        clause="MASK-1",
    )
    live = kit.entries.entry(kit.rollout_id("spawned-live"))
    (held,), problems = _frozen_while_writers_live(kit, [[live]], clause="SPAWN-3")
    # Seen here once its writer closed, but missing while the writer runs: the ack came before
    # the record was where every process reads it, which is PUT-1's promise.
    missing = not problems and step.call_of(live) not in held.payloads()
    step.expect(
        kit,
        not problems and held.payloads() == step.sent([live]),
        "an entry acked by a worker that is still running visible here",
        kit.redact("; ".join(problems)) or step.describe(held),
        "an ack must mean the record is where every process reads it now, not once the "
        "writer flushes or closes",
        clause="PUT-1" if missing else "SPAWN-3",
    )
    _marked_after_freeze_here(kit)


def _one_worker_acks(kit: Kit, plan: WorkerPlan, what: str) -> None:
    """SPAWN-1: one spawned worker builds its sink from the target and kwargs and acks."""
    __tracebackhide__ = True
    (outcome,) = run_workers([plan], together=False)
    step.expect(
        kit,
        outcome.stage == "ok",
        f"a sink built in a spawned worker to ack {what}",
        kit.redact(f"{outcome.stage}: {outcome.error}"),
        "build from the target string and kwargs alone",
        clause="SPAWN-1",
    )


def _marked_after_freeze_here(kit: Kit) -> None:
    """MASK-1: a rollout this process froze, then a worker marked, freezes incomplete here: a
    flag kept per process from that first freeze must give way to the mark."""
    settings = kit.settings
    rollout = kit.rollout_id("spawned-read-here")
    entry = kit.entries.entry(rollout)
    step.put(kit, kit.sink(), entry, clause="PUT-1")
    step.freeze(kit, kit.source(), rollout, clause="FREEZE-1")
    mark = Operation("mark", rollout_id=rollout, model_call_id=step.call_of(entry))
    plan = WorkerPlan(
        settings.sink, dict(settings.sink_kwargs), (mark,), entry_class=settings.entry_class
    )
    _one_worker_acks(kit, plan, "a mark")
    step.expect_masked(
        kit,
        rollout,
        "a worker's mark of a rollout this process froze before visible here",
        "read marks on every freeze: never keep a rollout's flag from an earlier one",
        clause="MASK-1",
    )
