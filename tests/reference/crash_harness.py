"""Kill spawned FileTokenStore writers with SIGKILL at random moments; check every ack survives.

Each run starts writers in freshly spawned interpreters. A writer puts entries into a few rollouts
and, after every acknowledged put and before its next one, reports the ack to this process over a
pipe. Each writer is then killed with SIGKILL: either by this process, a random moment after a
random number of acks, or by itself in the middle of a record, after writing only part of it (the
torn write a crash leaves behind). Half of the runs then start a second generation that writes on
top of the damage and is killed in turn.

Afterwards a fresh store in this process must open and freeze every rollout and show every acked
entry exactly once, byte for byte, with nothing torn, nothing that was never put, the rollout
clean and its version equal to its entry count; a second fresh instance must agree, and the
snapshot must drop.

``tests/reference/test_file_store_crash.py`` runs a few trials; ``tools/crash_runs.py`` runs
many from the command line. Spawned writers import this module by name, so the folder it is in
must be on ``sys.path``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import select
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from reference import _file_log
from reference._file_log import log_name
from reference._file_records import BLOB, ENTRY, PACKED, IncompleteFrame, parse_log
from reference.file_store import FileTokenStore
from tokcap_spec.records import MAX_TOKEN_ID, TokenEntry

__all__ = [
    "Generation",
    "RunResult",
    "WriterPlan",
    "crash_run",
    "planned_entry",
    "planned_puts",
    "run_writers",
    "verify_store",
]

RUN_TIMEOUT_SECONDS = 120.0
"""A run whose writers neither finish nor die within this long is reported as a hang."""


@dataclass(frozen=True)
class WriterPlan:
    """What one spawned writer does and how it dies.

    ``tear_at`` is the number of the ``pwrite`` at which the writer writes only part of its data
    and then kills itself; with None the parent kills it with SIGKILL once it has acked
    ``kill_after_acks`` (at least 1) entries and ``kill_delay`` seconds more have passed, if it is
    still alive: a writer that finishes first exits normally.
    """

    worker: int
    generation: int
    rollouts: tuple[str, ...]
    puts: int
    seed: int
    tear_at: int | None = None
    kill_after_acks: int = 1
    kill_delay: float = 0.0


def planned_entry(rollout_id: str, model_call_id: str, seed: int) -> TokenEntry:
    """Return the one entry any writer ever puts for this rollout, call id and run seed."""
    rng = random.Random(f"{seed}/{rollout_id}/{model_call_id}")
    generated = rng.randint(1, 400)
    return TokenEntry(
        rollout_id=rollout_id,
        model_call_id=model_call_id,
        model="crash-model",
        prompt_token_ids=[rng.randint(0, MAX_TOKEN_ID) for _ in range(rng.randint(1, 3000))],
        generation_token_ids=[rng.randint(0, 150_000) for _ in range(generated)],
        generation_log_probs=[-rng.expovariate(1.0) for _ in range(generated)],
        created_at=1_700_000_000.0 + rng.random(),
    )


def planned_puts(plan: WriterPlan) -> list[tuple[str, str]]:
    """Return the ``(rollout_id, model_call_id)`` pairs the writer puts, in order.

    Every writer starts with the same ``common`` call on its first rollout, so identical re-puts
    from several processes race too.
    """
    rng = random.Random(f"{plan.seed}/puts/{plan.generation}/{plan.worker}")
    puts = [(plan.rollouts[0], "common")]
    for index in range(plan.puts):
        rollout_id = rng.choice(plan.rollouts)
        puts.append((rollout_id, f"g{plan.generation}-w{plan.worker}-{index}"))
    return puts


def _tear_the_write_at(number: int, seed: int) -> None:
    """Make this process's ``number``-th pwrite write a strict prefix of its data, then die."""
    real_pwrite = os.pwrite
    calls = 0
    rng = random.Random(f"{seed}/tear")

    def tearing_pwrite(fd: int, data: bytes | memoryview, offset: int) -> int:
        nonlocal calls
        calls += 1
        if calls == number and len(data) > 1:
            cut = rng.randint(1, len(data) - 1)
            real_pwrite(fd, bytes(data[:cut]), offset)
            os.kill(os.getpid(), signal.SIGKILL)
        return real_pwrite(fd, data, offset)

    vars(_file_log)["os"].pwrite = tearing_pwrite


