"""Tests of the reference staging stores: MemoryStagingStore, FileStagingStore and
RedisStagingStore alike.

Every test of the first part runs on every store, the Redis one on a real server; the file
store's own tests (other processes, file system errors, damaged files) follow. The Redis
store's own tests are in ``tests/redis/test_redis_staging_store.py``.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import struct
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec.staged_calls import FLOAT32_MAX, FLOAT32_TINIEST, call_fields

from reference import FileStagingStore, MemoryStagingStore, RedisStagingStore
from tokcap_spec.staging import (
    StagedCallBaseSnapshot,
    StagedCallCorruptError,
    StagedCallMissingError,
    StagedCallRecord,
    StagingSink,
    StagingSource,
    distinct_staging_key,
    staging_key,
)

Store = MemoryStagingStore | FileStagingStore | RedisStagingStore


def record(
    rollout_id: str = "rollout-1", model_call_id: str = "call-1", **fields: Any
) -> StagedCallRecord:
    """A valid staged call with these ids; ``fields`` as :func:`call_fields` takes them."""
    return StagedCallRecord.model_validate(
        call_fields(rollout_id=rollout_id, model_call_id=model_call_id, **fields)
    )


def bits(values: list[float]) -> list[str]:
    return [struct.pack(">d", value).hex() for value in values]


def assert_missing(store: Store, key: str) -> None:
    with pytest.raises(StagedCallMissingError):
        store.fetch([key])


@pytest.fixture
def store(staging_store: Store) -> Store:
    """Each reference staging store in turn (``staging_store`` in ``tests/conftest.py``)."""
    return staging_store


# --- every store ----------------------------------------------------------------------------


def test_a_store_is_a_staging_sink_and_source(store: Store) -> None:
    assert isinstance(store, StagingSink)
    assert isinstance(store, StagingSource)


def test_an_ok_stage_names_the_distinct_key_and_fetch_returns_the_row(store: Store) -> None:
    staged = record(extras={"experts": [1, 2]})
    result = store.stage(staged)
    assert result.ok
    assert result.error is None
    assert result.staging_key == distinct_staging_key("rollout-1", "call-1")
    assert result.staging_key == staging_key("rollout-1", "call-1")
    (row,) = store.fetch([result.staging_key])
    assert type(row) is StagedCallBaseSnapshot
    assert row.model_dump() == staged.model_dump(exclude={"extras"})
    StagedCallBaseSnapshot.model_validate(row.model_dump())
    assert store.fetch_extras([result.staging_key]) == [{"experts": [1, 2]}]
    assert store.fetch_attachments(result.staging_key) == {}


def test_ids_holding_slashes_are_kept_apart(store: Store) -> None:
    """The pairs the default key confuses get two keys, and each fetches its own call."""
    first, second = record("a/b", "c"), record("a", "b/c", weight_version=5)
    one, two = store.stage(first), store.stage(second)
    assert one.ok
    assert two.ok
    assert (one.staging_key, two.staging_key) == ("a%2Fb/c", "a/b%2Fc")
    assert [row.digest for row in store.fetch(["a/b%2Fc", "a%2Fb/c"])] == [
        second.digest,
        first.digest,
    ]


def test_an_identical_restage_is_a_no_op(store: Store) -> None:
    staged = record(extras={"x": 1.5})
    attachments = {"image": b"\x89PNG", "caption": "a cat"}
    first = store.stage(staged, attachments=attachments)
    again = store.stage(record(extras={"x": 1.5}), attachments=dict(attachments))
    assert first.ok
    assert again.ok
    assert again.staging_key == first.staging_key
    assert store.fetch([first.staging_key])[0].digest == staged.digest
    assert store.fetch_attachments(first.staging_key) == attachments


def test_no_attachments_and_empty_attachments_are_the_same(store: Store) -> None:
    assert store.stage(record()).ok
    assert store.stage(record(), attachments={}).ok


@pytest.mark.parametrize(
    ("other", "attachments", "says"),
    [
        (record(token_ids=(7, 8, 10)), None, "digest"),
        (record(extras={"x": 2}), None, "digest"),
        (record(weight_version=4), None, "digest"),
        (record(), {"image": b"other"}, "attachments"),
        (record(), {"image": "\x89PNG"}, "attachments"),
        (record(), {}, "attachments"),
    ],
)
def test_another_call_under_a_stored_key_is_refused_and_the_stored_one_kept(
    store: Store, other: StagedCallRecord, attachments: dict[str, Any] | None, says: str
) -> None:
    """Another record, other extras, or other attachments (text is not bytes) for one key."""
    stored = record() if other.extras is None else record(extras={"x": 1})
    key = store.stage(stored, attachments={"image": b"\x89PNG"}).staging_key
    assert key is not None
    refused = store.stage(other, attachments=attachments)
    assert not refused.ok
    assert refused.staging_key is None
    assert refused.error is not None
    assert key in refused.error
    assert "already holds another call" in refused.error
    assert says in refused.error
    assert store.fetch([key])[0].digest == stored.digest
    assert store.fetch_attachments(key) == {"image": b"\x89PNG"}


def test_a_restage_differing_only_beyond_float32_is_the_stored_call(store: Store) -> None:
    """The digest commits to float32: such a re-stage is ok and the first floats are kept."""
    first = record(log_probs=(0.0, -0.5, -1.25))
    nearby = record(log_probs=(0.0, -0.5 - 2**-40, -1.25))
    assert nearby.digest == first.digest
    key = store.stage(first).staging_key
    assert store.stage(nearby).staging_key == key
    assert key is not None
    assert bits(store.fetch([key])[0].generation_log_probs_delta) == bits([0.0, -0.5, -1.25])


def _constructed(**changes: Any) -> StagedCallRecord:
    return StagedCallRecord.model_construct(**{**call_fields(), **changes})


class _NotARecord:
    def __init__(self) -> None:
        self.__dict__.update(call_fields())


@pytest.mark.parametrize(
    ("offered", "says"),
    [
        (_constructed(schema_version=3), "schema_version"),
        (_constructed(digest_version=1), "digest_version"),
        (_constructed(extras_digest_version=2), "extras_digest_version"),
        (_constructed(digest="0" * 64), "digest"),
        (_constructed(extras={"x": 1}), "extras_digest"),
        (_constructed(generation_log_probs_delta=[0.0, -0.5, "-1"]), "generation_log_probs_delta"),
        (call_fields(), "got builtins.dict"),
        (_NotARecord(), "_NotARecord"),
        (None, "got builtins.NoneType"),
    ],
)
def test_what_is_not_a_valid_staged_call_is_refused(store: Store, offered: Any, says: str) -> None:
    """Another schema, digest or extras digest version, a digest that does not recompute, a
    float column holding an int, an object that only looks like a record: refused, naming
    what is wrong, and nothing is stored."""
    result = store.stage(offered)
    assert not result.ok
    assert result.error is not None
    assert says in result.error
    assert_missing(store, staging_key("rollout-1", "call-1"))


class _Exploding(Mapping[str, Any]):
    def __getitem__(self, name: str) -> Any:
        raise RuntimeError("unreadable")

    def __iter__(self) -> Iterator[str]:
        return iter(["a"])

    def __len__(self) -> int:
        return 1


@pytest.mark.parametrize(
    ("attachments", "says"),
    [
        ({"image": bytearray(b"x")}, "'image' is a bytearray"),
        ({"n": 3}, "'n' is a int"),
        ({"fine": b"x", "bad": None}, "'bad' is a NoneType"),
        ({1: b"x"}, "attachment names must be str"),
        ([("a", b"x")], "attachments must be a mapping"),
        (_Exploding(), "unreadable"),
    ],
)
def test_attachments_it_cannot_store_are_refused(store: Store, attachments: Any, says: str) -> None:
    result = store.stage(record(), attachments=attachments)
    assert not result.ok
    assert result.error is not None
    assert says in result.error
    assert_missing(store, staging_key("rollout-1", "call-1"))


def test_attachments_are_stored_with_the_record_byte_for_byte(store: Store) -> None:
    attachments = {"all bytes": bytes(range(256)), "text": "é/🙂\u2028", "empty": b"", "": ""}
    key = store.stage(record(), attachments=attachments).staging_key
    assert key is not None
    read = store.fetch_attachments(key)
    assert read == attachments
    assert {name: type(value) for name, value in read.items()} == {
        name: type(value) for name, value in attachments.items()
    }


def test_fetch_keeps_order_and_repeats_and_returns_new_rows(store: Store) -> None:
    keys = [store.stage(record(model_call_id=f"c{index}")).staging_key for index in range(3)]
    asked = [keys[2], keys[0], keys[2]]
    rows = store.fetch(asked)  # type: ignore[arg-type]
    assert [row.model_call_id for row in rows] == ["c2", "c0", "c2"]
    assert rows[0] == rows[2]
    assert rows[0] is not rows[2]
    assert rows[0].token_ids_delta is not rows[2].token_ids_delta
    assert store.fetch([]) == []


def test_fetch_names_every_missing_key_and_returns_nothing(store: Store) -> None:
    key = store.stage(record()).staging_key
    with pytest.raises(StagedCallMissingError) as raised:
        store.fetch(["gone/1", key, "gone/2", "gone/1"])  # type: ignore[list-item]
    assert isinstance(raised.value, KeyError)
    assert raised.value.keys == ("gone/1", "gone/2")
    assert "'gone/1'" in str(raised.value)
    assert "'gone/2'" in str(raised.value)
    with pytest.raises(StagedCallMissingError):
        store.fetch_extras(["gone/1"])
    with pytest.raises(StagedCallMissingError):
        store.fetch_attachments("gone/1")


def test_fetch_refuses_a_string_for_a_list(store: Store) -> None:
    with pytest.raises(TypeError, match="not one string"):
        store.fetch("rollout-1/call-1")  # type: ignore[arg-type]


EDGE_LOG_PROBS = [
    -0.0, -FLOAT32_TINIEST, -5e-324, -1e-40, -FLOAT32_MAX, -(1.0 + 2**-30), -1e-300, -0.0
]  # fmt: skip
"""Log probs whose float64 bits a store might lose: signed zero, float32 and float64
subnormals, the float32 range's edge, values float32 cannot hold."""


