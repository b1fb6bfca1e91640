"""Tests of reference.memory_store: the process-memory sink and source."""

from __future__ import annotations

import asyncio
import math
import struct
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from reference.memory_store import MemoryTokenStore
from tokcap_spec.errors import (
    ConflictingEntryError,
    InvalidRolloutIdError,
    RolloutFrozenError,
    RolloutRetiredError,
)
from tokcap_spec.protocols import CallIntentSink, RetiringSource, TokenSink, TokenSource
from tokcap_spec.records import TokenEntry

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def entry(call: str = "c1", rollout: str = "r1", **fields: Any) -> TokenEntry:
    fields.setdefault("prompt_token_ids", [1, 2])
    fields.setdefault("generation_token_ids", [3])
    fields.setdefault("generation_log_probs", [-0.5])
    return TokenEntry(rollout_id=rollout, model_call_id=call, created_at=0.0, **fields)


@pytest.fixture
def store() -> MemoryTokenStore:
    return MemoryTokenStore(namespace=uuid.uuid4().hex)


def fresh(store: MemoryTokenStore) -> MemoryTokenStore:
    return MemoryTokenStore(namespace=store.namespace)


class TestShape:
    def test_is_sink_source_and_both_extensions(self) -> None:
        """A store satisfies TokenSink, TokenSource, CallIntentSink and RetiringSource."""
        store = MemoryTokenStore()
        for protocol in (TokenSink, TokenSource, CallIntentSink, RetiringSource):
            assert isinstance(store, protocol), protocol.__name__

    def test_default_namespace_is_shared_between_instances(self) -> None:
        """Two instances built with no arguments share one namespace."""
        assert MemoryTokenStore().namespace == MemoryTokenStore().namespace == "default"

    def test_non_string_namespace_is_refused(self) -> None:
        """A namespace that is not a str is refused with a TypeError naming the type."""
        with pytest.raises(TypeError, match="int"):
            MemoryTokenStore(namespace=3)  # type: ignore[arg-type]

    def test_namespaces_are_isolated(self, store: MemoryTokenStore) -> None:
        """A store in another namespace does not see this namespace's records."""
        run(store.put(entry()))
        other = run(MemoryTokenStore(namespace=store.namespace + "-other").freeze("r1"))
        assert other.entries == ()


