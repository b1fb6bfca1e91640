"""The promises of reference.redis_store.RedisTokenStore, against a real redis-server."""

from __future__ import annotations

import asyncio
import math
import struct
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis
from conftest import DURABLE, RedisServer, StartRedis, free_port
from redis.crc import key_slot

from reference._redis_scripts import DROP, MARK_INCOMPLETE
from reference.redis_store import RedisTokenStore
from tokcap_spec.errors import (
    ConflictingEntryError,
    CorruptStoreError,
    InvalidRolloutIdError,
    RolloutFrozenError,
    RolloutRetiredError,
    StoreWriteError,
)
from tokcap_spec.protocols import (
    CallIntentSink,
    RetiringSource,
    TokenCaptureSnapshot,
    TokenSink,
    TokenSource,
    protocol_problems,
)
from tokcap_spec.records import TokenEntry

T = TypeVar("T")
Open = Callable[[], RedisTokenStore]
Scenario = Callable[[Open], Awaitable[T]]

ODD_CALL_IDS = ["a\nb", "a/b", ' "quoted" ', "🚀 ünï", "\x00nul", "x" * 500, "{tag}\n}", "\r\n$3"]
BAD_ROLLOUT_IDS = [".", "a/b", "", "x" * 201, "-lead", "a b", "{r}"]


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


def play(url: str, namespace: str, scenario: Scenario[T]) -> T:
    """Run ``scenario`` on one loop, handing it fresh stores and closing them all after."""

    async def main() -> T:
        opened: list[RedisTokenStore] = []

        def open_store() -> RedisTokenStore:
            opened.append(RedisTokenStore(url, namespace=namespace))
            return opened[-1]

        try:
            return await scenario(open_store)
        finally:
            for store in opened:
                await store.close()

    return asyncio.run(main())


@pytest.fixture
def namespace() -> str:
    return f"t-{uuid.uuid4().hex}"


@pytest.fixture
def on_redis(redis_server: RedisServer, namespace: str) -> Callable[[Scenario[Any]], Any]:
    return lambda scenario: play(redis_server.url, namespace, scenario)


Play = Callable[[Scenario[Any]], Any]


class TestConstruction:
    def test_satisfies_every_protocol(self) -> None:
        """The store is a sink, a source, a call-intent sink and a retiring source at once."""
        store = RedisTokenStore("redis://127.0.0.1:1/0")
        for protocol in (TokenSink, TokenSource, CallIntentSink, RetiringSource):
            assert protocol_problems(store, protocol) == []

    def test_refuses_a_url_that_is_not_redis_without_echoing_it(self) -> None:
        """A non-redis URL is refused by scheme, and the URL itself is not repeated."""
        with pytest.raises(ValueError, match="got scheme 'http'") as caught:
            RedisTokenStore("http://user:hunter22@example/0")
        assert "hunter22" not in str(caught.value)

    @pytest.mark.parametrize("namespace", ["", "a{b", "b}", "x" * 101])
    def test_refuses_a_namespace_that_would_break_the_hash_tag(self, namespace: str) -> None:
        """A namespace that is empty, too long or holds a brace is refused."""
        with pytest.raises(ValueError, match="namespace must be"):
            RedisTokenStore("redis://127.0.0.1:1/0", namespace=namespace)

    @pytest.mark.parametrize(
        ("kwarg", "value"),
        [
            ("wait_replicas", -1),
            ("wait_replicas", True),
            ("retries", 1.5),
            ("socket_timeout", 0),
            ("call_timeout", float("inf")),
            ("cluster", "yes"),
            ("allow_eviction", None),
        ],
    )
    def test_refuses_bad_numbers_naming_the_kwarg(self, kwarg: str, value: object) -> None:
        """A numeric kwarg of the wrong type or range is refused with its name and value."""
        with pytest.raises(ValueError, match=f"{kwarg} must be .*got {value!r}"):
            RedisTokenStore("redis://127.0.0.1:1/0", **{kwarg: value})

    def test_refuses_a_url_redis_cannot_use_without_the_password(self) -> None:
        """A redis URL with an option redis-py refuses is refused, password hidden."""
        url = "redis://:hunter22@h:1/0?socket_timeout=abc"
        with pytest.raises(
            ValueError, match=r"url redis://:\*\*\*@h:1/0\?socket_timeout=\*\*\* is not"
        ) as caught:
            RedisTokenStore(url)
        assert "hunter22" not in str(caught.value)

    def test_repr_hides_the_password(self) -> None:
        """The repr names host, port and database but shows the password as ***."""
        store = RedisTokenStore("redis://user:s3cr3t-value@127.0.0.1:6379/2?password=other-pw")
        shown = repr(store)
        assert "s3cr3t-value" not in shown
        assert "other-pw" not in shown
        assert "user:***@127.0.0.1:6379/2" in shown