def test_floats_survive_bit_for_bit(store: Store) -> None:
    log_probs = [0.0, *EDGE_LOG_PROBS]
    mask = [0.0, *([1.0] * len(EDGE_LOG_PROBS))]
    mask[-1] = -0.0  # a masked-out token, its mask a negative zero
    log_probs[-1] = -0.0
    extras = {"f": [-0.0, 5e-324, -5e-324, 1e308, 0.1], "n": {"z": -0.0}}
    staged = record(
        token_ids=tuple(range(len(mask))), mask=mask, log_probs=log_probs, extras=extras
    )
    key = store.stage(staged).staging_key
    assert key is not None
    (row,) = store.fetch([key])
    assert bits(row.generation_log_probs_delta) == bits(log_probs)
    assert bits(row.token_mask_delta) == bits(mask)
    (read,) = store.fetch_extras([key])
    assert read is not None
    assert bits(read["f"]) == bits(extras["f"])  # type: ignore[arg-type]
    assert bits([read["n"]["z"]]) == bits([-0.0])


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(
        st.floats(width=32, max_value=0.0, allow_nan=False, allow_infinity=False)
        | st.floats(-FLOAT32_MAX, 0.0),
        min_size=1,
        max_size=6,
    ),
    st.text(min_size=1, max_size=6),
)
def test_generated_calls_read_back_as_staged(
    store: Store, log_probs: list[float], model_call_id: str
) -> None:
    staged = record(
        uuid.uuid4().hex,
        model_call_id,
        token_ids=tuple(range(len(log_probs))),
        mask=[1.0] * len(log_probs),
        log_probs=log_probs,
    )
    result = store.stage(staged)
    assert result.ok, result.error
    assert result.staging_key is not None
    (row,) = store.fetch([result.staging_key])
    assert row.digest == staged.digest
    assert bits(row.generation_log_probs_delta) == bits(log_probs)


