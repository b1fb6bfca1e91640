"""FileTokenStore given bad input: odd ids, unvalidated entries and damaged or planted files.

Every outcome must be a snapshot that tells the truth, a repaired tail, or a typed
:class:`~tokcap_spec.errors.TokenCaptureError` (an ``InvalidRolloutIdError``, a
``CorruptStoreError``, ...). An untyped exception from deep inside (``KeyError``,
``UnicodeDecodeError``, ``RecursionError``, a pydantic error) fails the test by escaping it, and
every store call runs under a timeout, so a hang fails too.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference._file_log import log_name
from reference._file_records import OPEN, parse_frame, seal
from reference.file_store import FileTokenStore
from tokcap_spec.errors import (
    CorruptStoreError,
    InvalidEntryError,
    InvalidRolloutIdError,
    TokenCaptureError,
)
from tokcap_spec.ids import ROLLOUT_ID_PATTERN, is_valid_rollout_id
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry

T = TypeVar("T")

HANG_SECONDS = 60.0
"""A store call that takes longer than this is a hang."""

FUZZ = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
"""Few examples, and the same ones on every run: a CI failure replays exactly on any machine."""


ROLLOUT = "fuzzed"
CALLS = ("c0", "c1", "c2", "c3")


def run(awaitable: Awaitable[T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(awaitable, HANG_SECONDS)

    return asyncio.run(bounded())


def entry(rollout_id: str, call: str, seed: int = 0) -> TokenEntry:
    return TokenEntry(
        rollout_id=rollout_id,
        model_call_id=call,
        model="m",
        prompt_token_ids=[100 + seed, 2, 30_000],
        generation_token_ids=[5, 60_000 + seed],
        generation_log_probs=[float("-inf"), -0.125],
        created_at=1.5,
    )


def payloads(snapshot: TokenCaptureSnapshot) -> dict[str, bytes]:
    return {e.model_call_id: e.to_json_bytes() for e in snapshot.entries}


ORIGINAL = {call: entry(ROLLOUT, call, seed).to_json_bytes() for seed, call in enumerate(CALLS)}


def fresh_freeze(root: str | Path, rollout_id: str = ROLLOUT) -> TokenCaptureSnapshot:
    async def freeze() -> TokenCaptureSnapshot:
        store = FileTokenStore(root)
        try:
            return await store.freeze(rollout_id)
        finally:
            await store.close()

    return run(freeze())


def outcome(root: str | Path) -> TokenCaptureSnapshot | TokenCaptureError:
    """Freeze through a fresh instance; return the snapshot or the typed error it raised."""
    try:
        return fresh_freeze(root)
    except TokenCaptureError as exc:
        return exc


def older_header(log_format: int) -> bytes:
    """The first line of a log begun in an older format; the store appends to it in that format."""
    return seal(
        b'{"epoch":"e%d","format":%d,"kind":"open","rollout_id":"fuzzed"}\n'
        % (log_format, log_format)
    )


def write_log(root: str | Path, log_format: int = 4) -> bytes:
    """Put one entry per call (one record each) in a log of ``log_format``; return its bytes."""
    if log_format < 4:
        os.makedirs(root, exist_ok=True)
        (Path(root) / log_name(ROLLOUT)).write_bytes(older_header(log_format))

    async def fill() -> None:
        store = FileTokenStore(root)
        for seed, call in enumerate(CALLS):
            await store.put(entry(ROLLOUT, call, seed))
        await store.close()

    run(fill())
    return (Path(root) / log_name(ROLLOUT)).read_bytes()


@pytest.fixture(scope="module", params=[2, 3, 4], ids=["format2", "format3", "format4"])
def pristine(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> bytes:
    """A log of four entries, in each format the store appends to with checksums."""
    data = write_log(tmp_path_factory.mktemp("pristine"), request.param)
    assert (b'"kind":"packed"' in data) == (request.param == 3)
    assert (b'"kind":"blob"' in data) == (request.param == 4)
    return data


@pytest.fixture(scope="module")
def scratch() -> Iterator[Callable[[bytes], str]]:
    """Return a function that writes a log's bytes into a new store directory and names it."""
    with tempfile.TemporaryDirectory(prefix="tokcap-fuzz-") as base:
        count = 0

        def plant(data: bytes) -> str:
            nonlocal count
            count += 1
            root = os.path.join(base, str(count))
            os.makedirs(root)
            with open(os.path.join(root, log_name(ROLLOUT)), "wb") as handle:
                handle.write(data)
            return root

        yield plant