class TestPut:
    def test_an_acked_put_is_visible_to_a_fresh_instance(self, on_redis: Play) -> None:
        """A fresh instance's freeze holds every entry whose put returned, clean."""
        entries = [entry("r", f"c{i}", seed=i) for i in range(3)]

        async def scenario(open_store: Open) -> TokenCaptureSnapshot:
            store = open_store()
            for each in entries:
                await store.put(each)
            return await open_store().freeze("r")

        snapshot = on_redis(scenario)
        assert payloads(snapshot) == {e.model_call_id: e.to_json_bytes() for e in entries}
        assert not snapshot.incomplete
        assert snapshot.version == 3

    def test_round_trips_bit_for_bit(self, on_redis: Play) -> None:
        """-inf, -0.0, unicode and unknown extra fields come back exactly as put."""
        original = TokenEntry(
            rollout_id="r",
            model_call_id="c",
            model="mödel",
            generation_token_ids=[5, 2**31 - 1],
            generation_log_probs=[float("-inf"), -0.0],
            output_items=[{"text": "ünï\n🚀"}],
            token_item_index=0,
            extra_field={"nested": [1.5, None]},
        )

        async def scenario(open_store: Open) -> TokenCaptureSnapshot:
            await open_store().put(original)
            return await open_store().freeze("r")

        (back,) = on_redis(scenario).entries
        assert back == original
        assert back.to_json_bytes() == original.to_json_bytes()
        assert math.isinf(back.generation_log_probs[0])
        assert struct.pack(">d", back.generation_log_probs[1]) == struct.pack(">d", -0.0)
        assert back.model_extra == {"extra_field": {"nested": [1.5, None]}}

    @pytest.mark.parametrize("frozen_first", [False, True], ids=["open", "frozen"])
    def test_an_identical_reput_is_a_no_op(self, on_redis: Play, frozen_first: bool) -> None:
        """Re-putting the same bytes keeps one clean entry and the same version."""

        async def scenario(open_store: Open) -> tuple[TokenCaptureSnapshot, TokenCaptureSnapshot]:
            store = open_store()
            await store.put(entry("r", "c"))
            first = await store.freeze("r") if frozen_first else None
            await store.put(entry("r", "c"))
            second = await store.freeze("r")
            return first or second, second

        first, second = on_redis(scenario)
        assert second == first
        assert second.version == 1
        assert len(second.entries) == 1
        assert not second.incomplete

    @pytest.mark.parametrize("frozen_first", [False, True], ids=["open", "frozen"])
    def test_a_conflicting_reput_raises_and_marks_durably(
        self, on_redis: Play, frozen_first: bool
    ) -> None:
        """Reusing a call id with other bytes raises, bumps the version and marks the rollout."""
        original = entry("r", "c", seed=1)

        async def scenario(open_store: Open) -> TokenCaptureSnapshot:
            store = open_store()
            await store.put(original)
            if frozen_first:
                await store.freeze("r")
            with pytest.raises(ConflictingEntryError, match=r"'c'.*marked incomplete"):
                await store.put(entry("r", "c", seed=2))
            return await open_store().freeze("r")

        snapshot = on_redis(scenario)
        assert snapshot.incomplete
        assert snapshot.version == 2
        assert payloads(snapshot) == {"c": original.to_json_bytes()}

    def test_a_new_call_after_freeze_raises(self, on_redis: Play) -> None:
        """A put of a new call into a frozen rollout raises and changes nothing."""

        async def scenario(open_store: Open) -> tuple[TokenCaptureSnapshot, TokenCaptureSnapshot]:
            store = open_store()
            await store.put(entry("r", "c"))
            before = await store.freeze("r")
            with pytest.raises(RolloutFrozenError, match="'late'"):
                await open_store().put(entry("r", "late"))
            return before, await store.freeze("r")

        before, after = on_redis(scenario)
        assert after == before

    @pytest.mark.parametrize("how", ["drop", "retire"])
    def test_a_put_after_a_tombstone_raises(self, on_redis: Play, how: str) -> None:
        """A put into a dropped or retired rollout raises RolloutRetiredError."""

        async def scenario(open_store: Open) -> None:
            store = open_store()
            await store.put(entry("r", "c"))
            if how == "drop":
                snapshot = await store.freeze("r")
                assert await store.drop(
                    "r", snapshot_id=snapshot.snapshot_id, version=snapshot.version
                )
            else:
                await store.retire(["r"])
            with pytest.raises(RolloutRetiredError, match="'r'"):
                await open_store().put(entry("r", "c"))

        on_redis(scenario)

    def test_rollouts_are_isolated(self, on_redis: Play) -> None:
        """Ids differing only by case or punctuation never share entries, marks or versions."""
        ids = ["Run.1", "run.1", "run_1", "run-1", "RUN.1"]

        async def scenario(open_store: Open) -> list[TokenCaptureSnapshot]:
            store = open_store()
            for index, rollout_id in enumerate(ids):
                for call in range(index + 1):
                    await store.put(entry(rollout_id, f"c{call}"))
            await store.mark_incomplete("run.1")
            return [await store.freeze(rollout_id) for rollout_id in ids]

        for index, (rollout_id, snapshot) in enumerate(zip(ids, on_redis(scenario), strict=True)):
            assert sorted(payloads(snapshot)) == [f"c{call}" for call in range(index + 1)]
            assert {e.rollout_id for e in snapshot.entries} == {rollout_id}
            assert snapshot.incomplete == (rollout_id == "run.1")
            assert snapshot.version == index + 1 + (rollout_id == "run.1")

    def test_namespaces_are_isolated(self, redis_server: RedisServer) -> None:
        """Two namespaces on one server never see each other's rollouts."""

        async def scenario(open_store: Open) -> None:
            await open_store().put(entry("r", "c"))

        play(redis_server.url, "ns-a-" + uuid.uuid4().hex, scenario)

        async def other(open_store: Open) -> TokenCaptureSnapshot:
            return await open_store().freeze("r")

        assert play(redis_server.url, "ns-b-" + uuid.uuid4().hex, other).entries == ()

    @pytest.mark.parametrize("call", ODD_CALL_IDS)
    def test_any_call_id_works(self, on_redis: Play, call: str) -> None:
        """Call ids with newlines, braces, protocol bytes, NULs and unicode round-trip."""

        async def scenario(open_store: Open) -> TokenCaptureSnapshot:
            await open_store().put(entry("r", call))
            await open_store().put(entry("r", call))
            return await open_store().freeze("r")

        snapshot = on_redis(scenario)
        assert payloads(snapshot) == {call: entry("r", call).to_json_bytes()}
        assert not snapshot.incomplete

    @pytest.mark.parametrize("rollout_id", BAD_ROLLOUT_IDS)
    def test_refuses_invalid_rollout_ids(self, on_redis: Play, rollout_id: str) -> None:
        """Every method refuses an invalid rollout id before touching the server."""

        async def scenario(open_store: Open) -> None:
            store = open_store()
            unchecked = TokenEntry.model_construct(rollout_id=rollout_id, model_call_id="c")
            calls: list[Callable[[], Awaitable[object]]] = [
                lambda: store.put(unchecked),
                lambda: store.mark_incomplete(rollout_id),
                lambda: store.begin_call(rollout_id, "c"),
                lambda: store.freeze(rollout_id),
                lambda: store.drop(rollout_id, snapshot_id="s", version=0),
                lambda: store.retire([rollout_id]),
                lambda: store.delete([rollout_id]),
            ]
            for call in calls:
                with pytest.raises(InvalidRolloutIdError):
                    await call()

        on_redis(scenario)

    def test_refuses_what_is_not_an_entry(self, on_redis: Play) -> None:
        """A put of anything but a TokenEntry is refused, naming the type seen."""

        async def scenario(open_store: Open) -> None:
            with pytest.raises(TypeError, match="got dict"):
                await open_store().put({"rollout_id": "r"})  # type: ignore[arg-type]

        on_redis(scenario)

    def test_concurrent_puts_of_one_rollout_all_land(self, on_redis: Play) -> None:
        """Fifty concurrent puts into one rollout give fifty entries and version fifty."""

        async def scenario(open_store: Open) -> TokenCaptureSnapshot:
            store = open_store()
            await asyncio.gather(*(store.put(entry("r", f"c{i}", seed=i)) for i in range(50)))
            return await open_store().freeze("r")

        snapshot = on_redis(scenario)
        assert len(snapshot.entries) == 50
        assert snapshot.version == 50


