"""The promises of reference.file_store.FileTokenStore, through its public coroutines."""

from __future__ import annotations

import asyncio
import fcntl
import math
import multiprocessing
import os
import struct
import tempfile
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference._file_log import log_name
from reference.file_store import FileTokenStore
from tokcap_spec.errors import (
    ConflictingEntryError,
    CorruptStoreError,
    InvalidRolloutIdError,
    RolloutFrozenError,
    RolloutRetiredError,
)
from tokcap_spec.protocols import (
    CallIntentSink,
    RetiringSource,
    TokenCaptureSnapshot,
    TokenSink,
    TokenSource,
    protocol_problems,
)
from tokcap_spec.records import MAX_TOKEN_ID, TokenEntry

T = TypeVar("T")

ODD_CALL_IDS = ["a\nb", "a/b", "a\\b", ' "quoted" ', "🚀 ünï", "\x00nul", "x" * 500, "{}\n}"]
BAD_ROLLOUT_IDS = [".", "..", "a/b", "", "x" * 201, "-lead", "a b", "../etc"]


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def entry(rollout_id: str, call: str, *, seed: int = 0, **extra: Any) -> TokenEntry:
    return TokenEntry(
        rollout_id=rollout_id,
        model_call_id=call,
        model="m",
        prompt_token_ids=[seed, 1, 2],
        generation_token_ids=[3, seed],
        generation_log_probs=[float("-inf"), -0.0],
        created_at=1.5,
        **extra,
    )


def payloads(snapshot: TokenCaptureSnapshot) -> dict[str, bytes]:
    return {e.model_call_id: e.to_json_bytes() for e in snapshot.entries}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: Path) -> Iterator[FileTokenStore]:
    opened = FileTokenStore(root)
    yield opened
    run(opened.close())


def fresh_freeze(root: Path, rollout_id: str) -> TokenCaptureSnapshot:
    async def freeze() -> TokenCaptureSnapshot:
        other = FileTokenStore(root)
        try:
            return await other.freeze(rollout_id)
        finally:
            await other.close()

    return run(freeze())


