"""One rollout's log file: locking, catching up, repair and refusal (reference._file_log)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reference._file_log import RolloutLog, log_name, rollout_id_of
from reference._file_records import entry_record, freeze_record, mark_record, seal
from tokcap_spec.errors import CorruptStoreError, StoreWriteError
from tokcap_spec.records import TokenEntry

MakeLog = Callable[..., RolloutLog]


def payload(call: str) -> bytes:
    return TokenEntry(rollout_id="r", model_call_id=call).to_json_bytes()


@pytest.fixture
def dir_fd(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


@pytest.fixture
def logs() -> Iterator[list[RolloutLog]]:
    opened: list[RolloutLog] = []
    yield opened
    for log in opened:
        log.close()


@pytest.fixture
def make(tmp_path: Path, dir_fd: int, logs: list[RolloutLog]) -> MakeLog:
    def build(rollout_id: str = "r") -> RolloutLog:
        log = RolloutLog(dir_fd, str(tmp_path), rollout_id)
        logs.append(log)
        return log

    return build


def write(log: RolloutLog, *calls: str) -> None:
    with log.locked(create=True):
        log.append([entry_record(call, payload(call)) for call in calls])


class TestNames:
    @pytest.mark.parametrize("rollout_id", ["r", "Run.1", "a" * 200, "a-b_c.d"])
    def test_a_log_name_maps_back_to_its_id(self, rollout_id: str) -> None:
        """Every log name reads back as the rollout id it was made from."""
        assert rollout_id_of(log_name(rollout_id)) == rollout_id

    def test_ids_differing_by_case_never_share_a_name_on_any_file_system(self) -> None:
        """Names of ids that differ only by case differ even when compared case-insensitively."""
        assert log_name("Run").lower() != log_name("run").lower()

    def test_a_log_name_fits_in_one_path_component(self) -> None:
        """The longest id still makes a file name of at most 255 bytes."""
        assert len(log_name("a" * 200).encode()) <= 255

    @pytest.mark.parametrize(
        "name", ["notes.txt", ".r.0123456789ab.log.1.x.tmp", "r.000000000000.log", ".log"]
    )
    def test_other_files_are_not_logs(self, name: str) -> None:
        """Names the store did not make map to no rollout."""
        assert rollout_id_of(name) is None


class TestLocked:
    def test_a_missing_log_is_not_created_unless_asked(self, make: MakeLog, tmp_path: Path) -> None:
        """Without create a missing log stays missing; with create it appears empty."""
        log = make()
        with log.locked(create=False) as exists:
            assert not exists
        assert not (tmp_path / log.name).exists()
        with log.locked(create=True) as exists:
            assert exists
            assert not log.state.opened
        assert (tmp_path / log.name).read_bytes() == b""

    def test_the_first_append_writes_the_header(self, make: MakeLog, tmp_path: Path) -> None:
        """The first append starts the file with the open header, then the records."""
        log = make()
        write(log, "a")
        lines = (tmp_path / log.name).read_bytes().splitlines()
        assert lines[0].startswith(b'{"epoch":')
        assert lines[1].startswith(b'{"kind":"entry"')
        assert log.state.opened

    def test_another_handle_catches_up_on_appends(self, make: MakeLog) -> None:
        """A second handle sees what the first appended since it last looked."""
        first, second = make(), make()
        write(first, "a")
        with second.locked(create=False):
            assert set(second.state.digests) == {"a"}
        write(first, "b")
        with first.locked(create=True):
            first.append([freeze_record()])
        with second.locked(create=False):
            assert set(second.state.digests) == {"a", "b"}
            assert second.state.frozen
            assert second.state.epoch == first.state.epoch

    def test_a_replaced_file_is_reopened(self, make: MakeLog) -> None:
        """A handle notices that the name now holds another file and reads that one."""
        first, second = make(), make()
        write(first, "a")
        with second.locked(create=False):
            assert second.state.digests
        with first.locked(create=False):
            first.replace_with_tombstone("retire", 5.0)
        with second.locked(create=False):
            assert second.state.retired
            assert second.state.retired_at == 5.0

    def test_a_removed_file_is_noticed(self, make: MakeLog) -> None:
        """A handle whose file was removed sees the rollout as missing."""
        first, second = make(), make()
        write(first, "a")
        with second.locked(create=False):
            pass
        with first.locked(create=False):
            first.remove()
        with second.locked(create=False) as exists:
            assert not exists


class TestRepair:
    def test_a_torn_tail_is_truncated(self, make: MakeLog, tmp_path: Path) -> None:
        """An unterminated last line is cut off durably and the records before it are kept."""
        log = make()
        write(log, "a")
        path = tmp_path / log.name
        whole = path.read_bytes()
        with path.open("ab") as handle:
            handle.write(b'{"kind":"mark","ca')
        reader = make()
        with reader.locked(create=False):
            assert set(reader.state.digests) == {"a"}
            assert not reader.state.marked
        assert path.read_bytes() == whole

    def test_a_torn_header_leaves_an_empty_log(self, make: MakeLog, tmp_path: Path) -> None:
        """A crash during the very first append leaves a log that starts again cleanly."""
        log = make()
        (tmp_path / log.name).write_bytes(b'{"epoch":"e')
        write(log, "a")
        with make().locked(create=False) as exists:
            assert exists
        assert set(log.state.digests) == {"a"}

    def test_damage_before_the_tail_is_refused(self, make: MakeLog, tmp_path: Path) -> None:
        """A bad line followed by a good one raises CorruptStoreError naming file and line."""
        log = make()
        write(log, "a", "b")
        path = tmp_path / log.name
        lines = path.read_bytes().splitlines(keepends=True)
        lines[1] = b"{oops}\n"
        path.write_bytes(b"".join(lines))
        reader = make()
        with (
            pytest.raises(CorruptStoreError, match=rf"{log.name}: line 2 is not a valid record"),
            reader.locked(create=False),
        ):
            pass

    @pytest.mark.parametrize(
        ("line", "reason"),
        [
            (seal(b'{"kind":"entry","call":"b","entry":{"model_call_id":oops}}\n'), "refuses"),
            (
                entry_record("b", payload("c")).encode(sealed=True),
                "files the entry of call 'c' under call 'b'",
            ),
        ],
        ids=["bad-json", "misfiled"],
    )
    def test_an_entry_that_does_not_parse_is_refused_at_freeze(
        self, make: MakeLog, tmp_path: Path, line: bytes, reason: str
    ) -> None:
        """An entry whose payload is damaged raises CorruptStoreError naming its line."""
        log = make()
        write(log, "a")
        with (tmp_path / log.name).open("ab") as handle:
            handle.write(line)
        with (
            log.locked(create=False),
            pytest.raises(CorruptStoreError, match=rf"line 3 .*{reason}"),
        ):
            log.entries()

    def test_entries_are_fresh_and_unique(self, make: MakeLog, tmp_path: Path) -> None:
        """Entries come back once per call, first payload first, new objects every time."""
        log = make()
        write(log, "a", "b")
        with (tmp_path / log.name).open("ab") as handle:
            other = TokenEntry(rollout_id="r", model_call_id="a", model="other")
            handle.write(entry_record("a", other.to_json_bytes()).encode(sealed=True))
        with log.locked(create=False):
            first, second = log.entries(), log.entries()
        assert [(e.model_call_id, e.model) for e in first] == [("a", ""), ("b", "")]
        assert first == second
        assert first[0] is not second[0]

    def test_a_file_shrunk_behind_the_reader_is_refused(
        self, make: MakeLog, tmp_path: Path
    ) -> None:
        """A log truncated below what a handle already read raises CorruptStoreError."""
        log = make()
        write(log, "a", "b")
        path = tmp_path / log.name
        os.truncate(path, 10)
        with pytest.raises(CorruptStoreError, match="shrank"), log.locked(create=False):
            pass


class TestRefusal:
    def test_a_symlink_is_refused(self, make: MakeLog, tmp_path: Path) -> None:
        """A symlink at the log's name is never opened, with or without create."""
        log = make()
        target = tmp_path / "target"
        target.write_bytes(b"")
        (tmp_path / log.name).symlink_to(target)
        for create in (False, True):
            with pytest.raises(CorruptStoreError, match="symlink"), log.locked(create=create):
                pass
        assert target.read_bytes() == b""

    def test_a_dangling_symlink_is_not_followed_to_create(
        self, make: MakeLog, tmp_path: Path
    ) -> None:
        """A dangling symlink is refused instead of creating its target."""
        log = make()
        (tmp_path / log.name).symlink_to(tmp_path / "created-through-link")
        with pytest.raises(CorruptStoreError, match="symlink"), log.locked(create=True):
            pass
        assert not (tmp_path / "created-through-link").exists()

    def test_a_fifo_is_refused(self, make: MakeLog, tmp_path: Path) -> None:
        """Something that is not a regular file is refused without blocking on it."""
        log = make()
        os.mkfifo(tmp_path / log.name)
        with pytest.raises(CorruptStoreError, match="regular file"), log.locked(create=True):
            pass

    def test_an_ever_changing_file_is_refused(
        self, make: MakeLog, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A name whose inode never matches the locked file raises instead of spinning."""
        log = make()
        write(log, "a")
        log.close()
        real_stat = os.stat

        def moving_stat(*args: object, **kwargs: object) -> os.stat_result:
            found = real_stat(*args, **kwargs)  # type: ignore[arg-type]
            fields = list(found)
            fields[1] += 1
            return os.stat_result(fields)

        monkeypatch.setattr("reference._file_log.os.stat", moving_stat)
        with pytest.raises(CorruptStoreError, match="changed every time"), log.locked(create=False):
            pass

    def test_a_directory_is_refused(self, make: MakeLog, tmp_path: Path) -> None:
        """A directory at the log's name is refused as not a regular file."""
        log = make()
        (tmp_path / log.name).mkdir()
        with pytest.raises(CorruptStoreError, match="regular file"), log.locked(create=True):
            pass

    def test_a_failed_append_acknowledges_nothing(
        self, make: MakeLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """When the sync fails, the bytes are cut off again and StoreWriteError is raised."""
        log = make()
        write(log, "a")
        before = (tmp_path / log.name).read_bytes()

        def fail(fd: int) -> None:
            raise OSError(5, "I/O error")

        monkeypatch.setattr("reference._file_log._sync_data", fail)
        with pytest.raises(StoreWriteError, match="could not append"), log.locked(create=True):
            log.append([mark_record("", "x")])
        monkeypatch.undo()
        assert (tmp_path / log.name).read_bytes() == before
        with log.locked(create=False):
            assert not log.state.marked


class TestFormats:
    def test_a_new_log_is_sealed_line_by_line(self, make: MakeLog, tmp_path: Path) -> None:
        """Every line a new log gets, header included, carries its checksum (format 4)."""
        log = make()
        write(log, "a")
        with log.locked(create=False):
            log.append([mark_record("a", "x"), freeze_record()])
        lines = (tmp_path / log.name).read_bytes().splitlines(keepends=True)
        assert len(lines) == 4
        assert lines[0].startswith(b'{"epoch":')
        assert b'"format":4' in lines[0]
        assert all(line == seal(line[: -len(b',"crc":"01234567"}\n')] + b"}\n") for line in lines)

    def test_a_format_1_log_is_read_and_stays_in_format_1(
        self, make: MakeLog, tmp_path: Path
    ) -> None:
        """A log begun without checksums still freezes, and new lines match its format."""
        header = b'{"epoch":"old","format":1,"kind":"open","rollout_id":"r"}\n'
        old, new = entry_record("a", payload("a")), entry_record("b", payload("b"))
        path = tmp_path / log_name("r")
        path.write_bytes(header + old.line)
        log = make()
        with log.locked(create=False):
            log.append([new, freeze_record()])
            assert [e.model_call_id for e in log.entries()] == ["a", "b"]
            assert (log.state.sealed, log.state.version) == (False, 2)
        assert path.read_bytes() == header + old.line + new.line + freeze_record().line

    def test_a_sealed_line_in_a_format_1_log_is_refused(
        self, make: MakeLog, tmp_path: Path
    ) -> None:
        """Lines of one log share its format; a checksum where none belongs is not a record."""
        header = b'{"epoch":"old","format":1,"kind":"open","rollout_id":"r"}\n'
        (tmp_path / log_name("r")).write_bytes(header + freeze_record().encode(sealed=True))
        with (
            pytest.raises(CorruptStoreError, match=r"line 2 .*carries a checksum, but the log's"),
            make().locked(create=False),
        ):
            pass

    def test_an_entry_damaged_after_replay_is_refused_at_freeze(
        self, make: MakeLog, tmp_path: Path
    ) -> None:
        """Freeze reads every entry again and checks its sum again: rot since replay is caught."""
        log = make()
        write(log, "a", "b")
        path = tmp_path / log.name
        with log.locked(create=False):
            data = bytearray(path.read_bytes())
            at = data.rindex(b'"model":""')
            data[at + 2] ^= 0b1  # 'm' becomes 'l'
            path.write_bytes(bytes(data))
            with pytest.raises(CorruptStoreError, match="line 3 changed since it was replayed"):
                log.entries()