class TestMarkIncomplete:
    @pytest.mark.parametrize("call", ["", "c", "🚀\nx"])
    def test_marks_durably_and_bumps_the_version(self, on_redis: Play, call: str) -> None:
        """A mark with any call id, even an empty one, is seen by a fresh instance's freeze."""

        async def scenario(open_store: Open) -> TokenCaptureSnapshot:
            store = open_store()
            await store.put(entry("r", "c"))
            await store.mark_incomplete("r", call)
            return await open_store().freeze("r")

        snapshot = on_redis(scenario)
        assert snapshot.incomplete
        assert snapshot.version == 2

    def test_is_sticky_and_works_after_freeze(self, on_redis: Play) -> None:
        """A mark after freeze changes the snapshot id, and no later step clears it."""

        async def scenario(open_store: Open) -> list[TokenCaptureSnapshot]:
            store = open_store()
            await store.put(entry("r", "c"))
            clean = await store.freeze("r")
            await store.mark_incomplete("r")
            marked = await store.freeze("r")
            await store.put(entry("r", "c"))
            await store.mark_incomplete("r")
            return [clean, marked, await open_store().freeze("r")]

        clean, marked, later = on_redis(scenario)
        assert not clean.incomplete
        assert marked.incomplete
        assert later.incomplete
        assert marked.snapshot_id != clean.snapshot_id
        assert [clean.version, marked.version, later.version] == [1, 2, 3]
        assert payloads(later) == payloads(clean)

    def test_raises_after_a_tombstone(self, on_redis: Play) -> None:
        """A mark on a retired rollout raises RolloutRetiredError."""

        async def scenario(open_store: Open) -> None:
            store = open_store()
            await store.retire(["r"])
            with pytest.raises(RolloutRetiredError):
                await store.mark_incomplete("r")

        on_redis(scenario)

    def test_refuses_a_call_id_that_is_not_a_string(self, on_redis: Play) -> None:
        """A non-string call id is refused, naming the type seen."""

        async def scenario(open_store: Open) -> None:
            with pytest.raises(TypeError, match="got int"):
                await open_store().mark_incomplete("r", 3)  # type: ignore[arg-type]

        on_redis(scenario)