def frames(data: bytes) -> list[tuple[int, int]]:
    """Return where each record of an undamaged log starts and ends (a blob's bytes included)."""
    spans: list[tuple[int, int]] = []
    start, blobs = 0, False
    while start < len(data):
        record, end = parse_frame(data, start, blobs=blobs)
        blobs = blobs or (record.kind == OPEN and record.format >= 4)
        spans.append((start, end))
        start = end
    return spans


def record_ends(data: bytes) -> list[int]:
    return [end for _, end in frames(data)]


def last_line_end(data: bytes) -> int:
    """The offset of the newline that ends the last record's line: flipped, the record looks torn.

    That is the log's last byte, unless the last record is a blob, whose bytes follow its line.
    """
    start, _ = frames(data)[-1]
    return data.index(b"\n", start)


class TestTruncated:
    @FUZZ
    @given(fraction=st.floats(0.0, 1.0))
    def test_a_log_cut_anywhere_freezes_to_the_records_before_the_cut(
        self, pristine: bytes, scratch: Callable[[bytes], str], fraction: float
    ) -> None:
        """A log cut at any byte freezes clean, holding exactly the entries whose lines survive."""
        cut = round(fraction * len(pristine))
        survivors = sum(end <= cut for end in record_ends(pristine))
        expected = {call: ORIGINAL[call] for call in CALLS[: max(0, survivors - 1)]}
        snapshot = fresh_freeze(scratch(pristine[:cut]))
        assert payloads(snapshot) == expected
        assert not snapshot.incomplete
        assert snapshot.version == len(expected)

    @pytest.mark.parametrize("log_format", [3, 4])
    def test_a_packed_log_cut_at_every_offset_freezes_to_the_records_before_the_cut(
        self, scratch: Callable[[bytes], str], tmp_path: Path, log_format: int
    ) -> None:
        """Every cut of a format 3 or 4 log freezes clean to exactly the entries before the cut."""
        data = write_log(tmp_path, log_format)
        ends = record_ends(data)
        for cut in range(len(data) + 1):
            survivors = sum(end <= cut for end in ends)
            expected = {call: ORIGINAL[call] for call in CALLS[: max(0, survivors - 1)]}
            snapshot = fresh_freeze(scratch(data[:cut]))
            assert (payloads(snapshot), snapshot.incomplete) == (expected, False), cut


