"""The pinned NeMo Gym wheel: fetched once, checked against its pinned digest, partly unpacked."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from interop.gym_release import (
    DATA,
    MODULES,
    STAND_INS,
    PinnedWheel,
    WheelUnavailable,
    fetch_wheel,
    pinned_wheel,
    sha256_of,
    unpack,
)


class CopyingDownload:
    """A download that copies one file in under the wheel's name, counting its calls."""

    def __init__(self, source: Path | None = None, data: bytes = b"") -> None:
        self.source = source
        self.data = data
        self.calls = 0

    def __call__(self, pin: PinnedWheel, into: Path) -> None:
        self.calls += 1
        if self.source is not None:
            shutil.copy(self.source, into / pin.filename)
        else:
            (into / pin.filename).write_bytes(self.data)


def test_the_pin_names_the_release_and_its_digest(gym_pin: PinnedWheel) -> None:
    """constraints.txt pins nemo-gym 0.7.0 by version and a 64-digit sha256."""
    assert gym_pin.requirement == "nemo-gym==0.7.0"
    assert gym_pin.filename == "nemo_gym-0.7.0-py3-none-any.whl"
    assert len(gym_pin.sha256) == 64
    assert int(gym_pin.sha256, 16) >= 0


def test_the_fetched_wheel_is_the_pinned_build(gym_wheel: Path, gym_pin: PinnedWheel) -> None:
    """The wheel the suite judges against has exactly the pinned digest."""
    assert sha256_of(gym_wheel) == gym_pin.sha256


def test_a_cached_wheel_is_not_downloaded_again(
    gym_wheel: Path, gym_pin: PinnedWheel, tmp_path: Path
) -> None:
    """The first fetch downloads, the second finds the good copy in the cache."""
    download = CopyingDownload(gym_wheel)
    first = fetch_wheel(gym_pin, tmp_path, download)
    second = fetch_wheel(gym_pin, tmp_path, download)
    assert first == second
    assert download.calls == 1


def test_a_tampered_cached_wheel_is_fetched_again(
    gym_wheel: Path, gym_pin: PinnedWheel, tmp_path: Path
) -> None:
    """A cached file of another digest is replaced by a fresh download of the pinned one."""
    (tmp_path / gym_pin.filename).write_bytes(b"not the release")
    download = CopyingDownload(gym_wheel)
    fetched = fetch_wheel(gym_pin, tmp_path, download)
    assert download.calls == 1
    assert sha256_of(fetched) == gym_pin.sha256


def test_a_download_of_another_build_is_refused(gym_pin: PinnedWheel, tmp_path: Path) -> None:
    """A downloaded wheel whose digest is not the pin's is refused, naming the pinned digest."""
    with pytest.raises(WheelUnavailable, match=f"pins {gym_pin.sha256}"):
        fetch_wheel(gym_pin, tmp_path, CopyingDownload(data=b"another build"))
    assert not (tmp_path / gym_pin.filename).exists()


def test_a_download_that_writes_nothing_is_refused(gym_pin: PinnedWheel, tmp_path: Path) -> None:
    """A download that leaves no wheel is a failure naming the wheel, not a skip."""
    with pytest.raises(WheelUnavailable, match=gym_pin.filename):
        fetch_wheel(gym_pin, tmp_path, lambda pin, into: None)


def test_an_unpinned_distribution_is_refused(tmp_path: Path) -> None:
    """Asking for a wheel constraints.txt does not pin raises, naming the distribution."""
    with pytest.raises(WheelUnavailable, match="no-such-dist"):
        pinned_wheel("no-such-dist")


def test_only_the_capture_modules_are_unpacked(
    gym_wheel: Path, gym_pin: PinnedWheel, tmp_path: Path
) -> None:
    """Unpacking writes the needed capture modules and data files and empty stand-ins, and
    nothing else but the marker saying it is complete."""
    root = unpack(gym_wheel, gym_pin, tmp_path)
    written = {path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()}
    needed = {f"nemo_gym/token_id_capture/{name}" for name in MODULES + DATA}
    assert written == needed | set(STAND_INS) | {".complete"}
    for stand_in in STAND_INS:
        body = ast.parse((root / stand_in).read_text(encoding="utf-8")).body
        assert [type(node) for node in body] == [ast.Expr], stand_in


def test_the_release_imports_here(gym: object) -> None:
    """The released record has its 24 fields and the store is Gym's own class."""
    records = gym.records  # type: ignore[attr-defined]
    assert len(records.TokenEntry.model_fields) == 24
    assert records.TOKEN_ENTRY_RECORD_SCHEMA_VERSION == 1
    assert gym.store.TokenCaptureStore.__module__ == "nemo_gym.token_id_capture.store"  # type: ignore[attr-defined]