class TestBeginCall:
    @pytest.mark.parametrize("call", ["c", *ODD_CALL_IDS])
    def test_an_unmatched_intent_makes_the_snapshot_incomplete(
        self, on_redis: Play, call: str
    ) -> None:
        """An intent with no entry at freeze makes it incomplete; its entry makes it clean."""

        async def scenario(open_store: Open) -> list[TokenCaptureSnapshot]:
            store = open_store()
            await store.begin_call("open", call)
            await store.begin_call("kept", call)
            await store.put(entry("kept", call))
            return [await open_store().freeze("open"), await open_store().freeze("kept")]

        unmatched, matched = on_redis(scenario)
        assert unmatched.incomplete
        assert unmatched.entries == ()
        assert not matched.incomplete
        assert payloads(matched) == {call: entry("kept", call).to_json_bytes()}

    def test_a_known_call_is_a_no_op(self, on_redis: Play) -> None:
        """Announcing an announced or stored call changes nothing, even after freeze."""

        async def scenario(open_store: Open) -> list[TokenCaptureSnapshot]:
            store = open_store()
            await store.begin_call("r", "a")
            await store.put(entry("r", "b"))
            first = await store.freeze("r")
            await store.begin_call("r", "a")
            await store.begin_call("r", "b")
            return [first, await store.freeze("r")]

        first, second = on_redis(scenario)
        assert second == first
        assert first.version == 2

    def test_a_new_intent_after_freeze_raises(self, on_redis: Play) -> None:
        """A new intent in a frozen rollout raises RolloutFrozenError."""

        async def scenario(open_store: Open) -> None:
            store = open_store()
            await store.freeze("r")
            with pytest.raises(RolloutFrozenError, match="'late'"):
                await store.begin_call("r", "late")

        on_redis(scenario)

    def test_refuses_an_empty_call_id(self, on_redis: Play) -> None:
        """An empty call id cannot be announced."""

        async def scenario(open_store: Open) -> None:
            with pytest.raises(ValueError, match="non-empty"):
                await open_store().begin_call("r", "")

        on_redis(scenario)


class TestFreeze:
    def test_an_unknown_rollout_freezes_empty_clean_and_fenced(self, on_redis: Play) -> None:
        """Freezing a rollout never written gives an empty clean snapshot and fences it."""

        async def scenario(open_store: Open) -> TokenCaptureSnapshot:
            store = open_store()
            snapshot = await store.freeze("never")
            with pytest.raises(RolloutFrozenError):
                await open_store().put(entry("never", "c"))
            return snapshot

        snapshot = on_redis(scenario)
        assert (snapshot.entries, snapshot.incomplete, snapshot.version) == ((), False, 0)
        assert snapshot.snapshot_id

    def test_is_idempotent_across_instances(self, on_redis: Play) -> None:
        """With no writes in between, every instance's freeze returns the same snapshot."""

        async def scenario(open_store: Open) -> list[TokenCaptureSnapshot]:
            await open_store().put(entry("r", "a"))
            await open_store().put(entry("r", "b"))
            return list(await asyncio.gather(*(open_store().freeze("r") for _ in range(4))))

        snapshots = on_redis(scenario)
        assert all(s == snapshots[0] for s in snapshots)
        assert {s.snapshot_id for s in snapshots} == {snapshots[0].snapshot_id}

    def test_a_change_mints_a_new_snapshot_id(self, on_redis: Play) -> None:
        """A state change after a freeze gives the next freeze a new snapshot id and version."""

        async def scenario(open_store: Open) -> list[TokenCaptureSnapshot]:
            store = open_store()
            await store.put(entry("r", "a"))
            first = await store.freeze("r")
            await store.mark_incomplete("r", "a")
            return [first, await store.freeze("r")]

        first, second = on_redis(scenario)
        assert not first.incomplete
        assert second.incomplete
        assert second.snapshot_id != first.snapshot_id
        assert second.version == first.version + 1

    def test_raises_for_a_retired_rollout(self, on_redis: Play) -> None:
        """Freezing a dropped or retired rollout raises RolloutRetiredError."""

        async def scenario(open_store: Open) -> None:
            store = open_store()
            await store.retire(["r"])
            with pytest.raises(RolloutRetiredError, match="'r'"):
                await store.freeze("r")

        on_redis(scenario)

    def test_a_returned_snapshot_never_changes(self, on_redis: Play) -> None:
        """Later writes leave a snapshot already returned as it was."""

        async def scenario(open_store: Open) -> tuple[TokenCaptureSnapshot, bytes]:
            store = open_store()
            await store.put(entry("r", "a"))
            snapshot = await store.freeze("r")
            before = snapshot.entries[0].to_json_bytes()
            await store.mark_incomplete("r")
            with pytest.raises(ConflictingEntryError):
                await store.put(entry("r", "a", seed=9))
            return snapshot, before

        snapshot, before = on_redis(scenario)
        assert not snapshot.incomplete
        assert snapshot.entries[0].to_json_bytes() == before

    def test_a_damaged_record_raises_corrupt_store(
        self, on_redis: Play, redis_server: RedisServer, namespace: str
    ) -> None:
        """An entry that is not a TokenEntry makes freeze raise CorruptStoreError."""
        with redis.Redis.from_url(redis_server.url) as raw:
            raw.hset(f"{namespace}:{{r}}:entries", "c", b"not json")

        async def scenario(open_store: Open) -> None:
            with pytest.raises(CorruptStoreError, match="'r'"):
                await open_store().freeze("r")

        on_redis(scenario)

    def test_all_keys_of_a_rollout_share_one_cluster_slot(
        self, on_redis: Play, redis_server: RedisServer, namespace: str
    ) -> None:
        """Every key a rollout uses hashes to one Redis Cluster slot."""

        async def scenario(open_store: Open) -> None:
            store = open_store()
            await store.begin_call("r.1", "a")
            await store.put(entry("r.1", "b"))
            await store.freeze("r.1")

        on_redis(scenario)
        with redis.Redis.from_url(redis_server.url) as raw:
            keys = list(raw.scan_iter(match=f"{namespace}:*"))
        assert len(keys) == 3
        assert len({key_slot(key) for key in keys}) == 1


