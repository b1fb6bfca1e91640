"""A first token store: one sqlite database that is both the sink and the source.

Run the kit on it from this folder (``python -m pytest`` puts the folder on ``sys.path``):

    python -m pytest -p tokcap_pytest --tokcap-sink=mysink:SqliteSink \
        --tokcap-sink-kwargs='{"root": "{tmp_path}"}' --tokcap-fence=strict

Every operation is one sqlite transaction with ``synchronous=FULL``, so a put is durable and
visible to a fresh store when it returns, and several processes may share one ``root``.
Entries are stored as ``entry.to_json_bytes()``: the record's own lossless encoding, which
keeps ``-inf`` and ``-0.0`` bit for bit (plain JSON turns ``-inf`` into ``null``).
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tokcap_spec import TokenCaptureSnapshot, TokenEntry
from tokcap_spec.errors import ConflictingEntryError, RolloutFrozenError, RolloutRetiredError
from tokcap_spec.ids import validate_rollout_id
from tokcap_spec.records import as_token_entry, refusing_invalid

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rollouts (
    rollout_id TEXT PRIMARY KEY, version INTEGER NOT NULL DEFAULT 0,
    incomplete INTEGER NOT NULL DEFAULT 0, frozen INTEGER NOT NULL DEFAULT 0,
    retired INTEGER NOT NULL DEFAULT 0, snapshot_id TEXT NOT NULL DEFAULT '',
    snapshot_version INTEGER NOT NULL DEFAULT -1);
CREATE TABLE IF NOT EXISTS entries (
    rollout_id TEXT NOT NULL, call_id TEXT NOT NULL, payload BLOB NOT NULL,
    PRIMARY KEY (rollout_id, call_id));
"""


class SqliteSink:
    """A sink and source over ``root/tokens.db`` with a strict fence.

    A new call after ``freeze`` raises ``RolloutFrozenError``; any write or freeze after a
    successful ``drop`` raises ``RolloutRetiredError``; a known call id put again with another
    payload marks the rollout incomplete and raises ``ConflictingEntryError``.
    """

    def __init__(self, root: str) -> None:
        os.makedirs(root, exist_ok=True)
        path = os.path.join(root, "tokens.db")
        self._db = sqlite3.connect(path, timeout=60.0, isolation_level=None)
        # Workers that start a new database together must not switch it to WAL at once:
        # sqlite answers all but one "database is locked" without waiting.
        with open(path + ".setup-lock", "a") as setup:
            fcntl.flock(setup, fcntl.LOCK_EX)
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.executescript(_SCHEMA)
        self._db.execute("PRAGMA synchronous = FULL")

    @contextmanager
    def _transaction(self, rollout_id: str) -> Iterator[dict[str, Any]]:
        """Hold the write lock and yield the rollout's state; write back what changed."""
        validate_rollout_id(rollout_id)
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute(
                "INSERT OR IGNORE INTO rollouts (rollout_id) VALUES (?)", (rollout_id,)
            )
            cursor = self._db.execute("SELECT * FROM rollouts WHERE rollout_id = ?", (rollout_id,))
            names = [column[0] for column in cursor.description]
            state = dict(zip(names, cursor.fetchone(), strict=True))
            yield state
            assignments = ", ".join(f"{name} = ?" for name in names[1:])
            values = [state[name] for name in names[1:]]
            self._db.execute(
                f"UPDATE rollouts SET {assignments} WHERE rollout_id = ?", (*values, rollout_id)
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    async def put(self, entry: TokenEntry) -> None:
        with refusing_invalid(entry):
            entry = as_token_entry(entry)
            payload = entry.checked_json_bytes()
        conflict = False
        with self._transaction(entry.rollout_id) as state:
            if state["retired"]:
                raise RolloutRetiredError.for_rollout(entry.rollout_id)
            row = self._db.execute(
                "SELECT payload FROM entries WHERE rollout_id = ? AND call_id = ?",
                (entry.rollout_id, entry.model_call_id),
            ).fetchone()
            if row is not None and bytes(row[0]) == payload:
                return  # an identical re-put is a no-op, frozen or not
            if row is not None:
                conflict = True  # raised after the commit, so the mark is kept
                state["incomplete"] = 1
                state["version"] += 1
            elif state["frozen"]:
                raise RolloutFrozenError.for_call(entry.rollout_id, entry.model_call_id)
            else:
                self._db.execute(
                    "INSERT INTO entries VALUES (?, ?, ?)",
                    (entry.rollout_id, entry.model_call_id, payload),
                )
                state["version"] += 1
        if conflict:
            raise ConflictingEntryError(
                f"rollout {entry.rollout_id!r}: model_call_id {entry.model_call_id!r} was "
                "stored with another payload; the rollout is now marked incomplete"
            )

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        with self._transaction(rollout_id) as state:
            if state["retired"]:
                raise RolloutRetiredError.for_rollout(rollout_id)
            state["incomplete"] = 1
            state["version"] += 1

    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        with self._transaction(rollout_id) as state:
            if state["retired"]:
                raise RolloutRetiredError.for_rollout(rollout_id)
            state["frozen"] = 1
            if state["snapshot_version"] != state["version"]:
                state["snapshot_id"] = uuid.uuid4().hex
                state["snapshot_version"] = state["version"]
            rows = self._db.execute(
                "SELECT payload FROM entries WHERE rollout_id = ?", (rollout_id,)
            ).fetchall()
        return TokenCaptureSnapshot(
            rollout_id=rollout_id,
            entries=tuple(TokenEntry.from_json_bytes(bytes(payload)) for (payload,) in rows),
            incomplete=bool(state["incomplete"]),
            snapshot_id=state["snapshot_id"],
            version=state["version"],
        )

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        with self._transaction(rollout_id) as state:
            exact = (
                state["frozen"]
                and not state["retired"]
                and state["snapshot_id"] == snapshot_id
                and state["snapshot_version"] == state["version"]
                and type(version) is int
                and state["version"] == version
            )
            if exact:
                self._db.execute("DELETE FROM entries WHERE rollout_id = ?", (rollout_id,))
                state["retired"] = 1
        return bool(exact)

    async def close(self) -> None:
        self._db.close()  # closing a closed sqlite connection is a no-op