class TestPut:
    def test_put_is_visible_to_a_fresh_instance(self, store: MemoryTokenStore) -> None:
        """An acked put shows up in a fresh instance's freeze (PUT-1)."""
        run(store.put(entry()))
        snapshot = run(fresh(store).freeze("r1"))
        assert [e.model_call_id for e in snapshot.entries] == ["c1"]

    def test_put_round_trips_bit_for_bit(self, store: MemoryTokenStore) -> None:
        """The frozen entry keeps -inf, -0.0, unicode and extra fields exactly (PUT-2)."""
        original = entry(
            call="appel ✓\n/x",
            generation_token_ids=[4, 5],
            generation_log_probs=[-math.inf, -0.0],
            model="modèle",
            extra_note={"k": [1, "ü"]},
        )
        run(store.put(original))
        (got,) = run(store.freeze("r1")).entries
        assert got.to_json_bytes() == original.to_json_bytes()
        assert struct.pack(">d", got.generation_log_probs[1]) == struct.pack(">d", -0.0)
        assert got.model_extra == {"extra_note": {"k": [1, "ü"]}}

    def test_put_bumps_the_version(self, store: MemoryTokenStore) -> None:
        """Each new call stored raises the version by one."""
        run(store.put(entry("a")))
        run(store.put(entry("b")))
        assert run(store.freeze("r1")).version == 2

    def test_identical_reput_is_a_no_op(self, store: MemoryTokenStore) -> None:
        """Re-putting the same bytes keeps one clean entry and the same version (PUT-3)."""
        run(store.put(entry()))
        run(store.put(entry()))
        snapshot = run(store.freeze("r1"))
        assert (len(snapshot.entries), snapshot.incomplete, snapshot.version) == (1, False, 1)

    def test_identical_reput_after_freeze_is_a_no_op(self, store: MemoryTokenStore) -> None:
        """Re-putting the same bytes after freeze neither raises nor changes the snapshot."""
        run(store.put(entry()))
        before = run(store.freeze("r1"))
        run(store.put(entry()))
        after = run(store.freeze("r1"))
        assert (after.snapshot_id, after.version) == (before.snapshot_id, before.version)

    def test_conflicting_reput_raises_and_marks_incomplete(self, store: MemoryTokenStore) -> None:
        """A different payload under a stored call id raises and leaves the rollout incomplete."""
        run(store.put(entry()))
        with pytest.raises(ConflictingEntryError, match="'c1'"):
            run(store.put(entry(generation_token_ids=[9])))
        snapshot = run(store.freeze("r1"))
        assert snapshot.incomplete
        assert snapshot.version == 2
        assert snapshot.entries[0].generation_token_ids == [3]

    def test_conflicting_reput_after_freeze_changes_the_version(
        self, store: MemoryTokenStore
    ) -> None:
        """A conflict after freeze raises and makes the earlier snapshot undroppable."""
        run(store.put(entry()))
        before = run(store.freeze("r1"))
        with pytest.raises(ConflictingEntryError):
            run(store.put(entry(model="other")))
        assert not run(store.drop("r1", snapshot_id=before.snapshot_id, version=before.version))
        assert run(store.freeze("r1")).incomplete

    def test_new_call_after_freeze_is_refused(self, store: MemoryTokenStore) -> None:
        """A put of a new call after freeze raises RolloutFrozenError (strict fence)."""
        run(store.put(entry("a")))
        before = run(store.freeze("r1"))
        with pytest.raises(RolloutFrozenError, match="'b'"):
            run(store.put(entry("b")))
        after = run(store.freeze("r1"))
        assert (after.snapshot_id, len(after.entries)) == (before.snapshot_id, 1)

    def test_put_after_drop_is_refused(self, store: MemoryTokenStore) -> None:
        """Any put after a successful drop raises RolloutRetiredError (FENCE-2)."""
        run(store.put(entry()))
        snapshot = run(store.freeze("r1"))
        assert run(store.drop("r1", snapshot_id=snapshot.snapshot_id, version=snapshot.version))
        with pytest.raises(RolloutRetiredError, match="'r1'"):
            run(store.put(entry()))

    def test_rollouts_are_isolated(self, store: MemoryTokenStore) -> None:
        """Writes to one rollout never reach ids that differ by case or punctuation (PUT-5)."""
        run(store.put(entry(rollout="a.b")))
        run(store.mark_incomplete("a.b"))
        for other in ("A.b", "a_b", "a-b"):
            snapshot = run(store.freeze(other))
            assert (snapshot.entries, snapshot.incomplete, snapshot.version) == ((), False, 0)

    def test_invalid_rollout_id_is_refused(self, store: MemoryTokenStore) -> None:
        """A rollout id outside the pattern is refused by put, freeze and drop."""
        with pytest.raises(InvalidRolloutIdError):
            run(store.put(entry(rollout="../x")))
        with pytest.raises(InvalidRolloutIdError):
            run(store.freeze("a/b"))
        with pytest.raises(InvalidRolloutIdError):
            run(store.drop("", snapshot_id="s", version=0))

    def test_non_entry_is_refused(self, store: MemoryTokenStore) -> None:
        """Put refuses an object that is not a TokenEntry, naming its type."""
        with pytest.raises(TypeError, match="dict"):
            run(store.put({"rollout_id": "r1"}))  # type: ignore[arg-type]

    def test_stored_entry_is_a_private_copy(self, store: MemoryTokenStore) -> None:
        """Mutating the entry after put does not change what the store holds."""
        original = entry()
        run(store.put(original))
        original.prompt_token_ids.append(99)
        assert run(store.freeze("r1")).entries[0].prompt_token_ids == [1, 2]