class TestDrop:
    def test_the_exact_snapshot_drops_and_leaves_a_tombstone(
        self, on_redis: Play, redis_server: RedisServer, namespace: str
    ) -> None:
        """Dropping the exact frozen snapshot returns True and keeps only a tombstone."""

        async def scenario(open_store: Open) -> bool:
            store = open_store()
            await store.begin_call("r", "c")
            await store.put(entry("r", "c"))
            snapshot = await store.freeze("r")
            return await open_store().drop(
                "r", snapshot_id=snapshot.snapshot_id, version=snapshot.version
            )

        assert on_redis(scenario) is True
        with redis.Redis.from_url(redis_server.url) as raw:
            keys = list(raw.scan_iter(match=f"{namespace}:*"))
            assert keys == [f"{namespace}:{{r}}:meta".encode()]
            assert raw.hget(keys[0], "retired") == b"1"

    @pytest.mark.parametrize("wrong", ["id", "version+1", "version-1", "bool", "unfrozen", "none"])
    def test_anything_but_the_exact_snapshot_is_refused_and_destroys_nothing(
        self, on_redis: Play, wrong: str
    ) -> None:
        """A wrong id or version, an unfrozen or unknown rollout returns False and keeps all."""

        async def scenario(
            open_store: Open,
        ) -> tuple[bool, TokenCaptureSnapshot, TokenCaptureSnapshot]:
            store = open_store()
            rollout = "none" if wrong == "none" else "r"
            if wrong != "none":
                await store.put(entry("r", "c"))
            before = await store.freeze("r") if wrong != "unfrozen" else None
            snapshot_id = before.snapshot_id if before else "x-1"
            version = before.version if before else 1
            arguments: dict[str, Any] = {
                "id": {"snapshot_id": snapshot_id + "x", "version": version},
                "version+1": {"snapshot_id": snapshot_id, "version": version + 1},
                "version-1": {"snapshot_id": snapshot_id, "version": version - 1},
                "bool": {"snapshot_id": snapshot_id, "version": True},
                "unfrozen": {"snapshot_id": snapshot_id, "version": version},
                "none": {"snapshot_id": snapshot_id, "version": version},
            }[wrong]
            dropped = await open_store().drop(rollout, **arguments)
            after = await store.freeze("r")
            return dropped, before or after, after

        dropped, before, after = on_redis(scenario)
        assert dropped is False
        assert payloads(after) == payloads(before)
        if wrong != "unfrozen":
            assert after == before

    def test_a_mark_after_the_snapshot_makes_its_drop_fail(self, on_redis: Play) -> None:
        """Once marked after freeze, the old snapshot no longer drops; the new one does."""

        async def scenario(open_store: Open) -> tuple[bool, bool]:
            store = open_store()
            await store.put(entry("r", "c"))
            old = await store.freeze("r")
            await store.mark_incomplete("r")
            stale = await store.drop("r", snapshot_id=old.snapshot_id, version=old.version)
            new = await store.freeze("r")
            return stale, await store.drop("r", snapshot_id=new.snapshot_id, version=new.version)

        assert on_redis(scenario) == (False, True)

    def test_an_unfrozen_rollout_never_drops_even_under_its_own_name(
        self, on_redis: Play, redis_server: RedisServer, namespace: str
    ) -> None:
        """Drop refuses an unfrozen rollout even given the epoch and version it would freeze at."""

        async def scenario(open_store: Open) -> tuple[bool, TokenCaptureSnapshot]:
            store = open_store()
            await store.put(entry("r", "c"))
            with redis.Redis.from_url(redis_server.url) as raw:
                epoch = raw.hget(f"{namespace}:{{r}}:meta", "epoch")
            assert epoch is not None
            dropped = await store.drop("r", snapshot_id=f"{epoch.decode()}-1", version=1)
            return dropped, await store.freeze("r")

        dropped, snapshot = on_redis(scenario)
        assert dropped is False
        assert len(snapshot.entries) == 1
        assert snapshot.snapshot_id.endswith("-1")

    def test_a_second_drop_returns_false(self, on_redis: Play) -> None:
        """Dropping the same snapshot twice returns True, then False."""

        async def scenario(open_store: Open) -> list[bool]:
            store = open_store()
            snapshot = await store.freeze("r")
            kwargs = {"snapshot_id": snapshot.snapshot_id, "version": snapshot.version}
            return [await store.drop("r", **kwargs), await store.drop("r", **kwargs)]

        assert on_redis(scenario) == [True, False]

    def test_concurrent_drops_agree_on_one_winner(self, on_redis: Play) -> None:
        """Of eight concurrent drops of one snapshot exactly one returns True."""

        async def scenario(open_store: Open) -> list[bool]:
            await open_store().put(entry("r", "c"))
            snapshot = await open_store().freeze("r")
            kwargs = {"snapshot_id": snapshot.snapshot_id, "version": snapshot.version}
            return list(await asyncio.gather(*(open_store().drop("r", **kwargs) for _ in range(8))))

        assert sorted(on_redis(scenario)) == [False] * 7 + [True]

    def test_a_deleted_and_reused_id_never_matches_an_old_snapshot(self, on_redis: Play) -> None:
        """After delete and reuse, the old snapshot id does not drop the new rollout."""

        async def scenario(open_store: Open) -> tuple[bool, TokenCaptureSnapshot]:
            store = open_store()
            await store.put(entry("r", "c"))
            old = await store.freeze("r")
            await store.delete(["r"])
            await store.put(entry("r", "c"))
            await store.freeze("r")
            stale = await store.drop("r", snapshot_id=old.snapshot_id, version=old.version)
            return stale, await store.freeze("r")

        stale, now = on_redis(scenario)
        assert stale is False
        assert len(now.entries) == 1