def _writer_main(root: str, plan: WriterPlan, acks: Connection) -> None:
    """Body of one spawned writer: put each planned entry, report each ack before going on."""
    if plan.tear_at is not None:
        _tear_the_write_at(plan.tear_at, plan.seed + plan.worker)
    fd = acks.fileno()

    async def write() -> None:
        store = FileTokenStore(root)
        for rollout_id, call in planned_puts(plan):
            await store.put(planned_entry(rollout_id, call, plan.seed))
            # One short line is one atomic pipe write: the parent sees a whole ack or none.
            os.write(fd, f"{rollout_id}\t{call}\n".encode())
        await store.close()

    asyncio.run(write())


@dataclass
class RunResult:
    """What one run saw: acks, losses and every other broken promise, each as one sentence."""

    seed: int
    acked: int = 0
    lost: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    torn_tails: int = 0
    torn_writers: int = 0
    killed_writers: int = 0

    @property
    def ok(self) -> bool:
        """Whether nothing acked was lost and no other promise broke."""
        return not self.lost and not self.problems


@dataclass
class Generation:
    """What one generation of writers did: its acks, and how each writer ended."""

    acked: set[tuple[str, str]] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    killed: int = 0
    """Writers the parent killed with SIGKILL."""
    torn: int = 0
    """Writers that wrote part of a record and then SIGKILLed themselves."""
    finished: int = 0
    """Writers that put everything before their moment came, and exited normally."""


def _ended(generation: Generation, plan: WriterPlan, exitcode: int | None) -> None:
    if exitcode == 0:
        generation.finished += 1
    elif exitcode == -signal.SIGKILL and plan.tear_at is not None:
        generation.torn += 1
    elif exitcode == -signal.SIGKILL:
        generation.killed += 1
    else:
        generation.problems.append(f"writer {plan.worker} exited with code {exitcode}")


def run_writers(
    context: multiprocessing.context.SpawnContext, root: str, plans: list[WriterPlan], seed: int
) -> Generation:
    """Run one generation of writers to their deaths and say how it went."""
    generation = Generation()
    acked, problems = generation.acked, generation.problems
    readers: dict[int, tuple[WriterPlan, Connection, multiprocessing.process.BaseProcess]] = {}
    buffers: dict[int, bytes] = {}
    counts: Counter[int] = Counter()
    kill_at: dict[int, float] = {}
    for plan in plans:
        reader, writer = context.Pipe(duplex=False)
        spawned = context.Process(target=_writer_main, args=(root, plan, writer), daemon=True)
        spawned.start()
        writer.close()
        readers[reader.fileno()] = (plan, reader, spawned)
        buffers[reader.fileno()] = b""
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    try:
        while readers:
            now = time.monotonic()
            if now > deadline:
                problems.append(f"run {seed}: writers neither finished nor died in time")
                break
            for fd, due in list(kill_at.items()):
                if now >= due and fd in readers:
                    readers[fd][2].kill()
                    del kill_at[fd]
            timeout = max(0.0, min([*kill_at.values(), now + 0.5]) - now)
            ready, _, _ = select.select(list(readers), [], [], timeout)
            for fd in ready:
                plan, reader, process = readers[fd]
                chunk = os.read(fd, 65536)
                if not chunk:
                    reader.close()
                    process.join(timeout=RUN_TIMEOUT_SECONDS)
                    _ended(generation, plan, process.exitcode)
                    kill_at.pop(fd, None)
                    del readers[fd]
                    continue
                lines = (buffers[fd] + chunk).split(b"\n")
                buffers[fd] = lines.pop()
                for line in lines:
                    rollout_id, _, call = line.decode().partition("\t")
                    acked.add((rollout_id, call))
                    counts[fd] += 1
                if (
                    plan.tear_at is None
                    and fd not in kill_at
                    and counts[fd] >= plan.kill_after_acks
                    and process.is_alive()
                ):
                    kill_at[fd] = time.monotonic() + plan.kill_delay
    finally:
        for _, reader, process in readers.values():
            process.kill()
            process.join(timeout=RUN_TIMEOUT_SECONDS)
            reader.close()
    return generation


def _has_torn_tail(root: str, rollout_id: str) -> bool:
    path = os.path.join(root, log_name(rollout_id))
    if not os.path.exists(path):
        return False
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        parse_log(data)
    except IncompleteFrame:
        return True
    return False