class TestBitFlips:
    @FUZZ
    @given(data=st.data())
    def test_a_flipped_bit_raises_a_typed_error_or_keeps_every_call(
        self, pristine: bytes, scratch: Callable[[bytes], str], data: st.DataObject
    ) -> None:
        """A flipped bit raises CorruptStoreError, or cuts the last record if it was its newline.

        Never a snapshot that holds a changed payload: every line and every blob carries a
        checksum. A blob's bytes may hold a newline, which the flipped one's line then ends at:
        that line fails its checksum.
        """
        offset = data.draw(st.integers(0, len(pristine) - 1), label="offset")
        bit = data.draw(st.integers(0, 7), label="bit")
        damaged = bytearray(pristine)
        damaged[offset] ^= 1 << bit
        result = outcome(scratch(bytes(damaged)))
        if offset == last_line_end(pristine) and isinstance(result, TokenCaptureSnapshot):
            assert payloads(result) == {call: ORIGINAL[call] for call in CALLS[:-1]}
        else:
            assert isinstance(result, CorruptStoreError)

    def test_every_single_bit_flip_is_caught(
        self, pristine: bytes, scratch: Callable[[bytes], str]
    ) -> None:
        """Each bit of the log, flipped alone, is refused (or, the last line's newline, cut)."""
        last = last_line_end(pristine)
        for offset in (*range(0, last, 7), *range(last + 1, len(pristine), 7)):
            for bit in range(8):
                damaged = bytearray(pristine)
                damaged[offset] ^= 1 << bit
                result = outcome(scratch(bytes(damaged)))
                assert isinstance(result, CorruptStoreError), (offset, bit, result)

    def test_a_flipped_bit_inside_a_token_id_is_detected(
        self, scratch: Callable[[bytes], str], tmp_path: Path
    ) -> None:
        """A flipped bit that turns one JSON token id into another raises CorruptStoreError."""
        pristine = write_log(tmp_path, 2)
        at = pristine.index(b"30000")
        damaged = bytearray(pristine)
        damaged[at] ^= 0b10  # '3' becomes '1': still a valid token id
        with pytest.raises(CorruptStoreError, match=r"line 2 .*checksum mismatch"):
            fresh_freeze(scratch(bytes(damaged)))

    @pytest.mark.parametrize("log_format", [3, 4])
    def test_every_bit_of_packed_tokens_flipped_alone_is_detected(
        self, scratch: Callable[[bytes], str], tmp_path: Path, log_format: int
    ) -> None:
        """Each bit of a packed entry's tokens, flipped alone, fails its line's or blob's sum."""
        pristine = write_log(tmp_path, log_format)
        if log_format == 3:
            start = pristine.index(b'"tokens":"') + len(b'"tokens":"')
            end = pristine.index(b'"', start)
        else:
            first, end = frames(pristine)[1]
            start = pristine.index(b"\n", first) + 1
        for offset in range(start, end):
            for bit in range(8):
                damaged = bytearray(pristine)
                damaged[offset] ^= 1 << bit
                result = outcome(scratch(bytes(damaged)))
                assert isinstance(result, CorruptStoreError), (offset, bit, result)
                assert "line 2" in str(result), (offset, bit, result)

    def test_a_flipped_bit_in_an_entrys_rollout_id_is_refused(
        self, pristine: bytes, scratch: Callable[[bytes], str]
    ) -> None:
        """A flipped bit that renames the rollout inside one entry raises CorruptStoreError."""
        at = pristine.rindex(b'"rollout_id":"fuzzed"') + len(b'"rollout_id":"fuzze')
        damaged = bytearray(pristine)
        damaged[at] ^= 1  # 'd' becomes 'e': a valid id of another rollout
        with pytest.raises(CorruptStoreError):
            fresh_freeze(scratch(bytes(damaged)))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["kind", "call", "entry", "rollout_id", "epoch", "format", "at"])
            | st.text(max_size=5),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)
kinds = st.sampled_from(
    ["open", "entry", "packed", "intent", "mark", "freeze", "tombstone", "other"]
)


class TestForeignJson:
    @FUZZ
    @given(value=json_values | st.fixed_dictionaries({"kind": kinds}, optional={"x": json_values}))
    def test_a_foreign_line_before_the_tail_never_escapes_untyped(
        self, pristine: bytes, scratch: Callable[[bytes], str], value: Any
    ) -> None:
        """A foreign JSON line before the last record raises a typed error or loses no entry."""
        last, _ = frames(pristine)[-1]
        foreign = json.dumps(value).encode() + b"\n"
        result = outcome(scratch(pristine[:last] + foreign + pristine[last:]))
        if isinstance(result, TokenCaptureError):
            return
        assert payloads(result) == ORIGINAL

    @pytest.mark.parametrize(
        "line",
        [
            pytest.param(b"[" * 100_000 + b"]" * 100_000 + b"\n", id="nested-line"),
            pytest.param(seal(b"[" * 100_000 + b"]" * 100_000 + b"}\n"), id="nested-sealed-line"),
            pytest.param(
                seal(
                    b'{"kind":"entry","call":"x","entry":{"model_call_id":"x","a":'
                    + b"[" * 100_000
                    + b"]" * 100_000
                    + b"}}\n"
                ),
                id="nested-entry",
            ),
        ],
    )
    def test_deeply_nested_json_raises_corrupt_store_error(
        self, pristine: bytes, scratch: Callable[[bytes], str], line: bytes
    ) -> None:
        """A line nested a hundred thousand levels deep raises CorruptStoreError."""
        with pytest.raises(CorruptStoreError):
            fresh_freeze(scratch(pristine + line))

    def test_an_entry_of_another_rollout_is_refused(
        self, pristine: bytes, scratch: Callable[[bytes], str]
    ) -> None:
        """A well-formed entry line whose entry names another rollout raises CorruptStoreError."""
        stranger = entry("stranger", "x").to_json_bytes()
        line = seal(b'{"kind":"entry","call":"x","entry":' + stranger + b"}\n")
        with pytest.raises(CorruptStoreError, match="holds an entry of rollout 'stranger'"):
            fresh_freeze(scratch(pristine + line))

    def test_an_entry_of_a_newer_schema_is_refused_naming_both_versions(
        self, pristine: bytes, scratch: Callable[[bytes], str]
    ) -> None:
        """An entry written by a newer schema raises CorruptStoreError naming 2 and 1."""
        newer = json.loads(entry(ROLLOUT, "x").to_json_bytes())
        newer["schema_version"] = 2
        line = seal(b'{"kind":"entry","call":"x","entry":' + json.dumps(newer).encode() + b"}\n")
        with pytest.raises(CorruptStoreError, match=r"schema_version 2.*schema_version 1"):
            fresh_freeze(scratch(pristine + line))


