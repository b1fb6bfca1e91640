"""No kwarg value, nor the secret part of a URL among them, reaches anything the run prints or
writes: terminal (long tracebacks with locals included), captured output, junit, reports,
timelines."""

from __future__ import annotations

from pathlib import Path

import pytest

TOKEN = "tok-9f2c-LEAKME"
PASSWORD = "pw-7Hq-LEAKME"
URL = f"redis://alice:{PASSWORD}@localhost:6399/0"
SECRETS = (TOKEN, PASSWORD, URL)

LEAKY = '''
import sys
from urllib.parse import urlsplit
from reference import FileTokenStore

class Leaky(FileTokenStore):
    """Quotes its token and the URL's password in errors and output; hides one entry."""

    def __init__(self, root, token, url):
        super().__init__(root)
        self.token, self.url, self.password = token, url, urlsplit(url).password
        print(f"connecting to {url} with {token}")
        print(f"password {self.password}", file=sys.stderr)

    async def put(self, entry):
        secret_in_a_local = f"AUTH {self.password} rejected"
        if entry.model_call_id.endswith(("s0", "-1", "c2")):
            print(f"put failed: {secret_in_a_local} token {self.token}")
            print(f"stderr: {self.password}", file=sys.stderr)
            raise ConnectionError(f"{secret_in_a_local} for {self.url} (token {self.token})")
        await super().put(entry)

    async def freeze(self, rollout_id):
        snapshot = await super().freeze(rollout_id)
        kept = tuple(e for e in snapshot.entries if e.model_call_id != "w0-c1")
        return type(snapshot)(
            snapshot.rollout_id, kept, snapshot.incomplete, snapshot.snapshot_id, snapshot.version
        )
'''


def written_files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


@pytest.mark.parametrize("traceback", [["--tb=long", "-l"], ["--tb=short"]])
def test_secrets_appear_in_no_byte_of_output_or_files(
    pytester: pytest.Pytester, traceback: list[str]
) -> None:
    """A sink quoting its secrets in errors and prints leaks none of them anywhere."""
    pytester.makepyfile(leaky=LEAKY)
    kwargs = f'{{"root": "{{tmp_path}}", "token": "{TOKEN}", "url": "{URL}"}}'
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-rA",
        *traceback,
        "--tokcap-sink=leaky:Leaky",
        f"--tokcap-sink-kwargs={kwargs}",
        "--tokcap-report=out/r.json",
        "--tokcap-report-md=out/r.md",
        "--junitxml=out/junit.xml",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    output = (result.stdout.str() + result.stderr.str()).encode()
    files = written_files(pytester.path)
    names = {path.name for path in files}
    assert {"r.json", "r.md", "junit.xml"} <= names
    assert any(name.endswith("-timeline.html") for name in names), sorted(names)
    assert "***" in output.decode()
    for secret in SECRETS:
        assert secret.encode() not in output
        leaking = [str(path) for path in files if secret.encode() in path.read_bytes()]
        assert leaking == []