def test_what_is_stored_is_a_copy(store: Store) -> None:
    extras: dict[str, Any] = {"x": [1]}
    attachments = {"a": b"1"}
    staged = record(extras=extras)
    key = store.stage(staged, attachments=attachments).staging_key
    assert key is not None
    assert staged.extras is not None
    staged.extras["x"].append(2)
    attachments["a"] = b"2"
    assert store.fetch_extras([key]) == [{"x": [1]}]
    assert store.fetch_attachments(key) == {"a": b"1"}
    store.fetch_extras([key])[0]["x"].append(3)  # type: ignore[index]
    assert store.fetch_extras([key]) == [{"x": [1]}]


THREADS = 8


def _in_threads(work: Callable[[int], Any]) -> list[Any]:
    start = threading.Barrier(THREADS)

    def run(thread: int) -> Any:
        start.wait()
        return work(thread)

    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(run, range(THREADS)))


def test_threads_staging_at_once_lose_and_mix_nothing(store: Store) -> None:
    """Eight threads stage their own calls and one shared call at once: all ok, and each key
    holds its own call and attachments."""
    calls = 12

    def work(thread: int) -> list[bool]:
        results = []
        for call in range(calls):
            own = record(f"r/{thread}", f"c{call}", token_ids=(thread, call, 9))
            results.append(store.stage(own, attachments={"who": f"{thread}/{call}"}).ok)
            results.append(store.stage(record("shared", "common")).ok)
        return results

    assert all(all(results) for results in _in_threads(work))
    keys = [
        distinct_staging_key(f"r/{thread}", f"c{call}")
        for thread in range(THREADS)
        for call in range(calls)
    ]
    rows = store.fetch(keys)
    for index, row in enumerate(rows):
        thread, call = divmod(index, calls)
        assert row.token_ids_delta == [thread, call, 9]
        assert store.fetch_attachments(keys[index]) == {"who": f"{thread}/{call}"}
    assert store.fetch(["shared/common"])[0].digest == record("shared", "common").digest