UNVALIDATED = {
    "nan-log-prob": {"generation_token_ids": [1], "generation_log_probs": [float("nan")]},
    "unequal-lengths": {"generation_token_ids": [1, 2], "generation_log_probs": [-1.0]},
    "token-id-too-large": {"prompt_token_ids": [2**40]},
}


@pytest.mark.parametrize("fields", UNVALIDATED.values(), ids=UNVALIDATED.keys())
def test_put_refuses_an_unvalidated_entry_that_breaks_the_record_rules(
    tmp_path: Path, fields: dict[str, Any]
) -> None:
    """An entry that skipped validation and breaks REC-3 or REC-4 is refused, never acked."""
    bad = TokenEntry.model_construct(rollout_id="r", model_call_id="c", **fields)

    async def put_then_freeze() -> TokenCaptureSnapshot:
        store = FileTokenStore(tmp_path)
        try:
            with pytest.raises(InvalidEntryError, match="was refused and nothing was stored"):
                await store.put(bad)
            return await store.freeze("r")
        finally:
            await store.close()

    assert run(put_then_freeze()).entries == ()


ids = st.one_of(
    st.text(max_size=210),
    st.from_regex(ROLLOUT_ID_PATTERN, fullmatch=True),
    st.sampled_from([".", "..", "a/b", "../x", "x\x00", "A" * 201, "-x", ".hidden", "a.log"]),
)
not_strings = st.one_of(st.none(), st.integers(), st.binary(max_size=5), st.lists(st.integers()))


class TestRolloutIds:
    @FUZZ
    @given(rollout_id=ids)
    def test_every_method_accepts_exactly_the_valid_ids(self, rollout_id: str) -> None:
        """Each method refuses an id outside the pattern with InvalidRolloutIdError, and an
        accepted id makes one file, in the root, under its own log name."""
        valid = is_valid_rollout_id(rollout_id)

        async def every_method(store: FileTokenStore) -> None:
            calls: list[Callable[[], Awaitable[object]]] = [
                lambda: store.mark_incomplete(rollout_id, "m"),
                lambda: store.begin_call(rollout_id, "b"),
                lambda: store.freeze(rollout_id),
                lambda: store.drop(rollout_id, snapshot_id="s", version=1),
                lambda: store.retire([rollout_id]),
            ]
            for call in calls:
                if valid:
                    await call()
                else:
                    with pytest.raises(InvalidRolloutIdError):
                        await call()

        with tempfile.TemporaryDirectory(prefix="tokcap-ids-") as base:
            root = os.path.join(base, "store")
            store = FileTokenStore(root)
            try:
                run(every_method(store))
            finally:
                run(store.close())
            assert os.listdir(base) == ["store"]
            assert os.listdir(root) == ([log_name(rollout_id)] if valid else [])

    @FUZZ
    @given(rollout_id=not_strings)
    def test_an_id_that_is_not_a_string_is_refused(self, rollout_id: object) -> None:
        """A rollout id that is not a str raises InvalidRolloutIdError from every method."""

        async def every_method(store: FileTokenStore) -> None:
            with pytest.raises(InvalidRolloutIdError):
                await store.freeze(rollout_id)  # type: ignore[arg-type]
            with pytest.raises(InvalidRolloutIdError):
                await store.mark_incomplete(rollout_id)  # type: ignore[arg-type]
            with pytest.raises(InvalidRolloutIdError):
                await store.drop(rollout_id, snapshot_id="s", version=0)  # type: ignore[arg-type]
            with pytest.raises(InvalidRolloutIdError):
                await store.retire([rollout_id])  # type: ignore[list-item]

        with tempfile.TemporaryDirectory(prefix="tokcap-ids-") as root:
            store = FileTokenStore(root)
            try:
                run(every_method(store))
            finally:
                run(store.close())
            assert os.listdir(root) == []