def verify_store(
    root: str, seed: int, rollouts: set[str], acked: set[tuple[str, str]]
) -> tuple[list[str], list[str]]:
    """Check, through fresh instances, what a crash left in ``root``; return (lost, problems).

    ``lost`` names every acked ``rollout/call`` no freeze shows; ``problems`` says, one sentence
    each, what else is wrong: an entry never put or not byte-equal to what was put, a call id
    stored twice, an incomplete rollout, a version other than the entry count, two fresh
    instances that disagree, a snapshot that does not drop, or any error raised on the way.
    """
    lost: list[str] = []
    problems: list[str] = []

    async def check(rollout_id: str) -> None:
        first, second = FileTokenStore(root), FileTokenStore(root)
        try:
            snapshot = await first.freeze(rollout_id)
            again = await second.freeze(rollout_id)
            stored = {entry.model_call_id: entry.to_json_bytes() for entry in snapshot.entries}
            for acked_rollout, call in sorted(acked):
                if acked_rollout == rollout_id and call not in stored:
                    lost.append(f"{rollout_id}/{call}")
            for call, payload in stored.items():
                if payload != planned_entry(rollout_id, call, seed).to_json_bytes():
                    problems.append(f"{rollout_id}/{call}: stored bytes differ from those put")
            if snapshot.incomplete:
                problems.append(f"{rollout_id}: freezes incomplete after crashes alone")
            if snapshot.version != len(stored):
                problems.append(
                    f"{rollout_id}: version {snapshot.version} for {len(stored)} entries"
                )
            calls = sorted(each.model_call_id for each in again.entries)
            seen = (again.snapshot_id, again.version, calls)
            if seen != (snapshot.snapshot_id, snapshot.version, sorted(stored)):
                problems.append(f"{rollout_id}: two fresh instances freeze differently")
            for call, count in _entry_lines(root, rollout_id).items():
                if count != 1:
                    problems.append(f"{rollout_id}/{call}: stored {count} times")
            dropped = await first.drop(
                rollout_id, snapshot_id=snapshot.snapshot_id, version=snapshot.version
            )
            if not dropped:
                problems.append(f"{rollout_id}: the exact snapshot does not drop")
        finally:
            await first.close()
            await second.close()

    for rollout_id in sorted(rollouts):
        try:
            asyncio.run(check(rollout_id))
        except Exception as exc:
            problems.append(f"{rollout_id}: {type(exc).__name__}: {exc}")
    return lost, problems


def _entry_lines(root: str, rollout_id: str) -> Counter[str]:
    """Count entry records per call id in the log, before any drop replaces it."""
    with open(os.path.join(root, log_name(rollout_id)), "rb") as handle:
        records = parse_log(handle.read())
    return Counter(r.call for r in records if r.kind in (ENTRY, PACKED, BLOB))


def _plans(rng: random.Random, seed: int, generation: int, workers: int) -> list[WriterPlan]:
    rollouts = ("shared", *(f"own-{w}" for w in range(workers)))
    plans = []
    for worker in range(workers):
        puts = rng.randint(5, 60)
        tearing = rng.random() < 0.4
        plans.append(
            WriterPlan(
                worker=worker,
                generation=generation,
                rollouts=("shared", rollouts[1 + worker]),
                puts=puts,
                seed=seed,
                # pwrite 1 is the first append; a tear later than the last one never happens.
                tear_at=rng.randint(1, puts) if tearing else None,
                kill_after_acks=rng.randint(1, puts + 1),
                kill_delay=rng.choice([0.0, rng.uniform(0.0, 0.005), rng.uniform(0.0, 0.05)]),
            )
        )
    return plans


def crash_run(seed: int, root: str) -> RunResult:
    """Run one crash trial in the empty directory ``root``; the seed fixes every random choice."""
    rng = random.Random(seed)
    context = multiprocessing.get_context("spawn")
    result = RunResult(seed=seed)
    acked: set[tuple[str, str]] = set()
    rollouts: set[str] = set()
    generations = [_plans(rng, seed, 1, rng.randint(1, 3))]
    if rng.random() < 0.5:
        generations.append(_plans(rng, seed, 2, rng.randint(1, 2)))
    for plans in generations:
        generation = run_writers(context, root, plans, seed)
        acked |= generation.acked
        result.problems += generation.problems
        result.killed_writers += generation.killed
        result.torn_writers += generation.torn
        rollouts |= {rollout_id for plan in plans for rollout_id in plan.rollouts}
    result.torn_tails = sum(_has_torn_tail(root, rollout_id) for rollout_id in rollouts)
    result.acked = len(acked)
    lost, problems = verify_store(root, seed, rollouts, acked)
    result.lost += lost
    result.problems += problems
    return result