def test_threads_racing_for_one_key_leave_one_winner(store: Store) -> None:
    """Eight different calls for one key at once: exactly one is ok, and it is the stored one."""
    offered = [record(weight_version=thread) for thread in range(THREADS)]
    results = _in_threads(lambda thread: store.stage(offered[thread]))
    winners = [thread for thread, result in enumerate(results) if result.ok]
    assert len(winners) == 1
    assert all("already holds another call" in (r.error or "") for r in results if not r.ok)
    assert store.fetch(["rollout-1/call-1"])[0].digest == offered[winners[0]].digest


# --- the file store -------------------------------------------------------------------------

SPAWN = multiprocessing.get_context("spawn")


def _spawned_stager(root: str, worker: int, calls: int) -> list[tuple[str, bool, str | None]]:
    store = FileStagingStore(root)
    done = []
    for call in range(calls):
        for offered in (
            record(f"w{worker}", f"c/{call}", token_ids=(worker, call, 1)),
            record("shared", f"c{call}"),
            record("contested", f"c{call}", weight_version=worker),
        ):
            by = {} if offered.rollout_id == "shared" else {"by": str(worker)}
            result = store.stage(offered, attachments=by)
            done.append((offered.rollout_id, result.ok, result.error))
    return done


def _spawned_fetcher(root: str, keys: list[str]) -> list[tuple[str, list[str], Any]]:
    store = FileStagingStore(root)
    return [
        (row.digest, bits(row.generation_log_probs_delta), extras)
        for row, extras in zip(store.fetch(keys), store.fetch_extras(keys), strict=True)
    ]


def test_two_spawned_processes_staging_into_one_root_lose_and_mix_nothing(
    tmp_path: Path,
) -> None:
    """Own calls all land; a shared identical call is ok in both; of two different calls for
    one key exactly one is ok, and the stored call and its attachments are the winner's."""
    root, calls = str(tmp_path / "staging"), 10
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=SPAWN) as pool:
        outcomes = list(pool.map(_spawned_stager, [root, root], [0, 1], [calls, calls]))
    store = FileStagingStore(root)
    for worker, done in enumerate(outcomes):
        assert all(ok for rollout, ok, _ in done if rollout != "contested"), done
        rows = store.fetch([distinct_staging_key(f"w{worker}", f"c/{c}") for c in range(calls)])
        assert [row.token_ids_delta for row in rows] == [[worker, c, 1] for c in range(calls)]
    for call in range(calls):
        contested = [done[3 * call + 2] for done in outcomes]
        winners = [worker for worker, (_, ok, _) in enumerate(contested) if ok]
        assert len(winners) == 1, contested
        (row,) = store.fetch([f"contested/c{call}"])
        assert row.weight_version == winners[0]
        assert store.fetch_attachments(f"contested/c{call}") == {"by": str(winners[0])}