def plant_symlink_to_file(path: Path, outside: Path) -> None:
    path.symlink_to(outside / "precious")


def plant_dangling_symlink(path: Path, outside: Path) -> None:
    path.symlink_to(outside / "missing")


def plant_symlink_to_directory(path: Path, outside: Path) -> None:
    path.symlink_to(outside)


def plant_symlink_loop(path: Path, outside: Path) -> None:
    path.symlink_to(path)


def plant_hard_link_to_file(path: Path, outside: Path) -> None:
    os.link(outside / "precious", path)


def plant_directory(path: Path, outside: Path) -> None:
    path.mkdir()


def plant_fifo(path: Path, outside: Path) -> None:
    os.mkfifo(path)


PLANTS = [
    plant_symlink_to_file,
    plant_hard_link_to_file,
    plant_dangling_symlink,
    plant_symlink_to_directory,
    plant_symlink_loop,
    plant_directory,
    plant_fifo,
]
OPERATIONS: dict[str, Callable[[FileTokenStore], Awaitable[object]]] = {
    "put": lambda store: store.put(entry("r", "c")),
    "mark_incomplete": lambda store: store.mark_incomplete("r"),
    "begin_call": lambda store: store.begin_call("r", "c"),
    "freeze": lambda store: store.freeze("r"),
    "drop": lambda store: store.drop("r", snapshot_id="s", version=0),
    "retire": lambda store: store.retire(["r"]),
    "delete": lambda store: store.delete(["r"]),
}


@pytest.mark.parametrize("plant", PLANTS, ids=[p.__name__.removeprefix("plant_") for p in PLANTS])
@pytest.mark.parametrize("operation", OPERATIONS.values(), ids=OPERATIONS.keys())
def test_something_planted_at_a_log_name_is_refused_and_left_alone(
    tmp_path: Path,
    plant: Callable[[Path, Path], None],
    operation: Callable[[FileTokenStore], Awaitable[object]],
) -> None:
    """Whatever is planted at a log's name raises CorruptStoreError; it and its target stay.

    The target's last line looks torn, so a store that cut torn tails first would shorten it.
    """
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(PRECIOUS)
    root = tmp_path / "store"
    root.mkdir()
    planted = root / log_name("r")
    plant(planted, outside)
    kind = os.lstat(planted).st_mode

    async def attempt() -> None:
        store = FileTokenStore(root)
        try:
            with pytest.raises(CorruptStoreError):
                await operation(store)
        finally:
            await store.close()

    run(attempt())
    assert os.lstat(planted).st_mode == kind
    assert sorted(os.listdir(outside)) == ["precious"]
    assert (outside / "precious").read_bytes() == PRECIOUS


PRECIOUS = b"precious first line\nprecious unfinished tail"


def test_sweeping_never_follows_a_planted_symlink(tmp_path: Path) -> None:
    """A sweep removes no symlink named like a tombstone or a temporary file, nor its target."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b'{"at":0,"kind":"tombstone"}\n')
    root = tmp_path / "store"
    root.mkdir()
    planted = [root / log_name("r"), root / f".{log_name('r')}.1.abc.tmp"]
    for path in planted:
        path.symlink_to(outside / "precious")
    os.utime(outside / "precious", (0, 0))

    async def sweep() -> int:
        store = FileTokenStore(root)
        try:
            return await store.sweep_tombstones(0)
        finally:
            await store.close()

    assert run(sweep()) == 0
    assert all(path.is_symlink() for path in planted)
    assert (outside / "precious").read_bytes() == b'{"at":0,"kind":"tombstone"}\n'
