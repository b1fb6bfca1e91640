"""How close FileTokenStore comes to the disk's limit: medians and ratios measured in one run.

    python -m benchmarks.file_store                  # the production workload (a few minutes)
    python -m benchmarks.file_store --quick          # a smoke run (under a minute)
    python -m benchmarks.file_store --one-rollout    # also the one-rollout series below
    python benchmarks/file_store.py [--quick] [--root DIR]

Absolute figures depend on the machine and on whatever else runs on it; the ratios, measured
side by side in one run, are what to compare between runs. Nothing here passes or fails: the
printed goals say whether a ratio met its target. The sections:

1-3. the production workload (``benchmarks.workload``): small, large and mixed entries from
   1, 32 and 128 concurrent rollouts in one process and from 1 and 4 spawned processes, against
   the disk floor (packed bytes + ``fdatasync``, one thread per rollout up to 16) and a sqlite3
   store; event-loop lag under 32 concurrent large puts; freeze cost per MiB and its effect on
   other rollouts' puts. Goals: every cell at least 0.7x the disk; lag p99 under 2 ms; freeze
   under 5 ms per MiB; a freeze at most doubles other rollouts' put latency.
4. where a put's time goes: ``asyncio.to_thread`` alone vs the store's writer thread, then a put
   split into its check and packing, the writer's blocking work, and the hop, with a cProfile
   of that work (which runs on a writer thread, where a profiler on the event loop's thread
   cannot see it): the floor of what is left.

With ``--one-rollout``, also the series of earlier measurements: one rollout of 10 to 5,000
entries put one at a time against a raw ``os.write`` + ``os.fsync`` loop of the same lines
(goal 0.7x), per-put latency late in a 5,000-entry rollout vs a 10-entry one (goal 1.2x),
freeze and drop latency by entry count, and 4 spawned writers against 4 raw loops.

docs/performance.md records one full run and reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import multiprocessing
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: make the repository root importable, for this process and spawned writers.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.workload import entry_pool, main_sections, timed_from_barrier
from reference._file_packed import check_entry
from reference._file_records import entry_record
from reference._file_rollouts import LogDirectory
from reference.file_store import FileTokenStore
from tokcap_spec.records import TokenEntry

SHAPES: dict[str, tuple[int, int]] = {"small": (64, 32), "large": (8192, 2048)}
"""Prompt and generated token counts of each entry shape."""

TEMPLATES = 16
"""Distinct token payloads per shape; entries differ by call id and reuse them, to bound memory."""

PUT_GOAL = 0.7
FLAT_GOAL = 1.2


@dataclass(frozen=True)
class Scale:
    """How much work one run does."""

    sizes: tuple[int, ...]
    large_sizes: tuple[int, ...]
    spawned_puts: int
    hops: int
    repeats: Callable[[int], int]


FULL = Scale(
    sizes=(10, 100, 1000, 5000),
    large_sizes=(10, 100, 1000, 5000),
    spawned_puts=500,
    hops=2000,
    repeats=lambda size: 5 if size <= 100 else 3 if size <= 1000 else 1,
)
QUICK = Scale(
    sizes=(10, 100),
    large_sizes=(10,),
    spawned_puts=40,
    hops=200,
    repeats=lambda size: 2,
)


def templates(shape: str) -> list[TokenEntry]:
    """Return the entry payloads of ``shape``, seeded so every run writes the same bytes."""
    return entry_pool(shape, TEMPLATES)


def entries(pool: Sequence[TokenEntry], rollout_id: str, count: int) -> list[TokenEntry]:
    """Return ``count`` distinct entries of one rollout; they share token lists with ``pool``."""
    return [
        pool[index % len(pool)].model_copy(
            update={"rollout_id": rollout_id, "model_call_id": f"call-{index:05d}"}
        )
        for index in range(count)
    ]


def record_lines(batch: Sequence[TokenEntry]) -> list[bytes]:
    """Return the log lines the store writes for ``batch``: what the raw loop writes instead."""
    return [record_line(each) for each in batch]


def record_line(entry: TokenEntry) -> bytes:
    """Return the log line (format 2, checksum included) the store writes for ``entry``."""
    return entry_record(entry.model_call_id, entry.to_json_bytes()).encode(sealed=True)


def raw_append(path: str, lines: Sequence[bytes]) -> float:
    """Append each line and fsync it, as the floor any durable put pays; return seconds taken."""
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        for line in lines:
            os.write(fd, line)
            os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - started


async def timed_puts(store: FileTokenStore, batch: Sequence[TokenEntry]) -> list[float]:
    """Put each entry in turn and return each put's latency in seconds."""
    latencies = []
    for each in batch:
        started = time.perf_counter()
        await store.put(each)
        latencies.append(time.perf_counter() - started)
    return latencies


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:9.3f}"


