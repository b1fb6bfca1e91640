"""The production workload: many rollouts at once, short and long prompts, in one run.

Every figure is a median of interleaved rounds in which the store, the disk floor, a sqlite3
store and NeMo Gym's store take turns on the same entries, so a burst of load from elsewhere
slows them all alike; only the ratios are meant to be compared between runs.

- **disk floor**: a raw loop appending each entry's packed bytes (4 B a token id, 8 B a log
  prob, 200 B of metadata) to its rollout's file with ``fdatasync``, one thread per rollout up to
  16. No store can beat it: it serializes nothing and checks nothing.
- **sqlite**: :class:`SqliteTokenStore`, the store a framework author would otherwise write:
  sqlite3 in WAL mode with ``synchronous=FULL``, one row per entry, the same promises (durable on
  return, identical re-put a no-op, a conflicting one refused and marked, a strict fence).
- **gym**: NeMo Gym's own ``TokenCaptureStore`` from the pinned 0.7.0 wheel
  (:mod:`benchmarks.gym_peer`), handed Gym's own entries: the store users would otherwise keep.
- **hop floor**: :class:`HopFloor`, the disk floor's writes made the way any store that keeps
  the event loop free must make them: one ``asyncio.to_thread`` hop a call, and back. It checks,
  serializes and remembers nothing, so no such store can beat it; where it stays below the
  disk goal, so does every store that never blocks the event loop.

Only the public coroutines of :class:`~reference.file_store.FileTokenStore` are used, so the
same module measures any version of the store.
"""

from __future__ import annotations

import array
import asyncio
import math
import multiprocessing
import os
import random
import shutil
import sqlite3
import statistics
import threading
import time
from collections.abc import Awaitable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from benchmarks.gym_peer import gym_entries, open_gym_store
from reference.file_store import FileTokenStore
from tokcap_spec.errors import ConflictingEntryError, RolloutFrozenError
from tokcap_spec.records import TokenEntry

__all__ = [
    "DISK_GOAL",
    "GYM_GOAL",
    "Cell",
    "SqliteTokenStore",
    "PutPlan",
    "disk_floor",
    "entry_pool",
    "main_sections",
]

DISK_GOAL = 0.5
"""The least share of the disk floor the store reaches where one rollout puts alone."""
GYM_GOAL = 2.0
"""How many times NeMo Gym's store's rate the store reaches in every cell."""
LAG_GOAL_MS = 2.0
FREEZE_GOAL_MS_PER_MIB = 5.0
FREEZE_STALL_GOAL = 2.0
METADATA_BYTES = 200
FLOOR_THREADS = 16
SHAPES = ("small", "large", "mixed")


class Sink(Protocol):
    """What the benchmark needs of a store."""

    async def begin_call(self, rollout_id: str, model_call_id: str) -> None: ...

    async def put(self, entry: Any) -> None: ...

    async def close(self) -> None: ...


def _token_counts(shape: str, rng: random.Random) -> tuple[int, int]:
    if shape == "small":
        return 64, 32
    if shape == "large":
        return 8192, 2048
    # Agentic rollouts: prompts log-uniform from 256 to 16,384 tokens (they grow turn by turn),
    # completions log-uniform from 16 to 2,048.
    return (
        round(math.exp(rng.uniform(math.log(256), math.log(16384)))),
        round(math.exp(rng.uniform(math.log(16), math.log(2048)))),
    )


def entry_pool(shape: str, count: int = 16) -> list[TokenEntry]:
    """Return ``count`` seeded entry templates of ``shape``; every run writes the same bytes."""
    rng = random.Random(shape)
    pool = []
    for _ in range(count):
        prompt, generated = _token_counts(shape, rng)
        pool.append(
            TokenEntry(
                rollout_id="template",
                model_call_id="template",
                model="bench-model",
                prompt_token_ids=[rng.randrange(150_000) for _ in range(prompt)],
                generation_token_ids=[rng.randrange(150_000) for _ in range(generated)],
                generation_log_probs=[-rng.expovariate(1.0) for _ in range(generated)],
                created_at=1_700_000_000.0,
            )
        )
    return pool


def packed(entry: TokenEntry) -> bytes:
    """Return the entry as the disk floor writes it: packed arrays and fixed metadata."""
    ids = array.array("i", entry.prompt_token_ids + entry.generation_token_ids).tobytes()
    return b"m" * METADATA_BYTES + ids + array.array("d", entry.generation_log_probs).tobytes()


