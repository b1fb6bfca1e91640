"""A token store written against the contract alone, as a framework author elsewhere would.

It imports nothing of tokcap: its record is its own pydantic model (the shape of NeMo Gym's
``TokenEntry``), its snapshot its own frozen dataclass, and it keeps everything in one sqlite
database in WAL mode with ``synchronous=FULL``, one transaction per operation, so any number
of processes may share it. The kit must pass it with no failure and nothing blocked.

:class:`SqliteStore` has a strict fence and, as Gym's own store does, refuses every write after
freeze, an identical re-put included. :class:`RelaxedSqliteStore` accepts late calls and moves
the version instead. Errors are Gym's kinds: ``ValueError`` for a conflicting re-put,
``RuntimeError`` for a write to a frozen or retired rollout.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import sqlite3
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "MappingEntriesStore",
    "OwnRecordsOnlyStore",
    "Record",
    "RelaxedSqliteStore",
    "Snapshot",
    "SqliteStore",
]


class Record(BaseModel):
    """One model call's tokens; unknown fields are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)

    schema_version: int = 1
    rollout_id: str = Field(min_length=1)
    model_call_id: str = Field(min_length=1)
    model: str = ""
    prompt_token_ids: list[int] = Field(default_factory=list)
    generation_token_ids: list[int] = Field(default_factory=list)
    generation_log_probs: list[float] = Field(default_factory=list)
    routed_experts: list[Any] | None = None
    output_items: list[dict[str, Any]] = Field(default_factory=list)
    token_item_index: int | None = None
    created_at: float = 0.0


@dataclass(frozen=True)
class Snapshot:
    """What one freeze saw."""

    rollout_id: str
    entries: tuple[Record, ...]
    incomplete: bool
    snapshot_id: str
    version: int


_SCHEMA = """
CREATE TABLE IF NOT EXISTS rollouts (
    rollout_id TEXT PRIMARY KEY,
    version INTEGER NOT NULL DEFAULT 0,
    incomplete INTEGER NOT NULL DEFAULT 0,
    frozen INTEGER NOT NULL DEFAULT 0,
    retired INTEGER NOT NULL DEFAULT 0,
    snapshot_id TEXT NOT NULL DEFAULT '',
    snapshot_version INTEGER NOT NULL DEFAULT -1
);
CREATE TABLE IF NOT EXISTS entries (
    rollout_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (rollout_id, call_id)
);
CREATE TABLE IF NOT EXISTS intents (
    rollout_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    PRIMARY KEY (rollout_id, call_id)
);
"""


def as_record(entry: object) -> Record:
    """Read any object that carries the record's fields into a :class:`Record`."""
    if isinstance(entry, Record):
        return entry
    if isinstance(entry, Mapping):
        fields = dict(entry)
    elif callable(getattr(entry, "model_dump", None)):
        fields = entry.model_dump()  # type: ignore[attr-defined]
    elif dataclasses.is_dataclass(entry) and not isinstance(entry, type):
        fields = dataclasses.asdict(entry)
    else:
        raise TypeError(f"put() expects a record, got {type(entry).__qualname__}")
    return Record(**fields)