class TestConstruction:
    def test_satisfies_every_protocol(self, store: FileTokenStore) -> None:
        """The store is a sink, a source, a call-intent sink and a retiring source at once."""
        for protocol in (TokenSink, TokenSource, CallIntentSink, RetiringSource):
            assert protocol_problems(store, protocol) == []

    def test_creates_missing_root(self, tmp_path: Path) -> None:
        """Construction creates the root directory and its missing parents."""
        FileTokenStore(tmp_path / "a" / "b")
        assert (tmp_path / "a" / "b").is_dir()

    def test_resolves_a_relative_root(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A relative root is fixed at construction, whatever the working directory becomes."""
        monkeypatch.chdir(tmp_path)
        store = FileTokenStore("rel")
        assert store.root == str(tmp_path / "rel")

    def test_refuses_a_root_that_is_not_a_path(self) -> None:
        """A root that is neither a str nor a path is refused, naming the type seen."""
        with pytest.raises(TypeError, match="got int"):
            FileTokenStore(3)  # type: ignore[arg-type]


class TestPut:
    def test_an_acked_put_is_visible_to_a_fresh_instance(
        self, store: FileTokenStore, root: Path
    ) -> None:
        """A fresh instance's freeze holds every entry whose put returned."""
        entries = [entry("r", f"c{i}", seed=i) for i in range(3)]
        for each in entries:
            run(store.put(each))
        snapshot = fresh_freeze(root, "r")
        assert payloads(snapshot) == {e.model_call_id: e.to_json_bytes() for e in entries}
        assert not snapshot.incomplete

    def test_an_identical_reput_is_a_no_op(self, store: FileTokenStore) -> None:
        """Re-putting the same bytes keeps one clean entry and the same version."""
        run(store.put(entry("r", "c")))
        first = run(store.freeze("r"))
        run(store.put(entry("r", "c")))
        second = run(store.freeze("r"))
        assert second == first
        assert len(second.entries) == 1

    def test_an_identical_reput_before_freeze_leaves_the_version(
        self, store: FileTokenStore
    ) -> None:
        """An identical re-put before freeze does not bump the version."""
        run(store.put(entry("r", "c")))
        run(store.put(entry("r", "c")))
        run(store.put(entry("r", "c2")))
        assert run(store.freeze("r")).version == 2

    @pytest.mark.parametrize("frozen_first", [False, True], ids=["open", "frozen"])
    def test_a_conflicting_reput_raises_and_marks_durably(
        self, store: FileTokenStore, root: Path, frozen_first: bool
    ) -> None:
        """Reusing a call id with other bytes raises and leaves the rollout incomplete."""
        original = entry("r", "c", seed=1)
        run(store.put(original))
        if frozen_first:
            run(store.freeze("r"))
        with pytest.raises(ConflictingEntryError, match="'c'"):
            run(store.put(entry("r", "c", seed=2)))
        snapshot = fresh_freeze(root, "r")
        assert snapshot.incomplete
        assert payloads(snapshot) == {"c": original.to_json_bytes()}

    def test_a_new_call_after_freeze_raises(self, store: FileTokenStore) -> None:
        """A put of a new call into a frozen rollout raises and changes nothing."""
        run(store.put(entry("r", "c")))
        before = run(store.freeze("r"))
        with pytest.raises(RolloutFrozenError, match="'late'"):
            run(store.put(entry("r", "late")))
        assert run(store.freeze("r")) == before

    def test_a_put_after_drop_raises(self, store: FileTokenStore) -> None:
        """A put into a dropped rollout raises RolloutRetiredError."""
        run(store.put(entry("r", "c")))
        snapshot = run(store.freeze("r"))
        assert run(store.drop("r", snapshot_id=snapshot.snapshot_id, version=snapshot.version))
        with pytest.raises(RolloutRetiredError):
            run(store.put(entry("r", "c")))

    def test_rollouts_are_isolated(self, store: FileTokenStore) -> None:
        """Ids differing only by case or punctuation never share entries, marks or versions."""
        ids = ["Run.1", "run.1", "run_1", "run-1", "RUN.1"]
        for index, rollout_id in enumerate(ids):
            for call in range(index + 1):
                run(store.put(entry(rollout_id, f"c{call}")))
        run(store.mark_incomplete("run.1"))
        for index, rollout_id in enumerate(ids):
            snapshot = run(store.freeze(rollout_id))
            assert sorted(payloads(snapshot)) == [f"c{call}" for call in range(index + 1)]
            assert {e.rollout_id for e in snapshot.entries} == {rollout_id}
            assert snapshot.incomplete == (rollout_id == "run.1")

    @pytest.mark.parametrize("call", ODD_CALL_IDS)
    def test_any_call_id_works(self, store: FileTokenStore, call: str) -> None:
        """Call ids with newlines, slashes, quotes, NULs and unicode round-trip."""
        run(store.put(entry("r", call)))
        assert payloads(run(store.freeze("r"))) == {call: entry("r", call).to_json_bytes()}

    def test_refuses_what_is_not_an_entry(self, store: FileTokenStore) -> None:
        """A put of anything but a TokenEntry is refused, naming the type seen."""
        with pytest.raises(TypeError, match="got dict"):
            run(store.put({"rollout_id": "r"}))  # type: ignore[arg-type]

    def test_puts_from_many_threads_all_land(self, store: FileTokenStore) -> None:
        """Concurrent puts from several threads, each with its own loop, lose nothing."""

        def write(worker: int) -> None:
            async def puts() -> None:
                await asyncio.gather(
                    *(store.put(entry("r", f"w{worker}-{i}")) for i in range(20)),
                    *(store.put(entry(f"own-{worker}", f"c{i}")) for i in range(5)),
                )

            run(puts())

        threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(run(store.freeze("r")).entries) == 80
        for worker in range(4):
            assert len(run(store.freeze(f"own-{worker}")).entries) == 5

    def test_instances_in_one_process_exclude_each_other(self, root: Path) -> None:
        """Several instances writing one rollout at once from one loop lose nothing."""
        stores = [FileTokenStore(root) for _ in range(4)]

        async def scenario() -> TokenCaptureSnapshot:
            await asyncio.gather(
                *(
                    store.put(entry("r", f"s{index}-{call}"))
                    for call in range(15)
                    for index, store in enumerate(stores)
                )
            )
            snapshot = await stores[0].freeze("r")
            for store in stores:
                await store.close()
            return snapshot

        snapshot = run(scenario())
        assert len(snapshot.entries) == 60
        assert snapshot.version == 60

    def test_batched_puts_keep_each_outcome(self, store: FileTokenStore) -> None:
        """Puts queued together are each acked or refused as if they ran one by one."""

        async def burst() -> list[BaseException | None]:
            return await asyncio.gather(
                store.put(entry("r", "a", seed=1)),
                store.put(entry("r", "a", seed=1)),
                store.put(entry("r", "a", seed=2)),
                store.put(entry("r", "b")),
                return_exceptions=True,
            )

        outcomes = run(burst())
        assert outcomes[:2] == [None, None]
        assert isinstance(outcomes[2], ConflictingEntryError)
        assert outcomes[3] is None
        snapshot = run(store.freeze("r"))
        assert sorted(payloads(snapshot)) == ["a", "b"]
        assert snapshot.entry_for("a") == entry("r", "a", seed=1)
        assert snapshot.incomplete

    def test_waits_for_the_lock_without_blocking_the_loop(
        self, store: FileTokenStore, root: Path
    ) -> None:
        """While another holder has the rollout locked, the event loop keeps running."""
        run(store.put(entry("r", "c")))
        fd = os.open(root / log_name("r"), os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        # If put blocked the loop, the timer would let it finish before the loop could tick.
        release = threading.Timer(5.0, fcntl.flock, (fd, fcntl.LOCK_UN))
        release.start()
        try:

            async def scenario() -> bool:
                pending = asyncio.ensure_future(store.put(entry("r", "d")))
                for _ in range(5):
                    await asyncio.sleep(0)
                finished_while_locked = pending.done()
                fcntl.flock(fd, fcntl.LOCK_UN)
                await pending
                return finished_while_locked

            assert run(scenario()) is False
        finally:
            release.cancel()
            os.close(fd)
        assert sorted(payloads(run(store.freeze("r")))) == ["c", "d"]


class TestMarkIncomplete:
    def test_a_mark_is_visible_to_a_fresh_instance(self, store: FileTokenStore, root: Path) -> None:
        """A fresh instance's freeze reports a marked rollout incomplete."""
        run(store.put(entry("r", "c")))
        run(store.mark_incomplete("r", "c"))
        assert fresh_freeze(root, "r").incomplete

    def test_a_mark_is_sticky(self, store: FileTokenStore) -> None:
        """No later put, freeze or re-mark clears a mark."""
        run(store.mark_incomplete("r"))
        run(store.put(entry("r", "c")))
        assert run(store.freeze("r")).incomplete
        run(store.mark_incomplete("r"))
        assert run(store.freeze("r")).incomplete

    def test_a_mark_after_freeze_changes_the_version(self, store: FileTokenStore) -> None:
        """A mark after freeze changes the version, so the earlier snapshot cannot be dropped."""
        run(store.put(entry("r", "c")))
        before = run(store.freeze("r"))
        run(store.mark_incomplete("r", "c"))
        after = run(store.freeze("r"))
        assert after.incomplete
        assert after.version != before.version
        assert after.snapshot_id != before.snapshot_id
        assert not run(store.drop("r", snapshot_id=before.snapshot_id, version=before.version))
        assert run(store.drop("r", snapshot_id=after.snapshot_id, version=after.version))

    @pytest.mark.parametrize("call", ["", *ODD_CALL_IDS])
    def test_any_call_id_marks(self, store: FileTokenStore, call: str) -> None:
        """Marking works with any call id, the empty one included."""
        run(store.mark_incomplete("r", call))
        assert run(store.freeze("r")).incomplete

    def test_a_masked_rollout_keeps_its_evidence(self, store: FileTokenStore) -> None:
        """Freezing a masked rollout again returns the same entries."""
        run(store.put(entry("r", "c")))
        run(store.mark_incomplete("r"))
        first = run(store.freeze("r"))
        assert run(store.freeze("r")) == first
        assert payloads(first) == {"c": entry("r", "c").to_json_bytes()}

    def test_a_mark_after_retire_raises(self, store: FileTokenStore) -> None:
        """Marking a retired rollout raises RolloutRetiredError."""
        run(store.retire(["r"]))
        with pytest.raises(RolloutRetiredError):
            run(store.mark_incomplete("r"))

    def test_refuses_a_call_id_that_is_not_a_string(self, store: FileTokenStore) -> None:
        """A non-string call id is refused, naming the type seen."""
        with pytest.raises(TypeError, match="got int"):
            run(store.mark_incomplete("r", 3))  # type: ignore[arg-type]


class TestBeginCall:
    @pytest.mark.parametrize("call", ["plain", *ODD_CALL_IDS])
    def test_a_dangling_intent_makes_the_freeze_incomplete(
        self, store: FileTokenStore, root: Path, call: str
    ) -> None:
        """An intent with no entry at freeze makes the snapshot incomplete, for any call id."""
        run(store.begin_call("r", call))
        assert fresh_freeze(root, "r").incomplete

    @pytest.mark.parametrize("call", ["plain", *ODD_CALL_IDS])
    def test_a_matched_intent_leaves_the_freeze_clean(
        self, store: FileTokenStore, call: str
    ) -> None:
        """An intent followed by its entry leaves the snapshot clean, for any call id."""
        run(store.begin_call("r", call))
        run(store.put(entry("r", call)))
        snapshot = run(store.freeze("r"))
        assert not snapshot.incomplete
        assert list(payloads(snapshot)) == [call]

    def test_re_announcing_is_a_no_op(self, store: FileTokenStore) -> None:
        """Announcing a known call again changes nothing, before or after freeze."""
        run(store.begin_call("r", "c"))
        run(store.begin_call("r", "c"))
        run(store.put(entry("r", "c")))
        run(store.begin_call("r", "c"))
        before = run(store.freeze("r"))
        run(store.begin_call("r", "c"))
        assert run(store.freeze("r")) == before
        assert before.version == 2

    def test_a_new_intent_after_freeze_raises(self, store: FileTokenStore) -> None:
        """Announcing a new call in a frozen rollout raises RolloutFrozenError."""
        run(store.freeze("r"))
        with pytest.raises(RolloutFrozenError):
            run(store.begin_call("r", "c"))

    def test_an_intent_after_retire_raises(self, store: FileTokenStore) -> None:
        """Announcing a call in a retired rollout raises RolloutRetiredError."""
        run(store.retire(["r"]))
        with pytest.raises(RolloutRetiredError):
            run(store.begin_call("r", "c"))

    def test_refuses_an_empty_call_id(self, store: FileTokenStore) -> None:
        """An empty call id cannot be announced."""
        with pytest.raises(ValueError, match="empty"):
            run(store.begin_call("r", ""))


class TestFreeze:
    def test_a_rollout_never_written_freezes_empty_and_fenced(self, store: FileTokenStore) -> None:
        """Freezing an unknown rollout returns an empty clean snapshot and fences it."""
        snapshot = run(store.freeze("r"))
        assert (snapshot.rollout_id, snapshot.entries, snapshot.incomplete) == ("r", (), False)
        assert snapshot.snapshot_id
        assert isinstance(snapshot.version, int)
        with pytest.raises(RolloutFrozenError):
            run(store.put(entry("r", "c")))

    def test_every_instance_agrees_on_the_snapshot(self, store: FileTokenStore, root: Path) -> None:
        """Repeated freezes from any instance return the same id, version and entries."""
        run(store.put(entry("r", "c")))
        first = run(store.freeze("r"))
        assert run(store.freeze("r")) == first
        assert fresh_freeze(root, "r") == first

    def test_a_snapshot_never_changes_after_it_is_returned(self, store: FileTokenStore) -> None:
        """Mutating a returned entry leaves later snapshots untouched."""
        run(store.put(entry("r", "c")))
        first = run(store.freeze("r"))
        first.entries[0].prompt_token_ids.append(7)
        second = run(store.freeze("r"))
        assert second.entries[0] is not first.entries[0]
        assert second.entries[0] == entry("r", "c")

    def test_a_retired_rollout_cannot_be_frozen(self, store: FileTokenStore) -> None:
        """Freezing a retired rollout raises RolloutRetiredError."""
        run(store.retire(["r"]))
        with pytest.raises(RolloutRetiredError):
            run(store.freeze("r"))


class TestDrop:
    def test_the_exact_snapshot_drops_and_fences(self, store: FileTokenStore, root: Path) -> None:
        """Drop with the current snapshot succeeds, removes the entries and fences the id."""
        run(store.put(entry("r", "secret-call")))
        snapshot = run(store.freeze("r"))
        assert run(store.drop("r", snapshot_id=snapshot.snapshot_id, version=snapshot.version))
        assert b"secret-call" not in (root / log_name("r")).read_bytes()
        with pytest.raises(RolloutRetiredError):
            fresh_freeze(root, "r")

    @pytest.mark.parametrize(
        ("id_change", "version_change"),
        [("-wrong", 0), ("", 1), ("", -1), ("", 1000), ("", True)],
        ids=["wrong-id", "version+1", "version-1", "version+1000", "bool-version"],
    )
    def test_a_mismatched_drop_refuses_and_destroys_nothing(
        self, store: FileTokenStore, id_change: str, version_change: int
    ) -> None:
        """A wrong snapshot id or any other version returns False and keeps the evidence."""
        run(store.put(entry("r", "c")))
        snapshot = run(store.freeze("r"))
        version: Any = True if version_change is True else snapshot.version + version_change
        assert not run(
            store.drop("r", snapshot_id=snapshot.snapshot_id + id_change, version=version)
        )
        assert run(store.freeze("r")) == snapshot

    def test_an_unfrozen_rollout_is_not_dropped(self, store: FileTokenStore) -> None:
        """Drop of a rollout never frozen returns False and leaves it writable."""
        run(store.put(entry("r", "c")))
        assert not run(store.drop("r", snapshot_id="x-1", version=1))
        run(store.put(entry("r", "d")))
        assert len(run(store.freeze("r")).entries) == 2

    def test_an_unknown_rollout_is_not_dropped(self, store: FileTokenStore, root: Path) -> None:
        """Drop of an unknown rollout returns False and creates nothing."""
        assert not run(store.drop("nobody", snapshot_id="x-0", version=0))
        assert not (root / log_name("nobody")).exists()

    def test_a_second_drop_returns_false(self, store: FileTokenStore) -> None:
        """Dropping an already dropped rollout returns False."""
        snapshot = run(store.freeze("r"))
        arguments = {"snapshot_id": snapshot.snapshot_id, "version": snapshot.version}
        assert run(store.drop("r", **arguments))
        assert not run(store.drop("r", **arguments))

    def test_a_snapshot_of_a_deleted_id_never_drops_its_successor(
        self, store: FileTokenStore
    ) -> None:
        """After delete and reuse, the old snapshot no longer names the rollout."""
        run(store.put(entry("r", "c")))
        old = run(store.freeze("r"))
        run(store.delete(["r"]))
        run(store.put(entry("r", "c")))
        new = run(store.freeze("r"))
        assert new.version == old.version
        assert new.snapshot_id != old.snapshot_id
        assert not run(store.drop("r", snapshot_id=old.snapshot_id, version=old.version))


class TestRetireAndDelete:
    def test_retire_fences_whatever_the_state(self, store: FileTokenStore) -> None:
        """Retire removes and fences unknown, open and frozen rollouts alike."""
        run(store.put(entry("open", "c")))
        run(store.put(entry("frozen", "c")))
        run(store.freeze("frozen"))
        ids = ["unknown", "open", "frozen"]
        run(store.retire(ids))
        run(store.retire(ids))
        for rollout_id in ids:
            with pytest.raises(RolloutRetiredError):
                run(store.put(entry(rollout_id, "c")))

    def test_delete_frees_the_id(self, store: FileTokenStore) -> None:
        """After delete, an id starts again from nothing."""
        run(store.put(entry("r", "c")))
        run(store.mark_incomplete("r"))
        run(store.retire(["r"]))
        run(store.delete(["r", "never-seen"]))
        run(store.put(entry("r", "other")))
        snapshot = run(store.freeze("r"))
        assert list(payloads(snapshot)) == ["other"]
        assert not snapshot.incomplete

    @pytest.mark.parametrize("method", ["retire", "delete"])
    def test_refuses_a_single_string(self, store: FileTokenStore, method: str) -> None:
        """A bare string is refused instead of being read as one id per character."""
        with pytest.raises(TypeError, match="iterable of rollout ids"):
            run(getattr(store, method)("abc"))

    @pytest.mark.parametrize("method", ["retire", "delete"])
    def test_validates_every_id_before_touching_any(
        self, store: FileTokenStore, method: str
    ) -> None:
        """One bad id refuses the whole batch and leaves the good ids alone."""
        run(store.put(entry("good", "c")))
        with pytest.raises(InvalidRolloutIdError):
            run(getattr(store, method)(["good", "../bad"]))
        assert len(run(store.freeze("good")).entries) == 1


class TestSweepTombstones:
    def test_keeps_young_tombstones(self, store: FileTokenStore) -> None:
        """A tombstone younger than the limit is kept and still fences."""
        run(store.retire(["r"]))
        assert run(store.sweep_tombstones(3600.0)) == 0
        with pytest.raises(RolloutRetiredError):
            run(store.put(entry("r", "c")))

    @pytest.mark.parametrize("limit", [-1.0, math.nan, math.inf])
    def test_refuses_a_meaningless_age(self, store: FileTokenStore, limit: float) -> None:
        """A negative or non-finite age is refused, naming the value."""
        with pytest.raises(ValueError, match="older_than_seconds"):
            run(store.sweep_tombstones(limit))


class TestClose:
    def test_close_is_idempotent_and_loses_nothing(self, store: FileTokenStore, root: Path) -> None:
        """Closing twice raises nothing and every ack stays visible."""
        run(store.put(entry("r", "c")))
        run(store.mark_incomplete("r"))
        run(store.close())
        run(store.close())
        snapshot = fresh_freeze(root, "r")
        assert list(payloads(snapshot)) == ["c"]
        assert snapshot.incomplete

    def test_a_closed_store_is_usable_again(self, store: FileTokenStore) -> None:
        """A call after close reopens the store."""
        run(store.close())
        run(store.put(entry("r", "c")))
        assert len(run(store.freeze("r")).entries) == 1

    def test_an_unused_store_closes(self, root: Path) -> None:
        """Closing a store that never did anything raises nothing."""
        run(FileTokenStore(root).close())


CALLS = [
    # model_construct skips validation, as a sink receiving foreign entries must not rely on it.
    ("put", lambda s, r: s.put(TokenEntry.model_construct(rollout_id=r, model_call_id="c"))),
    ("mark_incomplete", lambda s, r: s.mark_incomplete(r)),
    ("begin_call", lambda s, r: s.begin_call(r, "c")),
    ("freeze", lambda s, r: s.freeze(r)),
    ("drop", lambda s, r: s.drop(r, snapshot_id="x", version=0)),
    ("retire", lambda s, r: s.retire([r])),
    ("delete", lambda s, r: s.delete([r])),
]


class TestRolloutIds:
    @pytest.mark.parametrize("bad", BAD_ROLLOUT_IDS)
    @pytest.mark.parametrize(("name", "call"), CALLS, ids=[name for name, _ in CALLS])
    def test_every_method_refuses_a_bad_id(
        self, store: FileTokenStore, root: Path, name: str, call: Any, bad: str
    ) -> None:
        """Every method refuses an unsafe rollout id and writes nothing."""
        with pytest.raises(InvalidRolloutIdError):
            run(call(store, bad))
        assert not any(root.iterdir())

    def test_the_longest_valid_id_works(self, store: FileTokenStore) -> None:
        """A 200-character id is stored like any other."""
        rollout_id = "a" * 200
        run(store.put(entry(rollout_id, "c")))
        snapshot = run(store.freeze(rollout_id))
        assert run(store.drop(rollout_id, snapshot_id=snapshot.snapshot_id, version=1))


class TestCrashSafety:
    def test_a_torn_final_line_is_cut_off(self, store: FileTokenStore, root: Path) -> None:
        """A partial last line left by a crash is ignored and later writes follow it cleanly."""
        run(store.put(entry("r", "c")))
        log = root / log_name("r")
        whole = log.read_bytes()
        with log.open("ab") as handle:
            handle.write(b'{"kind":"entry","entry":{"model_call_id":"torn"')
        run(store.put(entry("r", "d")))
        assert sorted(payloads(fresh_freeze(root, "r"))) == ["c", "d"]
        assert log.read_bytes().startswith(whole)
        assert b"torn" not in log.read_bytes()

    def test_damage_before_the_tail_names_file_and_line(
        self, store: FileTokenStore, root: Path
    ) -> None:
        """A damaged line followed by good ones raises CorruptStoreError naming both."""
        for call in ("a", "b", "c"):
            run(store.put(entry("r", call)))
        log = root / log_name("r")
        damaged = bytearray(log.read_bytes())
        at = damaged.index(b'"call":"b"')
        damaged[at : at + 9] = b"\xff garbage"
        log.write_bytes(bytes(damaged))
        with pytest.raises(CorruptStoreError, match=rf"{log_name('r')}: line 3 "):
            fresh_freeze(root, "r")

    def test_a_planted_symlink_is_never_followed(self, store: FileTokenStore, root: Path) -> None:
        """A symlink at a rollout's log name is refused and its target left untouched."""
        target = root.parent / "outside"
        target.write_bytes(b"precious\n")
        root.mkdir(exist_ok=True)
        (root / log_name("r")).symlink_to(target)
        with pytest.raises(CorruptStoreError, match="symlink"):
            run(store.put(entry("r", "c")))
        with pytest.raises(CorruptStoreError, match="symlink"):
            run(store.retire(["r"]))
        assert target.read_bytes() == b"precious\n"


log_probs = st.one_of(
    st.sampled_from([float("-inf"), -0.0, 0.0, -5e-324]),
    st.floats(max_value=0.0, allow_nan=False, allow_infinity=False),
)
json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**60), 2**60), st.text(max_size=10), log_probs
)
call_ids = st.one_of(st.text(min_size=1, max_size=30), st.sampled_from(ODD_CALL_IDS))