@dataclass(frozen=True)
class PutPlan:
    """The puts of one cell: ``rollouts`` rollouts of ``per_rollout`` entries each.

    With ``announce`` each call is first announced with ``begin_call`` and then put, as NeMo
    Gym's capture path does (two durable writes a call); without it, only put.
    """

    shape: str
    rollouts: int
    per_rollout: int
    tag: str
    announce: bool = False

    def batches(self) -> list[list[TokenEntry]]:
        """Return each rollout's entries, in the order its one coroutine puts them."""
        pool = entry_pool(self.shape)
        return [
            [
                pool[(r + i) % len(pool)].model_copy(
                    update={"rollout_id": f"{self.tag}-{r}", "model_call_id": f"call-{i}"}
                )
                for i in range(self.per_rollout)
            ]
            for r in range(self.rollouts)
        ]

    @property
    def puts(self) -> int:
        return self.rollouts * self.per_rollout


INTENT_BYTES = 64


def disk_floor(
    root: str, batches: Sequence[Sequence[TokenEntry]], *, announce: bool = False
) -> float:
    """Append every entry's packed bytes with ``fdatasync``; return the wall seconds taken.

    With ``announce`` each entry is preceded by an intent of 64 bytes, synced on its own.
    """
    blobs = [[packed(e) for e in batch] for batch in batches]
    threads = min(len(blobs), FLOOR_THREADS)
    go = threading.Barrier(threads + 1)
    tag = time.monotonic_ns()

    def work(mine: list[int]) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        fds = {r: os.open(os.path.join(root, f"floor-{tag}-{r}"), flags, 0o600) for r in mine}
        go.wait()
        for index in range(max(len(blobs[r]) for r in mine)):
            for r in mine:
                if index < len(blobs[r]):
                    if announce:
                        os.write(fds[r], b"i" * INTENT_BYTES)
                        os.fdatasync(fds[r])
                    os.write(fds[r], blobs[r][index])
                    os.fdatasync(fds[r])
        for fd in fds.values():
            os.close(fd)

    workers = [
        threading.Thread(target=work, args=(list(range(t, len(blobs), threads)),))
        for t in range(threads)
    ]
    elapsed = timed_from_barrier(workers, go)
    for name in os.listdir(root):
        if name.startswith(f"floor-{tag}-"):
            os.unlink(os.path.join(root, name))
    return elapsed