class SqliteStore:
    """A sink and source over ``root/store.db``; strict fence."""

    relaxed: ClassVar[bool] = False

    def __init__(self, root: str) -> None:
        if not isinstance(root, str) or not root:
            raise TypeError("root must be a non-empty path")
        os.makedirs(root, exist_ok=True)
        self._db = sqlite3.connect(
            os.path.join(root, "store.db"),
            timeout=60.0,
            isolation_level=None,
            check_same_thread=False,
        )
        self._db.execute("PRAGMA busy_timeout = 60000")
        # Switching a new database to WAL answers "database is locked" at once, without
        # waiting, to every process but one that tries it together: set up under a lock.
        with open(os.path.join(root, "store.db.setup-lock"), "a") as setup:
            fcntl.flock(setup, fcntl.LOCK_EX)
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.executescript(_SCHEMA)
        self._db.execute("PRAGMA synchronous = FULL")
        self._closed = False

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _state(self, db: sqlite3.Connection, rollout_id: str) -> dict[str, Any]:
        db.execute("INSERT OR IGNORE INTO rollouts (rollout_id) VALUES (?)", (rollout_id,))
        row = db.execute(
            "SELECT version, incomplete, frozen, retired, snapshot_id, snapshot_version "
            "FROM rollouts WHERE rollout_id = ?",
            (rollout_id,),
        ).fetchone()
        names = ("version", "incomplete", "frozen", "retired", "snapshot_id", "snapshot_version")
        return dict(zip(names, row, strict=True))

    def _set(self, db: sqlite3.Connection, rollout_id: str, **values: Any) -> None:
        assignments = ", ".join(f"{name} = ?" for name in values)
        db.execute(
            f"UPDATE rollouts SET {assignments} WHERE rollout_id = ?",
            (*values.values(), rollout_id),
        )

    @staticmethod
    def encode(record: Record) -> str:
        """The stored form: JSON whose floats keep every bit."""
        return json.dumps(record.model_dump(), sort_keys=True, allow_nan=True)

    @staticmethod
    def decode(payload: str) -> Record:
        return Record(**json.loads(payload))

    def _mark(self, db: sqlite3.Connection, rollout_id: str, state: dict[str, Any]) -> None:
        self._set(db, rollout_id, incomplete=1, version=state["version"] + 1)

    async def put(self, entry: object) -> None:
        record = as_record(entry)
        payload = self.encode(record)
        refusal: Exception | None = None
        with self._transaction() as db:
            state = self._state(db, record.rollout_id)
            if state["retired"]:
                raise RuntimeError(f"rollout {record.rollout_id!r} was already retired")
            row = db.execute(
                "SELECT payload FROM entries WHERE rollout_id = ? AND call_id = ?",
                (record.rollout_id, record.model_call_id),
            ).fetchone()
            if row is not None and row[0] != payload:
                self._mark(db, record.rollout_id, state)
                refusal = ValueError(
                    f"rollout {record.rollout_id!r}: call {record.model_call_id!r} was stored "
                    "with another payload; the rollout is now incomplete"
                )
            elif state["frozen"] and not self.relaxed:
                raise RuntimeError(f"rollout {record.rollout_id!r} is frozen")
            elif row is None:
                db.execute(
                    "INSERT INTO entries (rollout_id, call_id, payload) VALUES (?, ?, ?)",
                    (record.rollout_id, record.model_call_id, payload),
                )
                db.execute(
                    "DELETE FROM intents WHERE rollout_id = ? AND call_id = ?",
                    (record.rollout_id, record.model_call_id),
                )
                self._set(db, record.rollout_id, version=state["version"] + 1)
        if refusal is not None:
            raise refusal

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        with self._transaction() as db:
            state = self._state(db, rollout_id)
            if state["retired"]:
                raise RuntimeError(f"rollout {rollout_id!r} was already retired")
            self._mark(db, rollout_id, state)

    async def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        with self._transaction() as db:
            state = self._state(db, rollout_id)
            if state["retired"]:
                raise RuntimeError(f"rollout {rollout_id!r} was already retired")
            known = db.execute(
                "SELECT 1 FROM entries WHERE rollout_id = ? AND call_id = ? UNION "
                "SELECT 1 FROM intents WHERE rollout_id = ? AND call_id = ?",
                (rollout_id, model_call_id, rollout_id, model_call_id),
            ).fetchone()
            if known is not None:
                return
            if state["frozen"] and not self.relaxed:
                raise RuntimeError(f"rollout {rollout_id!r} is frozen")
            db.execute(
                "INSERT INTO intents (rollout_id, call_id) VALUES (?, ?)",
                (rollout_id, model_call_id),
            )
            self._set(db, rollout_id, version=state["version"] + 1)

    async def freeze(self, rollout_id: str) -> Snapshot:
        with self._transaction() as db:
            state = self._state(db, rollout_id)
            if state["retired"]:
                raise RuntimeError(f"rollout {rollout_id!r} was already retired")
            if not state["snapshot_id"] or state["snapshot_version"] != state["version"]:
                state["snapshot_id"] = uuid.uuid4().hex
                state["snapshot_version"] = state["version"]
            self._set(
                db,
                rollout_id,
                frozen=1,
                snapshot_id=state["snapshot_id"],
                snapshot_version=state["snapshot_version"],
            )
            rows = db.execute(
                "SELECT payload FROM entries WHERE rollout_id = ?", (rollout_id,)
            ).fetchall()
            dangling = db.execute(
                "SELECT COUNT(*) FROM intents WHERE rollout_id = ?", (rollout_id,)
            ).fetchone()[0]
        return Snapshot(
            rollout_id=rollout_id,
            entries=tuple(self.decode(payload) for (payload,) in rows),
            incomplete=bool(state["incomplete"]) or dangling > 0,
            snapshot_id=state["snapshot_id"],
            version=state["version"],
        )

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        with self._transaction() as db:
            state = self._state(db, rollout_id)
            exact = (
                state["frozen"]
                and not state["retired"]
                and state["snapshot_id"] == snapshot_id
                and state["snapshot_version"] == state["version"]
                and type(version) is int
                and state["version"] == version
            )
            if not exact:
                return False
            db.execute("DELETE FROM entries WHERE rollout_id = ?", (rollout_id,))
            db.execute("DELETE FROM intents WHERE rollout_id = ?", (rollout_id,))
            self._set(db, rollout_id, retired=1)
        return True

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._db.close()


class RelaxedSqliteStore(SqliteStore):
    """The same store with a relaxed fence: a late call is kept and moves the version."""

    relaxed: ClassVar[bool] = True


class MappingEntriesStore(SqliteStore):
    """The same store handing snapshot entries back as plain dicts, which the contract allows."""

    async def freeze(self, rollout_id: str) -> Snapshot:
        snapshot = await super().freeze(rollout_id)
        entries: Any = tuple(entry.model_dump() for entry in snapshot.entries)
        return dataclasses.replace(snapshot, entries=entries)


class OwnRecordsOnlyStore(SqliteStore):
    """The same store refusing any entry that is not its own :class:`Record`.

    Judged with ``--tokcap-entry-class=independent:Record``, it proves that every entry the kit
    puts, in this process and in spawned workers, is built with the class the run names.
    """

    async def put(self, entry: object) -> None:
        if type(entry) is not Record:
            raise TypeError(f"put() takes independent.Record, got {type(entry).__qualname__}")
        await super().put(entry)