@st.composite
def entries(draw: st.DrawFn, rollout_id: str) -> TokenEntry:
    size = draw(st.integers(0, 5))
    extra = draw(
        st.dictionaries(
            st.text(min_size=1, max_size=8).filter(lambda k: k not in TokenEntry.model_fields),
            json_leaves,
            max_size=3,
        )
    )
    return TokenEntry(
        rollout_id=rollout_id,
        model_call_id=draw(call_ids),
        model=draw(st.text(max_size=10)),
        prompt_token_ids=draw(st.lists(st.integers(0, MAX_TOKEN_ID), max_size=8)),
        generation_token_ids=draw(
            st.lists(st.integers(0, MAX_TOKEN_ID), min_size=size, max_size=size)
        ),
        generation_log_probs=draw(st.lists(log_probs, min_size=size, max_size=size)),
        output_items=draw(st.lists(st.dictionaries(st.text(max_size=5), json_leaves), max_size=2)),
        created_at=draw(st.floats(allow_nan=False, allow_infinity=False)),
        **extra,
    )


def float_bits(values: list[float]) -> list[bytes]:
    return [struct.pack("<d", value) for value in values]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_entries_round_trip_exactly(data: st.DataObject) -> None:
    """Entries come back field for field, floats bit for bit, extras and unicode included."""
    rollout_id = "round-trip"
    written = data.draw(st.lists(entries(rollout_id), min_size=1, max_size=3))
    unique = {each.model_call_id: each for each in written}

    async def scenario(root: str) -> TokenCaptureSnapshot:
        writer, reader = FileTokenStore(root), FileTokenStore(root)
        for each in unique.values():
            await writer.put(each)
        await writer.close()
        snapshot = await reader.freeze(rollout_id)
        await reader.close()
        return snapshot

    with tempfile.TemporaryDirectory(prefix="tokcap-") as root:
        snapshot = run(scenario(root))
    assert payloads(snapshot) == {k: v.to_json_bytes() for k, v in unique.items()}
    for got in snapshot.entries:
        sent = unique[got.model_call_id]
        assert got == sent
        assert float_bits(got.generation_log_probs) == float_bits(sent.generation_log_probs)
        assert got.model_extra == sent.model_extra