class SqliteTokenStore:
    """A token sink on sqlite3 (WAL, ``synchronous=FULL``), one row per entry.

    Promises what the file store promises for put: durable on return, an identical re-put is a
    no-op, a conflicting one marks the rollout and raises, a new call after freeze raises.
    Blocking work runs in ``asyncio.to_thread``; one connection per process, used under a lock.
    """

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS entries (rollout_id TEXT, call_id TEXT, payload BLOB, "
            "PRIMARY KEY (rollout_id, call_id))"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS rollouts (rollout_id TEXT PRIMARY KEY, "
            "frozen INTEGER DEFAULT 0, marked INTEGER DEFAULT 0, version INTEGER DEFAULT 0)"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS intents (rollout_id TEXT, call_id TEXT, "
            "PRIMARY KEY (rollout_id, call_id))"
        )
        self._lock = threading.Lock()

    async def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        """Durably announce a call; a known one is a no-op, a new one after freeze raises."""
        await asyncio.to_thread(self._begin_call, (rollout_id, model_call_id))

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the lock: committed on return, rolled back on a raise."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _refuse_if_frozen(self, db: sqlite3.Connection, key: tuple[str, str]) -> None:
        frozen = db.execute("SELECT frozen FROM rollouts WHERE rollout_id = ?", key[:1]).fetchone()
        if frozen is not None and frozen[0]:
            raise RolloutFrozenError.for_call(*key)

    def _begin_call(self, key: tuple[str, str]) -> None:
        with self._transaction() as db:
            self._refuse_if_frozen(db, key)
            db.execute("INSERT OR IGNORE INTO intents VALUES (?, ?)", key)

    async def put(self, entry: TokenEntry) -> None:
        """Store ``entry`` durably; see the class promises."""
        await asyncio.to_thread(self._put, entry)

    def _put(self, entry: TokenEntry) -> None:
        payload = entry.checked_json_bytes()
        key = (entry.rollout_id, entry.model_call_id)
        with self._transaction() as db:
            row = db.execute(
                "SELECT payload FROM entries WHERE rollout_id = ? AND call_id = ?", key
            ).fetchone()
            if row is None:
                self._refuse_if_frozen(db, key)
                db.execute("INSERT INTO entries VALUES (?, ?, ?)", (*key, payload))
                db.execute(
                    "INSERT INTO rollouts (rollout_id, version) VALUES (?, 1) ON CONFLICT "
                    "(rollout_id) DO UPDATE SET version = version + 1",
                    key[:1],
                )
            elif row[0] != payload:
                db.execute(
                    "UPDATE rollouts SET marked = 1, version = version + 1 WHERE rollout_id = ?",
                    key[:1],
                )
        if row is not None and row[0] != payload:
            # Raised once the mark is committed.
            raise ConflictingEntryError(f"{key} already holds another entry")

    async def close(self) -> None:
        """Close the connection."""
        self._db.close()


@dataclass(frozen=True, slots=True)
class PackedCall:
    """An entry as the hop floor is handed it: its ids and the bytes the disk floor writes."""

    rollout_id: str
    model_call_id: str
    blob: bytes


class HopFloor:
    """The disk floor's writes, each behind one ``asyncio.to_thread`` hop: an async store's limit.

    ``put`` appends the entry's packed bytes to its rollout's file and ``fdatasync``s it on a
    worker thread; ``begin_call`` does the same with an intent of 64 bytes, as the disk floor
    does. Nothing is checked, serialized or remembered, and the entries come packed before the
    clock starts: what it spends beyond the disk floor is the hop there and back alone.
    """

    def __init__(self, root: str) -> None:
        self._dir = os.path.join(root, f"hop-{os.getpid()}-{time.monotonic_ns()}")
        os.mkdir(self._dir, 0o700)
        self._fds: dict[str, int] = {}
        self._guard = threading.Lock()

    def _append(self, rollout_id: str, data: bytes) -> None:
        with self._guard:
            fd = self._fds.get(rollout_id)
            if fd is None:
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
                fd = os.open(os.path.join(self._dir, f"{len(self._fds)}"), flags, 0o600)
                self._fds[rollout_id] = fd
        os.write(fd, data)
        os.fdatasync(fd)

    async def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        """Append and sync an intent of 64 bytes, off the event loop."""
        await asyncio.to_thread(self._append, rollout_id, b"i" * INTENT_BYTES)

    async def put(self, entry: PackedCall) -> None:
        """Append and sync the entry's packed bytes, off the event loop."""
        await asyncio.to_thread(self._append, entry.rollout_id, entry.blob)

    async def close(self) -> None:
        """Close every file and remove them."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        shutil.rmtree(self._dir, ignore_errors=True)


KINDS = ("store", "sqlite", "gym", "hop")
"""The stores a cell measures besides the disk floor (the hop floor counts as one)."""


def open_sink(kind: str, root: str) -> Sink:
    """Return a new store of ``kind`` (file, sqlite, NeMo Gym's, the hop floor) in ``root``."""
    if kind == "store":
        return FileTokenStore(root)
    if kind == "gym":
        store: Sink = open_gym_store(root)
        return store
    if kind == "hop":
        return HopFloor(root)
    return SqliteTokenStore(os.path.join(root, "bench.sqlite3"))


def entries_for(kind: str, batches: list[list[TokenEntry]]) -> list[list[Any]]:
    """Return ``batches`` as ``kind`` is handed them: Gym's store gets Gym's own records, the
    hop floor the packed bytes."""
    if kind == "gym":
        return gym_entries(batches)
    if kind == "hop":
        return [
            [PackedCall(e.rollout_id, e.model_call_id, packed(e)) for e in batch]
            for batch in batches
        ]
    return [list(batch) for batch in batches]


async def put_all(sink: Sink, batches: Sequence[Sequence[Any]], announce: bool = False) -> float:
    """Run one coroutine per rollout, each putting its entries in turn; return wall seconds.

    With ``announce`` each entry's call is announced with ``begin_call`` right before its put.
    """

    async def one(batch: Sequence[Any]) -> None:
        for each in batch:
            if announce:
                await sink.begin_call(each.rollout_id, each.model_call_id)
            await sink.put(each)

    started = time.perf_counter()
    await asyncio.gather(*(one(batch) for batch in batches))
    return time.perf_counter() - started


def in_process(kind: str, root: str, workload: PutPlan) -> float:
    """Return the wall seconds ``kind`` takes to put ``workload`` in this process."""
    batches = entries_for(kind, workload.batches())

    async def timed() -> float:
        sink = open_sink(kind, root)
        try:
            return await put_all(sink, batches, workload.announce)
        finally:
            await sink.close()

    return asyncio.run(timed())


def _spawned_worker(kind: str, root: str, workload: PutPlan, go: Any) -> None:
    batches = entries_for(kind, workload.batches())

    async def write() -> None:
        sink = open_sink(kind, root)
        go.wait()
        await put_all(sink, batches, workload.announce)
        await sink.close()

    asyncio.run(write())


def spawned(kind: str, root: str, workload: PutPlan, processes: int) -> float:
    """Run ``workload`` in each of ``processes`` spawned interpreters; return the wall seconds.

    Each process writes its own rollouts; the clock starts once all of them are ready.
    """
    if kind == "sqlite":
        # Switching to WAL takes a lock no busy timeout waits for: do it once, before the writers.
        asyncio.run(SqliteTokenStore(os.path.join(root, "bench.sqlite3")).close())
    context = multiprocessing.get_context("spawn")
    go = context.Barrier(processes + 1)
    workers = [
        context.Process(
            target=_spawned_worker,
            args=(kind, root, PutPlan(**{**vars(workload), "tag": f"{workload.tag}-p{p}"}), go),
        )
        for p in range(processes)
    ]
    elapsed = timed_from_barrier(workers, go)
    if any(worker.exitcode != 0 for worker in workers):
        raise RuntimeError(f"a spawned writer failed: {[w.exitcode for w in workers]}")
    return elapsed


class Worker(Protocol):
    """A thread or a process."""

    def start(self) -> None: ...

    def join(self) -> None: ...


def timed_from_barrier(workers: Sequence[Worker], go: Any) -> float:
    """Start ``workers``, meet them at barrier ``go``; return the seconds until all have ended."""
    for worker in workers:
        worker.start()
    go.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    return time.perf_counter() - started


@dataclass
class Cell:
    """One row of the table: medians of every contender on one workload (seconds)."""

    workload: PutPlan
    processes: int
    store: float
    disk: float
    sqlite: float
    gym: float
    hop: float

    @property
    def puts(self) -> int:
        return self.workload.puts * self.processes

    def rate(self, seconds: float) -> float:
        return self.puts / seconds


def measure_cell(root: str, workload: PutPlan, processes: int, rounds: int) -> Cell:
    """Measure every store and the disk floor on ``workload``, in turn, ``rounds`` times."""
    seconds: dict[str, list[float]] = {kind: [] for kind in (*KINDS, "disk")}
    for round_ in range(rounds):
        tagged = PutPlan(**{**vars(workload), "tag": f"{workload.tag}-{round_}"})
        for kind in KINDS:
            if processes == 1:
                seconds[kind].append(in_process(kind, root, tagged))
            else:
                seconds[kind].append(spawned(kind, root, tagged, processes))
        everything = [b for _ in range(processes) for b in tagged.batches()]
        seconds["disk"].append(disk_floor(root, everything, announce=workload.announce))
        _forget_sqlite(root)
    medians = {kind: statistics.median(values) for kind, values in seconds.items()}
    return Cell(
        workload,
        processes,
        medians["store"],
        medians["disk"],
        medians["sqlite"],
        medians["gym"],
        medians["hop"],
    )


def _forget_sqlite(root: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        path = os.path.join(root, f"bench.sqlite3{suffix}")
        if os.path.exists(path):
            os.unlink(path)


PUTS_PER_CELL = {"small": 2048, "large": 256, "mixed": 512}
QUICK_PUTS_PER_CELL = {"small": 256, "large": 32, "mixed": 64}


def section_table(root: str, quick: bool) -> list[Cell]:
    """Print the throughput table: every cell's ratio to the disk and hop floors, sqlite and Gym."""
    totals = QUICK_PUTS_PER_CELL if quick else PUTS_PER_CELL
    rounds = 1 if quick else 3
    print(
        "\n## 1. put throughput on the production workload (calls/s; medians of interleaved rounds)"
    )
    print(
        "(disk = packed bytes + fdatasync, one thread per rollout up to 16; hop = the same writes "
        "behind one asyncio.to_thread hop a call, the limit of any store that keeps the event "
        "loop free; sqlite = WAL, synchronous=FULL, one row per entry; gym = NeMo Gym 0.7.0's "
        "TokenCaptureStore; calls = put alone, or begin_call then put as Gym's capture path makes "
        "them)"
    )
    print(
        f"| {'entries':7} | {'calls':9} | {'rollouts':>8} | {'procs':>5} | {'store':>9} | "
        f"{'disk':>9} | {'hop':>9} | {'sqlite':>9} | {'gym':>9} | {'vs disk':>7} | "
        f"{'vs hop':>7} | {'vs sqlite':>9} | {'vs gym':>7} | "
        f"goals: >= {GYM_GOAL}x gym; one rollout >= {DISK_GOAL}x disk |"
    )
    print(
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| --- |"
    )
    plan = [(shape, r, 1, False) for shape in SHAPES for r in (1, 32, 128)]
    plan += [(shape, 8, p, False) for shape in SHAPES for p in (1, 4)]
    plan += [(shape, r, 1, True) for shape in SHAPES for r in (1, 32)]
    cells = []
    for shape, rollouts, processes, announce in plan:
        per_rollout = max(1, totals[shape] // (rollouts * processes))
        tag = f"{shape}-{rollouts}-{processes}{'-announced' if announce else ''}"
        workload = PutPlan(shape, rollouts, per_rollout, tag, announce)
        cell = measure_cell(root, workload, processes, rounds)
        cells.append(cell)
        store, disk, sqlite, gym, hop = (
            cell.rate(s) for s in (cell.store, cell.disk, cell.sqlite, cell.gym, cell.hop)
        )
        met = store / gym >= GYM_GOAL and (rollouts > 1 or store / disk >= DISK_GOAL)
        verdict = "met" if met else "MISSED"
        if rollouts == 1 and hop / disk < DISK_GOAL:
            verdict += f" (the hop floor reaches {hop / disk:.2f}x disk)"
        calls = "begin+put" if announce else "put"
        print(
            f"| {shape:7} | {calls:9} | {rollouts:>8} | {processes:>5} | {store:9.0f} | "
            f"{disk:9.0f} | {hop:9.0f} | {sqlite:9.0f} | {gym:9.0f} | {store / disk:6.2f}x | "
            f"{store / hop:6.2f}x | {store / sqlite:8.2f}x | {store / gym:6.2f}x | {verdict} |",
            flush=True,
        )
    return cells


async def lag_during(work: Awaitable[object]) -> list[float]:
    """Return how late each 1 ms timer of the event loop fired while ``work`` ran (seconds)."""
    lags: list[float] = []
    done = False

    async def ticker() -> None:
        while not done:
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - started - 0.001)

    task = asyncio.ensure_future(ticker())
    await work
    done = True
    await task
    return lags


def section_lag(root: str, quick: bool) -> None:
    """Print the event loop's lag p50/p99/max under 32 concurrent large puts."""
    # Enough puts for a few hundred ticks, so that p99 is not simply the worst tick.
    per_rollout = 1 if quick else 16
    print(f"\n## 2. event-loop lag under 32 concurrent large puts ({per_rollout} per rollout)")
    for kind in KINDS:
        batches = entries_for(kind, PutPlan("large", 32, per_rollout, f"lag-{kind}").batches())

        async def measured(kind: str = kind, batches: list[list[Any]] = batches) -> list[float]:
            sink = open_sink(kind, root)
            try:
                return await lag_during(put_all(sink, batches))
            finally:
                await sink.close()

        lags = sorted(asyncio.run(measured()))
        p50, p99, worst = (
            statistics.median(lags) * 1e3,
            lags[min(len(lags) - 1, int(len(lags) * 0.99))] * 1e3,
            lags[-1] * 1e3,
        )
        verdict = ("met" if p99 < LAG_GOAL_MS else "MISSED") if kind == "store" else "-"
        print(
            f"{kind:>6}: p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  max {worst:7.2f} ms  "
            f"({len(lags)} ticks)  goal p99 < {LAG_GOAL_MS} ms: {verdict}"
        )
        _forget_sqlite(root)


def section_freeze(root: str, quick: bool) -> None:
    """Print freeze ms/MiB of a large rollout and how much it slows other rollouts' puts."""
    count = 30 if quick else 300
    workload = PutPlan("large", 1, count, "freeze")
    (batch,) = workload.batches()
    mib = sum(len(e.to_json_bytes()) for e in batch) / 2**20
    others = PutPlan("small", 4, 25 if quick else 100, "others").batches()
    print(f"\n## 3. freeze of one rollout of {count} large entries ({mib:.1f} MiB of entry JSON)")

    async def scenario() -> None:
        store = FileTokenStore(root)
        chunks = [batch[i::32] for i in range(32)]
        await put_all(store, chunks)
        # Medians of three: the first freeze after the table's gigabytes of writes can wait on
        # the kernel for its fresh pages several times longer than any later one.
        same_times, fresh_times = [], []
        for _ in range(3):
            started = time.perf_counter()
            await store.freeze("freeze-0")
            same_times.append(time.perf_counter() - started)
            fresh = FileTokenStore(root)
            started = time.perf_counter()
            await fresh.freeze("freeze-0")
            fresh_times.append(time.perf_counter() - started)
            await fresh.close()
        same, fresh_s = statistics.median(same_times), statistics.median(fresh_times)
        quiet = await put_latencies(store, others, 0)
        during = await put_latencies(store, others, 1, freeze=store.freeze("freeze-0"))
        await store.close()
        print(
            f"freeze (medians of 3) same instance {same * 1e3:8.1f} ms "
            f"({same * 1e3 / mib:6.2f} ms/MiB), fresh instance {fresh_s * 1e3:8.1f} ms "
            f"({fresh_s * 1e3 / mib:6.2f} ms/MiB)  "
            f"goal < {FREEZE_GOAL_MS_PER_MIB} ms/MiB: "
            f"{'met' if max(same, fresh_s) * 1e3 / mib < FREEZE_GOAL_MS_PER_MIB else 'MISSED'}"
        )
        for name, pick in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
            q, d = quantile(quiet, pick), quantile(during, pick)
            verdict = ("met" if d / q <= FREEZE_STALL_GOAL else "MISSED") if name != "max" else "-"
            print(
                f"small puts to 4 other rollouts, {name}: {q * 1e3:7.2f} ms alone, "
                f"{d * 1e3:7.2f} ms during the freeze: {d / q:6.2f}x  "
                f"goal <= {FREEZE_STALL_GOAL}x: {verdict}"
            )

    asyncio.run(scenario())


def quantile(values: Sequence[float], pick: float) -> float:
    """Return the ``pick`` quantile of ``values`` (1.0 is the maximum)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pick))]


async def put_latencies(
    store: FileTokenStore,
    batches: Sequence[Sequence[TokenEntry]],
    round_: int,
    freeze: Awaitable[object] | None = None,
) -> list[float]:
    """Put ``batches`` (renamed for ``round_``) while ``freeze`` runs; return each put's latency.

    With a freeze, puts go on until it has returned, reusing the entries' calls if need be.
    """
    latencies: list[float] = []
    freezing = asyncio.ensure_future(freeze) if freeze is not None else None

    async def one(batch: Sequence[TokenEntry]) -> None:
        index = 0
        while index < len(batch) or (freezing is not None and not freezing.done()):
            each = batch[index % len(batch)].model_copy(
                update={"model_call_id": f"r{round_}-{index}"}
            )
            started = time.perf_counter()
            await store.put(each)
            latencies.append(time.perf_counter() - started)
            index += 1

    await asyncio.gather(*(one(batch) for batch in batches))
    if freezing is not None:
        await freezing
    return latencies


def main_sections(root: str, quick: bool) -> list[Cell]:
    """Run the production-workload sections and return the table's cells."""
    cells = section_table(root, quick)
    section_lag(root, quick)
    section_freeze(root, quick)
    return cells


def _main() -> None:
    import argparse
    import shutil
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--root")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="tokcap-workload-", dir=args.root)
    try:
        main_sections(root, args.quick)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    _main()