def goal(met: bool) -> str:
    return "met" if met else "MISSED"


@dataclass
class PutSeries:
    """Medians of one (shape, size) cell of section 1, and the data sections 2 and 3 reuse."""

    shape: str
    size: int
    store_total: float
    raw_total: float
    serializing_total: float
    put_latencies: list[list[float]]
    raw_latencies: list[list[float]]
    freeze_same: float
    freeze_fresh: float
    drop: float
    log_bytes: int

    @property
    def ratio(self) -> float:
        return self.raw_total / self.store_total

    @property
    def serializing_ratio(self) -> float:
        return self.serializing_total / self.store_total


CHUNK = 10
"""Section 1 alternates store, raw and raw-with-serialization every this many entries."""


def raw_chunk(fd: int, lines: Sequence[bytes]) -> list[float]:
    """Append each ready-made line to ``fd`` and fsync it; return each line's seconds."""
    latencies = []
    for line in lines:
        started = time.perf_counter()
        os.write(fd, line)
        os.fsync(fd)
        latencies.append(time.perf_counter() - started)
    return latencies


def raw_serializing_chunk(fd: int, batch: Sequence[TokenEntry]) -> float:
    """Serialize each entry, append its line to ``fd`` and fsync it; return seconds taken."""
    started = time.perf_counter()
    for each in batch:
        os.write(fd, record_line(each))
        os.fsync(fd)
    return time.perf_counter() - started


def put_series(root: str, shape: str, size: int, repeats: int) -> PutSeries:
    """Measure one cell ``repeats`` times and keep medians.

    Within a repeat the store, the raw loop and the serializing raw loop take turns every
    :data:`CHUNK` entries, so that a burst of disk traffic from other processes slows all three
    alike instead of whichever happened to run then.
    """
    pool = templates(shape)
    store_totals, raw_totals, serializing_totals = [], [], []
    freezes, fresh_freezes, drops = [], [], []
    latencies: list[list[float]] = []
    raw_latencies: list[list[float]] = []
    log_bytes = 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC

    async def one(rep: int) -> None:
        nonlocal log_bytes
        rollout_id = f"{shape}-{size}-{rep}"
        batch = entries(pool, rollout_id, size)
        store = FileTokenStore(root)
        await store.put(entries(pool, f"warm-{rollout_id}", 1)[0])
        raw_fd = os.open(os.path.join(root, f"raw-{rollout_id}"), flags, 0o644)
        serializing_fd = os.open(os.path.join(root, f"raw-ser-{rollout_id}"), flags, 0o644)
        rep_latencies: list[float] = []
        raw: list[float] = []
        serializing = 0.0
        try:
            for start in range(0, size, CHUNK):
                chunk = batch[start : start + CHUNK]
                rep_latencies += await timed_puts(store, chunk)
                raw += raw_chunk(raw_fd, record_lines(chunk))
                serializing += raw_serializing_chunk(serializing_fd, chunk)
        finally:
            os.close(raw_fd)
            os.close(serializing_fd)
        store_totals.append(sum(rep_latencies))
        raw_totals.append(sum(raw))
        serializing_totals.append(serializing)
        latencies.append(rep_latencies)
        raw_latencies.append(raw)
        started = time.perf_counter()
        snapshot = await store.freeze(rollout_id)
        freezes.append(time.perf_counter() - started)
        assert len(snapshot.entries) == size
        fresh = FileTokenStore(root)
        started = time.perf_counter()
        again = await fresh.freeze(rollout_id)
        fresh_freezes.append(time.perf_counter() - started)
        assert again.version == snapshot.version
        await fresh.close()
        log_bytes = os.stat(os.path.join(root, f"raw-{rollout_id}")).st_size
        started = time.perf_counter()
        dropped = await store.drop(
            rollout_id, snapshot_id=snapshot.snapshot_id, version=snapshot.version
        )
        drops.append(time.perf_counter() - started)
        assert dropped
        await store.close()
        for name in (f"raw-{rollout_id}", f"raw-ser-{rollout_id}"):
            os.unlink(os.path.join(root, name))

    for rep in range(repeats):
        asyncio.run(one(rep))
    return PutSeries(
        shape=shape,
        size=size,
        store_total=statistics.median(store_totals),
        raw_total=statistics.median(raw_totals),
        serializing_total=statistics.median(serializing_totals),
        put_latencies=latencies,
        raw_latencies=raw_latencies,
        freeze_same=statistics.median(freezes),
        freeze_fresh=statistics.median(fresh_freezes),
        drop=statistics.median(drops),
        log_bytes=log_bytes,
    )