class TestRetireAndDelete:
    def test_retire_fences_whatever_the_state_and_repeats_quietly(
        self, on_redis: Play, redis_server: RedisServer, namespace: str
    ) -> None:
        """Retire removes open, frozen and unknown rollouts for good; repeating it is a no-op."""

        async def scenario(open_store: Open) -> None:
            store = open_store()
            await store.put(entry("open", "c"))
            await store.put(entry("frozen", "c"))
            await store.freeze("frozen")
            await store.retire(["open", "frozen", "unknown"])
            await store.retire(["open", "frozen", "unknown"])
            for rollout_id in ("open", "frozen", "unknown"):
                with pytest.raises(RolloutRetiredError):
                    await store.put(entry(rollout_id, "c"))
                with pytest.raises(RolloutRetiredError):
                    await store.freeze(rollout_id)

        on_redis(scenario)
        with redis.Redis.from_url(redis_server.url) as raw:
            assert sorted(raw.scan_iter(match=f"{namespace}:*")) == sorted(
                f"{namespace}:{{{r}}}:meta".encode() for r in ("open", "frozen", "unknown")
            )

    def test_retire_keeps_an_existing_tombstone_as_it_is(
        self, on_redis: Play, redis_server: RedisServer, namespace: str
    ) -> None:
        """Retiring a dropped rollout leaves the drop's tombstone untouched."""

        async def scenario(open_store: Open) -> None:
            store = open_store()
            snapshot = await store.freeze("r")
            assert await store.drop("r", snapshot_id=snapshot.snapshot_id, version=0)

        on_redis(scenario)
        key = f"{namespace}:{{r}}:meta"
        with redis.Redis.from_url(redis_server.url) as raw:
            before = raw.hgetall(key)

            async def again(open_store: Open) -> None:
                await open_store().retire(["r"])

            on_redis(again)
            assert raw.hgetall(key) == before
        assert before[b"retired_by"] == b"drop"

    def test_delete_lets_an_id_start_again(self, on_redis: Play) -> None:
        """After delete, a dropped id accepts writes and freezes with only the new entries."""

        async def scenario(open_store: Open) -> TokenCaptureSnapshot:
            store = open_store()
            await store.put(entry("r", "old"))
            await store.mark_incomplete("r")
            await store.retire(["r"])
            await store.delete(["r"])
            await store.delete(["r"])
            await store.put(entry("r", "new"))
            return await open_store().freeze("r")

        snapshot = on_redis(scenario)
        assert sorted(payloads(snapshot)) == ["new"]
        assert not snapshot.incomplete
        assert snapshot.version == 1

    def test_tombstones_expire_when_asked_to(
        self, redis_server: RedisServer, namespace: str
    ) -> None:
        """With tombstone_ttl_seconds the tombstone key carries that time to live."""

        async def scenario() -> None:
            store = RedisTokenStore(redis_server.url, namespace=namespace, tombstone_ttl_seconds=60)
            await store.retire(["r"])
            await store.close()

        asyncio.run(scenario())
        with redis.Redis.from_url(redis_server.url) as raw:
            assert 0 < raw.ttl(f"{namespace}:{{r}}:meta") <= 60

    def test_refuses_a_bare_string(self, on_redis: Play) -> None:
        """A single string instead of a list of ids is refused, not read letter by letter."""

        async def scenario(open_store: Open) -> None:
            with pytest.raises(TypeError, match="single str 'abc'"):
                await open_store().retire("abc")
            with pytest.raises(TypeError, match="single str 'abc'"):
                await open_store().delete("abc")

        on_redis(scenario)