def _spawned_writer(root: str, worker: int, calls: int) -> None:
    async def write() -> None:
        store = FileTokenStore(root)
        for call in range(calls):
            await store.put(entry("shared", f"w{worker}-c{call}", seed=worker))
            await store.put(entry(f"own-{worker}", f"c{call}", seed=worker))
            await store.put(entry("shared", "common"))
        await store.close()

    asyncio.run(write())


@pytest.mark.slow
def test_spawned_writers_lose_nothing_and_mix_nothing(root: Path) -> None:
    """Four spawned workers built from the root alone lose no entry and mix no rollouts."""
    workers, calls = 4, 25
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_spawned_writer, args=(str(root), worker, calls))
        for worker in range(workers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [process.exitcode for process in processes] == [0] * workers

    shared = fresh_freeze(root, "shared")
    expected = {
        f"w{w}-c{c}": entry("shared", f"w{w}-c{c}", seed=w).to_json_bytes()
        for w in range(workers)
        for c in range(calls)
    }
    expected["common"] = entry("shared", "common").to_json_bytes()
    assert payloads(shared) == expected
    assert not shared.incomplete
    assert shared.version == len(expected)
    for worker in range(workers):
        own = fresh_freeze(root, f"own-{worker}")
        assert payloads(own) == {
            f"c{c}": entry(f"own-{worker}", f"c{c}", seed=worker).to_json_bytes()
            for c in range(calls)
        }
        assert not own.incomplete


RACE_LIMIT = 20_000


def _spawned_racer(root: str, worker: int, started: Any, results: Any) -> None:
    async def race() -> list[str]:
        store = FileTokenStore(root)
        acked = []
        try:
            for call in range(RACE_LIMIT):
                name = f"w{worker}-c{call}"
                try:
                    await store.put(entry("raced", name, seed=worker))
                except RolloutFrozenError:
                    return acked
                acked.append(name)
                if call == 5:
                    started.set()
            return acked
        finally:
            await store.close()

    results.put((worker, asyncio.run(race())))


@pytest.mark.slow
def test_a_freeze_during_spawned_puts_holds_exactly_the_acked_entries(root: Path) -> None:
    """Freezing while spawned workers put yields exactly the puts acked; later ones raise."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    events = [context.Event() for _ in range(4)]
    processes = [
        context.Process(target=_spawned_racer, args=(str(root), worker, events[worker], results))
        for worker in range(4)
    ]
    for process in processes:
        process.start()
    try:
        for event in events:
            assert event.wait(timeout=120)
        snapshot = fresh_freeze(root, "raced")
        acked = dict(results.get(timeout=120) for _ in processes)
        for process in processes:
            process.join(timeout=120)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
    assert [process.exitcode for process in processes] == [0] * 4
    assert sorted(payloads(snapshot)) == sorted(name for names in acked.values() for name in names)
    assert all(len(names) < RACE_LIMIT for names in acked.values())
    assert not snapshot.incomplete