class TestMarkIncomplete:
    def test_mark_is_visible_to_a_fresh_instance(self, store: MemoryTokenStore) -> None:
        """A mark makes a fresh instance's next freeze incomplete (MASK-1)."""
        run(store.mark_incomplete("r1", "c1"))
        assert run(fresh(store).freeze("r1")).incomplete

    def test_mark_is_sticky(self, store: MemoryTokenStore) -> None:
        """No later put, freeze or re-mark clears incomplete (MASK-2)."""
        run(store.mark_incomplete("r1"))
        run(store.put(entry()))
        run(store.freeze("r1"))
        run(store.mark_incomplete("r1", ""))
        assert run(store.freeze("r1")).incomplete

    def test_mark_after_freeze_changes_the_version(self, store: MemoryTokenStore) -> None:
        """A mark after freeze bumps the version and mints a new snapshot id (MASK-3)."""
        run(store.put(entry()))
        before = run(store.freeze("r1"))
        run(store.mark_incomplete("r1"))
        after = run(store.freeze("r1"))
        assert after.version == before.version + 1
        assert after.snapshot_id != before.snapshot_id
        assert not run(store.drop("r1", snapshot_id=before.snapshot_id, version=before.version))

    def test_marked_rollout_keeps_its_evidence(self, store: MemoryTokenStore) -> None:
        """Freezing a masked rollout again returns the same entries (MASK-5)."""
        run(store.put(entry("a")))
        run(store.mark_incomplete("r1", "a"))
        first = run(store.freeze("r1"))
        second = run(store.freeze("r1"))
        assert first.entries == second.entries
        assert len(first.entries) == 1

    def test_mark_after_retire_is_refused(self, store: MemoryTokenStore) -> None:
        """A mark after retire raises RolloutRetiredError."""
        run(store.retire(["r1"]))
        with pytest.raises(RolloutRetiredError):
            run(store.mark_incomplete("r1"))

    def test_non_string_call_id_is_refused(self, store: MemoryTokenStore) -> None:
        """A model_call_id that is not a str is refused with a TypeError."""
        with pytest.raises(TypeError, match="int"):
            run(store.mark_incomplete("r1", 5))  # type: ignore[arg-type]


class TestBeginCall:
    def test_unmatched_intent_makes_the_snapshot_incomplete(self, store: MemoryTokenStore) -> None:
        """An intent with no entry at freeze makes the snapshot incomplete (EXT-BEGIN-1)."""
        run(store.begin_call("r1", "c1"))
        assert run(store.freeze("r1")).incomplete

    def test_matched_intent_keeps_the_snapshot_clean(self, store: MemoryTokenStore) -> None:
        """An intent matched by its entry leaves the snapshot clean, for any call id string."""
        call = "x y\n/ü"
        run(store.begin_call("r1", call))
        run(store.put(entry(call)))
        assert not run(fresh(store).freeze("r1")).incomplete

    def test_new_intent_after_freeze_is_refused(self, store: MemoryTokenStore) -> None:
        """An intent for a new call after freeze raises RolloutFrozenError."""
        run(store.freeze("r1"))
        with pytest.raises(RolloutFrozenError, match="'c1'"):
            run(store.begin_call("r1", "c1"))

    def test_known_call_id_is_a_no_op(self, store: MemoryTokenStore) -> None:
        """An intent for a stored call is a no-op, even after freeze."""
        run(store.put(entry()))
        before = run(store.freeze("r1"))
        run(store.begin_call("r1", "c1"))
        after = run(store.freeze("r1"))
        assert (after.snapshot_id, after.version, after.incomplete) == (
            before.snapshot_id,
            before.version,
            False,
        )

    def test_empty_call_id_is_refused(self, store: MemoryTokenStore) -> None:
        """An intent needs a non-empty call id, since no entry could ever match ''."""
        with pytest.raises(ValueError, match="non-empty"):
            run(store.begin_call("r1", ""))