class TestCloseAndErrors:
    def test_a_server_that_forgot_the_scripts_is_taught_again(
        self, on_redis: Play, redis_server: RedisServer
    ) -> None:
        """After SCRIPT FLUSH (as after a restart) the next call loads its script and succeeds."""

        async def scenario(open_store: Open) -> TokenCaptureSnapshot:
            store = open_store()
            await store.put(entry("r", "a"))
            with redis.Redis.from_url(redis_server.url) as raw:
                raw.script_flush()
            await store.put(entry("r", "b"))
            return await store.freeze("r")

        assert sorted(payloads(on_redis(scenario))) == ["a", "b"]

    def test_close_is_idempotent_and_loses_nothing(self, on_redis: Play) -> None:
        """Closing twice is fine, the store works again after, and nothing acked is lost."""

        async def scenario(open_store: Open) -> TokenCaptureSnapshot:
            store = open_store()
            await store.put(entry("r", "a"))
            await store.close()
            await store.close()
            await store.put(entry("r", "b"))
            return await open_store().freeze("r")

        assert sorted(payloads(on_redis(scenario))) == ["a", "b"]

    def test_an_unreachable_server_raises_without_the_password(self) -> None:
        """A put to a closed port raises StoreWriteError naming the URL, password hidden."""
        url = f"redis://:s3cr3t-value@127.0.0.1:{free_port()}/0"

        async def scenario() -> None:
            store = RedisTokenStore(url, retries=0)
            try:
                await store.put(entry("r", "c"))
            finally:
                await store.close()

        with pytest.raises(StoreWriteError) as caught:
            asyncio.run(scenario())
        message = str(caught.value)
        assert "s3cr3t-value" not in message
        assert "s3cr3t-value" not in repr(caught.value)
        assert caught.value.__cause__ is None
        assert caught.value.__suppress_context__
        assert ":***@127.0.0.1:" in message
        assert "put on rollout 'r' failed (ConnectionError" in message

    def test_a_wrong_password_raises_without_it(self, start_redis: StartRedis) -> None:
        """An authentication failure surfaces as StoreWriteError without the password."""
        server = start_redis((*DURABLE, "--requirepass", "right-password"))
        url = f"redis://:wrong-password@127.0.0.1:{server.port}/0"

        async def scenario() -> None:
            store = RedisTokenStore(url, retries=0)
            try:
                await store.put(entry("r", "c"))
            finally:
                await store.close()

        with pytest.raises(StoreWriteError, match="AuthenticationError") as caught:
            asyncio.run(scenario())
        assert "wrong-password" not in str(caught.value)
        assert "right-password" not in str(caught.value)


class TestWaitReplicas:
    def test_a_write_without_enough_replicas_raises(
        self, redis_server: RedisServer, namespace: str
    ) -> None:
        """With wait_replicas=1 and no replica, put raises naming 0 of 1 replicas."""

        async def scenario() -> None:
            store = RedisTokenStore(
                redis_server.url, namespace=namespace, wait_replicas=1, wait_timeout_ms=50
            )
            try:
                await store.put(entry("r", "c"))
            finally:
                await store.close()

        with pytest.raises(StoreWriteError, match="reached 0 replicas within 50 ms; expected 1"):
            asyncio.run(scenario())

    def test_a_write_waits_for_a_real_replica(self, start_redis: StartRedis) -> None:
        """With a replica attached, every acked write is already on the replica."""
        # Without the delay the first full sync starts at once instead of after 5 s.
        primary = start_redis((*DURABLE, "--repl-diskless-sync-delay", "0"), name="primary")
        replica = start_redis(
            ("--replicaof", "127.0.0.1", str(primary.port), "--appendonly", "no", "--save", ""),
            name="replica",
        )
        with redis.Redis.from_url(primary.url) as raw:
            raw.set("attached", 1)
            assert raw.wait(1, 10_000) == 1, "the replica did not attach within 10 s"

        async def scenario() -> None:
            store = RedisTokenStore(
                primary.url, namespace="w", wait_replicas=1, wait_timeout_ms=10_000
            )
            try:
                for i in range(5):
                    await store.put(entry("r", f"c{i}"))
                    with redis.Redis.from_url(primary.url) as raw:
                        raw.script_flush()
                await store.freeze("r")
            finally:
                await store.close()

        asyncio.run(scenario())

        with redis.Redis.from_url(replica.url) as raw:
            assert raw.hlen("w:{r}:entries") == 5
            assert raw.hget("w:{r}:meta", "frozen") == b"1"


