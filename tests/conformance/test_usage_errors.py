"""A target that cannot be imported or built is a usage error: exit code 4, one message that
points at the user's own code, and no check run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BAD = """
class Refuses:
    def __init__(self, root, password):
        raise RuntimeError(f"cannot open {root} with {password}")
"""


def run(pytester: pytest.Pytester, sink: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(bad=BAD)
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--tokcap-sink={sink}", "--tokcap-report=r.json", *args
    )


def assert_usage_error(result: pytest.RunResult) -> str:
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "test_contract.py" not in result.stdout.str()
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1, result.stderr.str()
    return result.stderr.str()


def test_module_that_does_not_import(pytester: pytest.Pytester) -> None:
    """A target module that does not exist is one message naming it, and no check runs."""
    text = assert_usage_error(run(pytester, "no_such_module:Sink"))
    assert "module 'no_such_module' cannot be imported" in text
    assert "ModuleNotFoundError" in text


def test_name_missing_from_the_module(pytester: pytest.Pytester) -> None:
    """A class the module does not define is named with the module's file."""
    text = assert_usage_error(run(pytester, "bad:Missing"))
    assert "has no attribute 'Missing'" in text
    assert str(pytester.path / "bad.py") in text


def test_constructor_that_raises_shows_the_users_frame(pytester: pytest.Pytester) -> None:
    """A constructor's error points at the line in the user's file, values masked."""
    kwargs = '{"root": "{tmp_path}", "password": "pw-use-err-SECRET"}'
    result = run(pytester, "bad:Refuses", f"--tokcap-sink-kwargs={kwargs}")
    text = assert_usage_error(result)
    assert "the constructor raised with kwargs named password, root" in text
    assert f"at {pytester.path / 'bad.py'}:3 in __init__" in text
    assert 'raise RuntimeError(f"cannot open {root} with {password}")' in text
    assert "pw-use-err-SECRET" not in result.stdout.str() + text


def test_usage_error_still_writes_a_report(pytester: pytest.Pytester) -> None:
    """The JSON report of a refused target says the run was interrupted, and why."""
    run(pytester, "bad:Missing")
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["run"]["status"] == "interrupted"
    assert "usage error" in report["run"]["reason"]
    assert report["clauses"] == {}


def test_a_module_beside_the_pytest_script_names_the_fix(pytester: pytest.Pytester) -> None:
    """Under the pytest script a module in the current folder does not import, and the error
    says why and how to put the folder on sys.path."""
    pytester.makepyfile(mysink="class SqliteSink:\n    pass\n")
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("pytest")), "--tokcap-sink=mysink:SqliteSink"],
        cwd=pytester.path,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    text = " ".join(done.stderr.split())
    assert (
        f"Python looks 'mysink' up on sys.path, and the current folder {pytester.path}, which "
        "holds mysink.py, is not on it: run `python -m pytest ...` (it puts the current folder "
        "on sys.path, the `pytest` script does not), or `PYTHONPATH=. pytest ...`"
    ) in text


def test_a_module_found_nowhere_says_where_python_looked(pytester: pytest.Pytester) -> None:
    """A module in no folder on sys.path is named with the current folder and the fixes."""
    text = assert_usage_error(run(pytester, "no_such_module:Sink"))
    assert (
        f"Python looks 'no_such_module' up on sys.path, which holds the current folder "
        f"{pytester.path}; no folder on it has no_such_module.py or no_such_module/."
    ) in text
    assert "`python -m pytest ...`" in text


def test_a_missing_dependency_of_the_module_gets_no_path_advice(
    pytester: pytest.Pytester,
) -> None:
    """A module that imports but lacks one of its own imports is not told about sys.path."""
    pytester.makepyfile(needs="import no_such_dependency\n")
    text = assert_usage_error(run(pytester, "needs:Sink"))
    assert "No module named 'no_such_dependency'" in text
    assert "sys.path" not in text


def test_a_module_missing_from_its_package_names_the_package(pytester: pytest.Pytester) -> None:
    """A package that imports but lacks the named module is named with its folder."""
    pytester.mkpydir("my_pkg")
    text = assert_usage_error(run(pytester, "my_pkg.sinks:Sink"))
    assert (
        f"Python found the package 'my_pkg' at {pytester.path / 'my_pkg'}, and no module "
        "'sinks' in it: name a module the package holds"
    ) in text