class TestFreeze:
    def test_unknown_rollout_freezes_empty_and_clean(self, store: MemoryTokenStore) -> None:
        """A never-written rollout freezes empty, clean, with a snapshot id (FREEZE-1, -4)."""
        snapshot = run(store.freeze("r1"))
        assert (snapshot.entries, snapshot.incomplete, snapshot.version) == ((), False, 0)
        assert snapshot.snapshot_id
        assert snapshot.rollout_id == "r1"

    def test_freeze_fences_an_unknown_rollout(self, store: MemoryTokenStore) -> None:
        """After freezing a never-written rollout, a put of a new call raises."""
        run(store.freeze("r1"))
        with pytest.raises(RolloutFrozenError):
            run(fresh(store).put(entry()))

    def test_freeze_is_idempotent_across_instances(self, store: MemoryTokenStore) -> None:
        """With no change between them, freezes agree on id, version and entries (FREEZE-2)."""
        run(store.put(entry("a")))
        run(store.put(entry("b")))
        first = run(store.freeze("r1"))
        second = run(fresh(store).freeze("r1"))
        assert (first.snapshot_id, first.version) == (second.snapshot_id, second.version)
        assert first.entries == second.entries

    def test_snapshot_ids_are_uuid4_hex(self, store: MemoryTokenStore) -> None:
        """A minted snapshot id is a uuid4 hex string."""
        snapshot_id = run(store.freeze("r1")).snapshot_id
        assert uuid.UUID(hex=snapshot_id).version == 4
        assert snapshot_id == uuid.UUID(hex=snapshot_id).hex

    def test_snapshots_share_nothing(self, store: MemoryTokenStore) -> None:
        """Mutating a returned entry changes neither the store nor another snapshot (SHAPE-3)."""
        run(store.put(entry()))
        first = run(store.freeze("r1"))
        second = run(store.freeze("r1"))
        first.entries[0].prompt_token_ids.append(99)
        assert second.entries[0].prompt_token_ids == [1, 2]
        assert run(store.freeze("r1")).entries[0].prompt_token_ids == [1, 2]

    def test_freeze_of_retired_rollout_is_refused(self, store: MemoryTokenStore) -> None:
        """Freezing a retired rollout raises RolloutRetiredError."""
        run(store.retire(["r1"]))
        with pytest.raises(RolloutRetiredError, match="'r1'"):
            run(store.freeze("r1"))


class TestDrop:
    def test_exact_snapshot_drops(self, store: MemoryTokenStore) -> None:
        """Drop with the current snapshot id and version returns True (DROP-1)."""
        run(store.put(entry()))
        snapshot = run(store.freeze("r1"))
        assert run(store.drop("r1", snapshot_id=snapshot.snapshot_id, version=snapshot.version))

    @pytest.mark.parametrize("offset", [-2, -1, 1, 7])
    def test_wrong_version_refuses(self, store: MemoryTokenStore, offset: int) -> None:
        """A version off by any amount returns False and destroys nothing (DROP-2, DROP-3)."""
        run(store.put(entry()))
        snapshot = run(store.freeze("r1"))
        assert not run(
            store.drop("r1", snapshot_id=snapshot.snapshot_id, version=snapshot.version + offset)
        )
        again = run(store.freeze("r1"))
        assert (again.snapshot_id, again.entries) == (snapshot.snapshot_id, snapshot.entries)

    def test_wrong_snapshot_id_refuses(self, store: MemoryTokenStore) -> None:
        """A wrong snapshot id returns False and destroys nothing (DROP-2, DROP-3)."""
        run(store.put(entry()))
        snapshot = run(store.freeze("r1"))
        assert not run(store.drop("r1", snapshot_id="nope", version=snapshot.version))
        assert run(store.freeze("r1")).entries == snapshot.entries

    def test_bool_version_refuses(self, store: MemoryTokenStore) -> None:
        """A bool is not accepted as the integer version."""
        run(store.put(entry()))
        snapshot = run(store.freeze("r1"))
        assert snapshot.version == 1
        assert not run(store.drop("r1", snapshot_id=snapshot.snapshot_id, version=True))

    def test_unfrozen_rollout_refuses(self, store: MemoryTokenStore) -> None:
        """Drop of a rollout never frozen returns False and keeps its entries (DROP-2)."""
        run(store.put(entry()))
        assert not run(store.drop("r1", snapshot_id="", version=1))
        assert len(run(store.freeze("r1")).entries) == 1

    def test_unknown_rollout_refuses(self, store: MemoryTokenStore) -> None:
        """Drop of a rollout the store never saw returns False (DROP-2)."""
        assert not run(store.drop("r1", snapshot_id="s", version=0))

    def test_dropped_rollout_refuses_a_second_drop(self, store: MemoryTokenStore) -> None:
        """A second drop of the same snapshot returns False."""
        snapshot = run(store.freeze("r1"))
        assert run(store.drop("r1", snapshot_id=snapshot.snapshot_id, version=0))
        assert not run(store.drop("r1", snapshot_id=snapshot.snapshot_id, version=0))

    def test_drop_fences_every_write(self, store: MemoryTokenStore) -> None:
        """After drop, put, mark, intent and freeze all raise RolloutRetiredError (FENCE-2)."""
        snapshot = run(store.freeze("r1"))
        assert run(store.drop("r1", snapshot_id=snapshot.snapshot_id, version=0))
        other = fresh(store)
        for attempt in (
            other.put(entry()),
            other.mark_incomplete("r1"),
            other.begin_call("r1", "c9"),
            other.freeze("r1"),
        ):
            with pytest.raises(RolloutRetiredError):
                run(attempt)

    def test_drop_keeps_other_rollouts(self, store: MemoryTokenStore) -> None:
        """Dropping one rollout leaves another's entries in place."""
        run(store.put(entry(rollout="r1")))
        run(store.put(entry(rollout="r2")))
        snapshot = run(store.freeze("r1"))
        assert run(store.drop("r1", snapshot_id=snapshot.snapshot_id, version=1))
        assert len(run(store.freeze("r2")).entries) == 1


