"""SPAWN mutants: stores that only work in the launcher process, alone, or for themselves."""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import multiprocessing
import os
import struct
from collections.abc import Iterator
from typing import IO, ClassVar

from base import BaseStore, RolloutFileState

from tokcap_spec.protocols import installed_token_sink
from tokcap_spec.records import TokenEntry


class NeedsLauncherInstall(BaseStore):
    """SPAWN-1: the constructor needs the sink the launcher installed in its own process.

    The class reuses the connection of ``installed_token_sink()``. The launcher (here the
    ``zoo_launcher`` pytest plugin) installs one, so everything works in its process, but a
    spawned worker inherits nothing and cannot build the sink.
    """

    breaks: ClassVar[str] = "SPAWN-1"
    flags: ClassVar[tuple[str, ...]] = ("-p", "zoo_launcher")

    def __init__(self, root: str) -> None:
        if installed_token_sink() is None:
            raise RuntimeError(
                "no token sink is installed in this process; call install_token_sink() at launch"
            )
        super().__init__(root)


class OwnerProcessOnly(BaseStore):
    """SPAWN-1: the first process to open the directory owns it; every other process is refused.

    A fork-safety guard records the owner's pid in the store and refuses to open from any
    other pid, which also refuses every freshly spawned worker.
    """

    breaks: ClassVar[str] = "SPAWN-1"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        owner = os.path.join(self.root, "owner.pid")
        try:
            descriptor = os.open(owner, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            with open(owner, encoding="ascii") as handle:
                pid = int(handle.read() or 0)
            if pid != os.getpid():
                raise RuntimeError(f"store is owned by process {pid}, not {os.getpid()}") from None
        else:
            with os.fdopen(descriptor, "w", encoding="ascii") as handle:
                handle.write(str(os.getpid()))


class LauncherCreatesLayout(BaseStore):
    """SPAWN-1: only the launching process creates the store's folders; workers expect them.

    Setting a store up was kept to the main process so that workers never race to create it;
    a worker that is the first to build on a new root finds no folders and cannot write.
    """

    breaks: ClassVar[str] = "SPAWN-1"
    also: ClassVar[tuple[str, ...]] = ("SPAWN-2",)

    def __init__(self, root: str) -> None:
        if multiprocessing.parent_process() is None:
            super().__init__(root)
            return
        if not os.path.isdir(os.path.join(root, "rollouts")):
            raise RuntimeError(f"store at {root!r} is not set up: build it in the launcher first")
        super().__init__(root)


_OPEN: dict[str, tuple[IO[str], int]] = {}


class ExclusiveOpen(BaseStore):
    """SPAWN-2: an open store holds a non-blocking exclusive lock on its directory until close.

    Single-writer embedded databases take such a lock. Instances in one process share it, and
    workers that open the store one after another succeed, but workers that open it at the
    same moment fail with "resource temporarily unavailable".
    """

    breaks: ClassVar[str] = "SPAWN-2"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        held = _OPEN.get(self.root)
        if held is None:
            handle = open(os.path.join(self.root, "open.lock"), "a")  # noqa: SIM115
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                raise RuntimeError(f"store {self.root} is open in another process") from None
            held = (handle, 0)
        _OPEN[self.root] = (held[0], held[1] + 1)

    async def close(self) -> None:
        if not self.closed:
            handle, count = _OPEN[self.root]
            if count == 1:
                del _OPEN[self.root]
                handle.close()
            else:
                _OPEN[self.root] = (handle, count - 1)
        await super().close()


class UnguardedMigration(BaseStore):
    """SPAWN-2: a new store's shard folders are laid out by whichever builder finds none.

    The layout step looks for the format file it writes last and, finding none, creates the
    folders, without a lock and without tolerating ones that exist: workers that build on a
    brand-new store at the same moment all find none, and all but one fail on a folder another
    just created.
    """

    breaks: ClassVar[str] = "SPAWN-2"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        shards = os.path.join(self.root, "shards")
        laid_out = os.path.join(shards, "FORMAT")
        if not os.path.exists(laid_out):
            os.makedirs(shards, exist_ok=True)
            for number in range(256):
                os.mkdir(os.path.join(shards, f"{number:02x}"))
            with open(laid_out, "w", encoding="ascii") as handle:
                handle.write("1\n")


_RECORDS: dict[str, str] = {}


class ProcessMemoryRecords(BaseStore):
    """SPAWN-3: rollout state lives in a module-level dict.

    Every instance in one process shares it, so a single-process test suite passes, but what
    a spawned worker acks stays in the worker.
    """

    breaks: ClassVar[str] = "SPAWN-3"

    def load(self, rollout_id: str) -> RolloutFileState:
        stored = _RECORDS.get(self.state_path(rollout_id))
        return RolloutFileState() if stored is None else RolloutFileState(**json.loads(stored))

    def save(self, rollout_id: str, state: RolloutFileState) -> None:
        if state.deleted:
            _RECORDS.pop(self.state_path(rollout_id), None)
        else:
            _RECORDS[self.state_path(rollout_id)] = json.dumps(state.__dict__)


class PidShards(BaseStore):
    """SPAWN-3: each process writes and reads its own shard directory, named by its pid.

    Sharding by writer avoids lock contention, but the reader only looks at its own shard, so
    entries acked by other processes are never frozen.
    """

    breaks: ClassVar[str] = "SPAWN-3"

    def state_path(self, rollout_id: str) -> str:
        shard = os.path.join(self.root, "rollouts", str(os.getpid()))
        os.makedirs(shard, exist_ok=True)
        return os.path.join(shard, self.key(rollout_id) + ".json")


class FlushesWhenClosed(BaseStore):
    """PUT-1: each process keeps its changes in memory and writes them out on close.

    Every instance in the process reads through the same write-behind cache, so a single
    process sees its acks at once; a worker's acks reach other processes only when it closes
    its sink, which a model server does at shutdown. The ack came before the record was where
    every process reads it.
    """

    breaks: ClassVar[str] = "PUT-1"

    def load(self, rollout_id: str) -> RolloutFileState:
        pending = _PENDING.get(self.state_path(rollout_id))
        return super().load(rollout_id) if pending is None else RolloutFileState(**pending)

    def save(self, rollout_id: str, state: RolloutFileState) -> None:
        _PENDING[self.state_path(rollout_id)] = dict(state.__dict__)

    async def close(self) -> None:
        for path, pending in list(_PENDING.items()):
            if path.startswith(self.root + os.sep):
                rollout_id = os.path.basename(path).removesuffix(".json")
                super().save(rollout_id, RolloutFileState(**pending))
                del _PENDING[path]
        await super().close()


_PENDING: dict[str, dict[str, object]] = {}


class UnlockedWrites(BaseStore):
    """SPAWN-4: each write is a read-modify-write of the rollout file without a lock.

    The atomic rename keeps every file whole, so one writer at a time never notices; but
    workers writing one rollout at the same moment overwrite each other's acked entries.
    """

    breaks: ClassVar[str] = "SPAWN-4"
    also: ClassVar[tuple[str, ...]] = ("FREEZE-5",)

    @contextlib.contextmanager
    def locked(self, rollout_id: str) -> Iterator[None]:
        yield


_EXACT: dict[str, str] = {}
"""What this process wrote, exactly, by what it stored on disk."""


class Float32OnDisk(BaseStore):
    """SPAWN-3: log probs are stored as float32, and the writing process keeps the exact ones.

    Halving the log probs' size on disk looked free: every freeze in the process that put the
    entry finds the exact copy it kept. Entries other processes put come back rounded.
    """

    breaks: ClassVar[str] = "SPAWN-3"

    def encode(self, entry: TokenEntry) -> str:
        exact = super().encode(entry)
        probs = [_float32(value) for value in entry.generation_log_probs]
        stored = super().encode(entry.model_copy(update={"generation_log_probs": probs}))
        _EXACT[stored] = exact
        return stored

    def decode(self, stored: str) -> TokenEntry:
        return super().decode(_EXACT.get(stored, stored))


def _float32(value: float) -> float:
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)