def section_puts(root: str, scale: Scale) -> list[PutSeries]:
    print("\n## 5. put throughput into one rollout: async put vs raw append + fsync per line")
    print("(raw+ser also serializes each entry first, as any store given a TokenEntry must)")
    print(
        f"{'shape':>6} {'entries':>7} {'repeats':>7} {'put ms/entry':>13} {'raw ms/entry':>13} "
        f"{'raw+ser ms':>11} {'ratio':>6} {'vs raw+ser':>10}  goal >= {PUT_GOAL}x"
    )
    series = []
    for shape in SHAPES:
        for size in scale.sizes if shape == "small" else scale.large_sizes:
            repeats = scale.repeats(size)
            cell = put_series(root, shape, size, repeats)
            series.append(cell)
            print(
                f"{shape:>6} {size:>7} {repeats:>7} {ms(cell.store_total / size):>13} "
                f"{ms(cell.raw_total / size):>13} {ms(cell.serializing_total / size):>11} "
                f"{cell.ratio:6.2f} {cell.serializing_ratio:10.2f}  "
                f"{goal(cell.ratio >= PUT_GOAL)}",
                flush=True,
            )
    return series


def drift(small: list[list[float]], large: list[list[float]]) -> tuple[float, float]:
    """Return the median of every latency in ``small`` and of the last tenth of ``large``."""
    tail = max(10, len(large[0]) // 10)
    early = statistics.median(x for run in small for x in run)
    late = statistics.median(x for run in large for x in run[-tail:])
    return early, late


def section_flat(series: list[PutSeries]) -> None:
    print("\n## 6. per-put latency: the last tenth of the largest rollout vs 10-entry rollouts")
    print("(every repeat pooled; the raw loop's own drift, measured alongside, is the disk's)")
    for shape in SHAPES:
        cells = {cell.size: cell for cell in series if cell.shape == shape}
        largest = max(cells)
        if largest == 10 or 10 not in cells:
            continue
        early, late = drift(cells[10].put_latencies, cells[largest].put_latencies)
        raw_early, raw_late = drift(cells[10].raw_latencies, cells[largest].raw_latencies)
        ratio = late / early
        print(
            f"{shape:>6}: put {ms(early)} ms at 10 entries, {ms(late)} ms late in {largest}: "
            f"ratio {ratio:.2f} (raw loop {raw_late / raw_early:.2f})  "
            f"goal <= {FLAT_GOAL}x {goal(ratio <= FLAT_GOAL)}"
        )


def section_freeze(series: list[PutSeries]) -> None:
    print("\n## 7. freeze and drop latency vs entry count (ms; freeze also per MiB of log read)")
    print(
        f"{'shape':>6} {'entries':>7} {'MiB':>8} {'freeze':>9} {'fresh':>9} {'drop':>9} "
        f"{'freeze/MiB':>10} {'fresh/MiB':>10}"
    )
    for cell in series:
        mib = cell.log_bytes / 2**20
        print(
            f"{cell.shape:>6} {cell.size:>7} {mib:8.2f} {ms(cell.freeze_same)} "
            f"{ms(cell.freeze_fresh)} {ms(cell.drop)} {ms(cell.freeze_same / mib):>10} "
            f"{ms(cell.freeze_fresh / mib):>10}"
        )


def _spawned_store_writer(root: str, rollout_id: str, worker: int, puts: int, go: Any) -> None:
    batch = entries(templates("small"), rollout_id, puts)
    batch = [e.model_copy(update={"model_call_id": f"w{worker}-{e.model_call_id}"}) for e in batch]

    async def write() -> None:
        store = FileTokenStore(root)
        await store.put(entries(templates("small"), f"warm-{rollout_id}-{worker}", 1)[0])
        go.wait()
        for each in batch:
            await store.put(each)
        await store.close()

    asyncio.run(write())


def _spawned_raw_writer(root: str, rollout_id: str, worker: int, puts: int, go: Any) -> None:
    lines = record_lines(entries(templates("small"), f"w{worker}", puts))
    path = os.path.join(root, f"raw-{rollout_id}")
    go.wait()
    raw_append(path, lines)


def spawned_wall(target: Callable[..., None], root: str, shared: bool, puts: int) -> float:
    """Run 4 spawned writers from one barrier; return seconds until the last one is done."""
    context = multiprocessing.get_context("spawn")
    go = context.Barrier(5)
    tag = f"{target.__name__.strip('_')}-{time.monotonic_ns()}"
    processes = [
        context.Process(
            target=target,
            args=(root, f"{tag}-shared" if shared else f"{tag}-{w}", w, puts, go),
        )
        for w in range(4)
    ]
    # Writers build their entries first; the clock starts once all four wait at the barrier.
    elapsed = timed_from_barrier(processes, go)
    if any(process.exitcode != 0 for process in processes):
        raise RuntimeError(f"a spawned writer failed: {[p.exitcode for p in processes]}")
    return elapsed


def section_spawned(root: str, scale: Scale) -> None:
    puts = scale.spawned_puts
    print(f"\n## 8. 4 spawned writers, {puts} small puts each: store vs raw loop run the same way")
    for shared in (False, True):
        store_walls, raw_walls = [], []
        for _ in range(3 if scale is FULL else 1):
            store_walls.append(spawned_wall(_spawned_store_writer, root, shared, puts))
            raw_walls.append(spawned_wall(_spawned_raw_writer, root, shared, puts))
        store, raw = statistics.median(store_walls), statistics.median(raw_walls)
        where = "one rollout (one file)" if shared else "different rollouts (files)"
        print(
            f"{where:>27}: store {4 * puts / store:8.0f} puts/s, raw {4 * puts / raw:8.0f} "
            f"lines/s: ratio {raw / store:.2f}  goal >= {PUT_GOAL}x {goal(raw / store >= PUT_GOAL)}"
        )


def section_hop(root: str, scale: Scale) -> None:
    print("\n## 4. the hop to a worker thread, and where a put's time goes (medians, ms)")

    async def measure() -> dict[str, float]:
        store = FileTokenStore(root)
        await store.put(entries(templates("small"), "hop-warm", 1)[0])
        to_thread, writer = [], []
        for _ in range(scale.hops):
            started = time.perf_counter()
            await asyncio.to_thread(lambda: None)
            to_thread.append(time.perf_counter() - started)
            started = time.perf_counter()
            await store._writer.run(lambda logs: None)
            writer.append(time.perf_counter() - started)
        puts = await timed_puts(store, entries(templates("small"), "hop-puts", scale.hops // 4))
        await store.close()
        return {
            "to_thread": statistics.median(to_thread),
            "writer": statistics.median(writer),
            "put": statistics.median(puts),
        }

    hop = asyncio.run(measure())
    print(
        f"asyncio.to_thread(no-op) {ms(hop['to_thread'])}   store writer thread (no-op job) "
        f"{ms(hop['writer'])}   small put {ms(hop['put'])}   hop share of a small put "
        f"{hop['writer'] / hop['put']:.0%}"
    )
    for shape, count in (("small", scale.hops // 4), ("large", max(10, scale.hops // 40))):
        split = asyncio.run(put_split(root, shape, count))
        c, a, y, p = split["check"], split["append"], split["sync"], split["put"]
        print(
            f"{shape:>6} put {ms(p)} = check and pack {ms(c)} + lock and append {ms(a)} "
            f"+ sync {ms(y)} + hop and wake-ups {ms(p - c - a - y)}   "
            f"(canonical JSON alone: {ms(split['json'])})"
        )
        # The check and the append hold the GIL, so they bound one process whatever the disk
        # does; the hop's wake-ups overlap between rollouts and are left out.
        floor = c + a
        print(
            f"{shape:>6} floor: check, pack and append take {ms(floor)} ms under the GIL, so one "
            f"process stays below {1 / floor:8.0f} puts/s however many rollouts run at once"
        )
        profile_blocking(root, shape, count)


async def put_split(root: str, shape: str, count: int) -> dict[str, float]:
    """Median put latency next to its parts, measured alternately so disk noise hits all alike."""
    store = FileTokenStore(root)
    logs = LogDirectory(root)
    canonical, checked, appended, synced, puts = [], [], [], [], []
    whole = entries(templates(shape), f"split-{shape}-put", count)
    parts = entries(templates(shape), f"split-{shape}-parts", count)
    for each, part in zip(whole, parts, strict=True):
        started = time.perf_counter()
        await store.put(each)
        puts.append(time.perf_counter() - started)
        started = time.perf_counter()
        part.to_json_bytes()
        canonical.append(time.perf_counter() - started)
        started = time.perf_counter()
        payload = check_entry(part)
        checked.append(time.perf_counter() - started)
        started = time.perf_counter()
        _, owed = logs.append_entries(part.rollout_id, [(part.model_call_id, payload)])
        appended.append(time.perf_counter() - started)
        started = time.perf_counter()
        if owed is not None:
            owed.run()
        synced.append(time.perf_counter() - started)
    logs.close()
    await store.close()
    return {
        "json": statistics.median(canonical),
        "check": statistics.median(checked),
        "append": statistics.median(appended),
        "sync": statistics.median(synced),
        "put": statistics.median(puts),
    }


def profile_blocking(root: str, shape: str, count: int) -> None:
    """Print the functions that take most of the check + blocking work of a put."""
    batch = entries(templates(shape), f"profile-{shape}", count)
    logs = LogDirectory(root)
    profiler = cProfile.Profile()
    profiler.enable()
    for each in batch:
        logs.put(each.rollout_id, [(each.model_call_id, check_entry(each))])
    profiler.disable()
    logs.close()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(8)
    body = out.getvalue()
    table = body[body.find("   ncalls") :].rstrip()
    print(f"cProfile of {count} {shape} puts' check + blocking work, by own time:\n{table}")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark the command line asks for and print its tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run with small sizes")
    parser.add_argument("--root", help="directory to write in (default: a temporary one)")
    parser.add_argument(
        "--one-rollout", action="store_true", help="also run the one-rollout series"
    )
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    root = tempfile.mkdtemp(prefix="tokcap-bench-", dir=args.root)
    started = time.monotonic()
    print(
        f"FileTokenStore benchmark ({'quick' if args.quick else 'full'}), writing in {root}; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    try:
        main_sections(root, args.quick)
        section_hop(root, scale)
        if args.one_rollout:
            series = section_puts(root, scale)
            section_flat(series)
            section_freeze(series)
            section_spawned(root, scale)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n({time.monotonic() - started:.0f} s; load average now {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