class TestFullServer:
    def test_a_put_the_server_has_no_memory_for_raises(self, start_redis: StartRedis) -> None:
        """Under noeviction a full server refuses puts, and the store raises, never acks."""
        server = start_redis((*DURABLE, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction"))
        big = [7] * 50_000

        async def scenario() -> tuple[int, StoreWriteError]:
            store = RedisTokenStore(server.url, retries=0)
            try:
                for index in range(100):
                    try:
                        await store.put(entry("r", f"c{index}", padding=big))
                    except StoreWriteError as exc:
                        return index, exc
                raise AssertionError("expected the server to run out of memory within 100 puts")
            finally:
                await store.close()

        acked, error = asyncio.run(scenario())
        assert acked > 0
        assert "put on rollout 'r' failed (OutOfMemoryError" in str(error)
        with redis.Redis.from_url(server.url) as raw:
            assert raw.hlen("tokcap:{r}:entries") == acked
            assert int(raw.hget("tokcap:{r}:meta", "version") or 0) == acked


class TestLostKeys:
    @pytest.mark.parametrize("lost", ["entries", "meta", "intents"])
    def test_a_rollout_missing_a_key_freezes_incomplete(
        self, on_redis: Play, redis_server: RedisServer, namespace: str, lost: str
    ) -> None:
        """With one of a rollout's keys deleted behind its back, freeze says incomplete."""

        async def write(open_store: Open) -> TokenCaptureSnapshot:
            store = open_store()
            await store.begin_call("r", "a")
            await store.put(entry("r", "a"))
            await store.put(entry("r", "b"))
            return await store.freeze("r")

        clean = on_redis(write)
        with redis.Redis.from_url(redis_server.url) as raw:
            assert raw.delete(f"{namespace}:{{r}}:{lost}") == 1

        async def again(open_store: Open) -> list[TokenCaptureSnapshot]:
            return [await open_store().freeze("r"), await open_store().freeze("r")]

        first, second = on_redis(again)
        assert not clean.incomplete
        assert first.incomplete
        assert second == first
        assert first.snapshot_id != clean.snapshot_id

    def test_a_rollout_written_before_counting_is_not_flagged(
        self, on_redis: Play, redis_server: RedisServer, namespace: str
    ) -> None:
        """A meta hash without the counted mark (an older store's) freezes as it always did."""
        with redis.Redis.from_url(redis_server.url) as raw:
            raw.hset(f"{namespace}:{{r}}:meta", mapping={"epoch": "e", "version": 1})
            raw.hset(f"{namespace}:{{r}}:entries", "c", entry("r", "c").to_json_bytes())

        async def scenario(open_store: Open) -> TokenCaptureSnapshot:
            return await open_store().freeze("r")

        snapshot = on_redis(scenario)
        assert (snapshot.snapshot_id, len(snapshot.entries), snapshot.incomplete) == (
            "e-1",
            1,
            False,
        )


class TestResentScripts:
    def test_a_resent_drop_answers_as_its_first_copy(
        self, on_redis: Play, redis_server: RedisServer, namespace: str
    ) -> None:
        """The drop script run twice with one operation id says dropped twice; a new id is kept."""

        async def scenario(open_store: Open) -> TokenCaptureSnapshot:
            store = open_store()
            await store.put(entry("r", "c"))
            return await store.freeze("r")

        snapshot = on_redis(scenario)
        keys = [f"{namespace}:{{r}}:{part}" for part in ("meta", "entries", "intents")]
        with redis.Redis.from_url(redis_server.url) as raw:
            drop = raw.register_script(DROP.source)
            args = [snapshot.snapshot_id, snapshot.version, "0", "", ""]
            replies = [drop(keys, ["op-1", *args]), drop(keys, ["op-1", *args])]
            replies.append(drop(keys, ["op-2", *args]))
        assert replies == [b"dropped", b"dropped", b"kept"]

    def test_a_resent_mark_bumps_the_version_once(
        self, on_redis: Play, redis_server: RedisServer, namespace: str
    ) -> None:
        """The mark script run twice with one operation id moves the version by one."""
        keys = [f"{namespace}:{{r}}:{part}" for part in ("meta", "entries", "intents")]
        with redis.Redis.from_url(redis_server.url) as raw:
            mark = raw.register_script(MARK_INCOMPLETE.source)
            assert [mark(keys, ["op-1", "epoch", ""]) for _ in range(2)] == [b"marked"] * 2
            assert raw.hget(keys[0], "version") == b"1"
            assert mark(keys, ["op-2", "epoch", ""]) == b"marked"
            assert raw.hget(keys[0], "version") == b"2"