def test_a_fresh_instance_in_another_process_fetches_what_was_staged(tmp_path: Path) -> None:
    root = str(tmp_path / "staging")
    log_probs = [0.0, -0.0, -FLOAT32_TINIEST]
    staged = [
        record("r/1", "c1", log_probs=log_probs, mask=(0.0, 1.0, 1.0), extras={"z": -0.0}),
        record("r", "1/c1"),
    ]
    keys = [FileStagingStore(root).stage(call).staging_key for call in staged]
    assert None not in keys
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=SPAWN) as pool:
        fetched = pool.submit(_spawned_fetcher, root, [keys[1], keys[0]]).result(timeout=120)
    assert fetched == [
        (staged[1].digest, bits(staged[1].generation_log_probs_delta), None),
        (staged[0].digest, bits(log_probs), {"z": -0.0}),
    ]
    assert bits([fetched[1][2]["z"]]) == bits([-0.0])


def _failing(real: Callable[..., Any], on_call: int) -> Callable[..., Any]:
    calls = [0]

    def fail_once(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == on_call:
            raise OSError(28, "No space left on device (simulated)")
        return real(*args, **kwargs)

    return fail_once


@pytest.mark.parametrize(
    ("function", "on_call"),
    [
        ("open", 1),  # the key's lock file
        ("open", 2),  # the temporary file
        ("write", 1),
        ("fsync", 1),  # the temporary file
        ("link", 1),
        ("fsync", 2),  # the directory, after the link
    ],
)
def test_a_file_system_error_fails_the_stage_and_leaves_nothing_fetchable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, function: str, on_call: int
) -> None:
    store = FileStagingStore(tmp_path / "staging")
    with monkeypatch.context() as patch:
        patch.setattr(os, function, _failing(getattr(os, function), on_call))
        result = store.stage(record(), attachments={"a": b"x"})
    assert not result.ok
    assert result.error is not None
    assert "No space left on device (simulated)" in result.error
    assert_missing(store, "rollout-1/call-1")
    assert_missing(FileStagingStore(tmp_path / "staging"), "rollout-1/call-1")
    assert os.listdir(tmp_path / "staging" / "calls") == []
    assert store.stage(record(), attachments={"a": b"x"}).ok
    assert store.fetch(["rollout-1/call-1"])[0].digest == record().digest


def test_a_damaged_file_is_reported_not_returned_nor_replaced(tmp_path: Path) -> None:
    store = FileStagingStore(tmp_path / "staging")
    assert store.stage(record()).ok
    (path,) = (tmp_path / "staging" / "calls").iterdir()
    path.write_bytes(path.read_bytes().replace(b'"weight_version": 3', b'"weight_version": 4'))
    with pytest.raises(StagedCallCorruptError, match="digest"):
        store.fetch(["rollout-1/call-1"])
    result = store.stage(record())
    assert not result.ok
    assert "unreadable" in (result.error or "")
    assert b'"weight_version": 4' in path.read_bytes()


def test_a_file_under_another_keys_name_is_reported(tmp_path: Path) -> None:
    store = FileStagingStore(tmp_path / "staging")
    assert store.stage(record("a", "1")).ok
    assert store.stage(record("b", "1")).ok
    first, second = sorted((tmp_path / "staging" / "calls").iterdir())
    first.write_bytes(second.read_bytes())
    with pytest.raises(StagedCallCorruptError, match="holds the call of key"):
        store.fetch(["a/1", "b/1"])


def test_leftover_temporary_files_are_never_read(tmp_path: Path) -> None:
    store = FileStagingStore(tmp_path / "staging")
    (tmp_path / "staging" / "calls" / ".tmp-1-dead").write_bytes(b"half a wri")
    assert store.stage(record()).ok
    assert store.fetch(["rollout-1/call-1"])[0].digest == record().digest