class TestRetire:
    def test_retire_fences_a_live_rollout(self, store: MemoryTokenStore) -> None:
        """Retire removes an unfrozen rollout and refuses later writes (EXT-RETIRE-1)."""
        run(store.put(entry()))
        run(store.retire(["r1"]))
        with pytest.raises(RolloutRetiredError):
            run(store.put(entry("c2")))

    def test_retire_twice_is_a_no_op(self, store: MemoryTokenStore) -> None:
        """Repeating retire neither raises nor revives the rollout."""
        run(store.retire(["r1", "r2"]))
        run(store.retire(["r1"]))
        with pytest.raises(RolloutRetiredError):
            run(store.freeze("r1"))

    def test_retire_refuses_a_bare_string(self, store: MemoryTokenStore) -> None:
        """Retire refuses a single string instead of retiring each of its characters."""
        with pytest.raises(TypeError, match="'r1'"):
            run(store.retire("r1"))

    def test_retire_refuses_invalid_ids(self, store: MemoryTokenStore) -> None:
        """Retire validates every id before touching any rollout."""
        run(store.put(entry()))
        with pytest.raises(InvalidRolloutIdError):
            run(store.retire(["r1", "../x"]))
        assert len(run(store.freeze("r1")).entries) == 1


class TestDelete:
    def test_delete_lets_the_id_start_again(self, store: MemoryTokenStore) -> None:
        """After delete a retired id accepts puts and freezes clean from scratch."""
        run(store.put(entry()))
        run(store.mark_incomplete("r1"))
        run(store.retire(["r1"]))
        run(store.delete(["r1"]))
        run(store.put(entry("c2")))
        snapshot = run(store.freeze("r1"))
        assert [e.model_call_id for e in snapshot.entries] == ["c2"]
        assert (snapshot.incomplete, snapshot.version) == (False, 1)

    def test_delete_invalidates_old_snapshots(self, store: MemoryTokenStore) -> None:
        """A snapshot taken before delete no longer drops the reused id."""
        run(store.put(entry()))
        old = run(store.freeze("r1"))
        run(store.delete(["r1"]))
        run(store.put(entry()))
        run(store.freeze("r1"))
        assert not run(store.drop("r1", snapshot_id=old.snapshot_id, version=old.version))

    def test_delete_refuses_a_bare_string(self, store: MemoryTokenStore) -> None:
        """Delete refuses a single string with a TypeError."""
        with pytest.raises(TypeError, match="list"):
            run(store.delete("r1"))


class TestClose:
    def test_close_is_idempotent_and_loses_nothing(self, store: MemoryTokenStore) -> None:
        """Closing twice raises nothing and a fresh instance still sees the entry (CLOSE-1, -2)."""
        run(store.put(entry()))
        run(store.close())
        run(store.close())
        assert len(run(fresh(store).freeze("r1")).entries) == 1
