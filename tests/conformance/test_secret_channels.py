"""Every channel pytest has masks the run's secrets: warnings, live and file logging, raw
output while the kit builds the target, exceptions in threads and ``__del__``, an interrupt's
message, and every encoded form of a URL's secrets. Each channel carries a value of its own
that occurs nowhere else, so a leak names the channel."""

from __future__ import annotations

import base64
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

WARNED = "warned-5qT-LEAKME"
LOGGED = "logged-8Wd-LEAKME"
WRITTEN = "fd-written-3Zr-LEAKME"
ECHOED = "echoed-6Kp-LEAKME"
THREAD = "thread-2Hx-LEAKME"
UNRAISABLE = "unraisable-9Ge-LEAKME"
PASSWORD = "p@ss word/7Mq-LEAKME"
QUERY = "q+v/4Nf LEAKME"
USER = "alice"
URL = f"redis://{USER}:{quote(PASSWORD, safe='')}@localhost:6399/0?password={quote_plus(QUERY)}"
INTERRUPT = "interrupt-1Bv-LEAKME"

ENCODED = {
    "percent-encoded password": quote(PASSWORD, safe=""),
    "password with + for space": quote_plus(PASSWORD),
    "query value as written": quote_plus(QUERY),
    "query value percent-encoded": quote(QUERY, safe=""),
    "query value decoded": QUERY,
    "basic auth of the user info": base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode(),
}

HOSTILE = '''
import base64, gc, logging, os, subprocess, sys, threading, warnings
from urllib.parse import quote, quote_plus, unquote_plus, urlsplit
from reference import FileTokenStore

log = logging.getLogger("hostile")

class Telltale:
    """Raises in __del__, and quotes a secret in its repr."""
    def __init__(self, secret):
        self.secret = secret
    def __repr__(self):
        return f"Telltale({self.secret})"
    def __del__(self):
        raise ValueError(f"del {self.secret}")

class Hostile(FileTokenStore):
    """Sends each secret down one channel pytest has; hides one entry so FREEZE-5 fails."""

    def __init__(self, root, warned, logged, written, echoed, thread, unraisable, url):
        super().__init__(root)
        self.secrets = dict(warned=warned, logged=logged, thread=thread, unraisable=unraisable)
        os.write(1, f"wrote {written}\\n".encode())
        os.write(2, f"wrote {written} to 2\\n".encode())
        subprocess.run(["echo", f"child echoed {echoed}"], check=True)
        parts = urlsplit(url)
        query = parts.query.partition("=")[2]
        password = unquote_plus(parts.password)
        self.forms = [
            parts.password, quote_plus(password), query, quote(unquote_plus(query), safe=""),
            unquote_plus(query), base64.b64encode(f"{parts.username}:{password}".encode()).decode(),
        ]

    async def put(self, entry):
        secrets = self.secrets
        if entry.model_call_id.endswith(("s0", "-1", "c2")):
            warnings.warn(f"warned about {secrets['warned']}")
            log.warning("logged %s", secrets["logged"])
            try:
                raise RuntimeError(f"caught {secrets['logged']}")
            except RuntimeError:
                log.exception("logged with a traceback")
            worker = threading.Thread(target=self._raise, args=(secrets["thread"],))
            worker.start()
            worker.join()
            Telltale(secrets["unraisable"])
            gc.collect()
            raise ConnectionError("rejected: " + " | ".join(self.forms))
        await super().put(entry)

    @staticmethod
    def _raise(secret):
        raise RuntimeError(f"thread {secret}")

    async def freeze(self, rollout_id):
        snapshot = await super().freeze(rollout_id)
        kept = tuple(e for e in snapshot.entries if e.model_call_id != "w0-c1")
        return type(snapshot)(
            snapshot.rollout_id, kept, snapshot.incomplete, snapshot.snapshot_id, snapshot.version
        )

class InterruptsWithItsToken(FileTokenStore):
    def __init__(self, root, token):
        super().__init__(root)
        self.token = token

    async def put(self, entry):
        raise KeyboardInterrupt(f"stopped with {self.token}")
'''

SECRETS = {
    "warned": WARNED,
    "logged": LOGGED,
    "written": WRITTEN,
    "echoed": ECHOED,
    "thread": THREAD,
    "unraisable": UNRAISABLE,
    "url": URL,
}


def everything_written(pytester: pytest.Pytester, result: pytest.RunResult) -> dict[str, bytes]:
    """The run's terminal output and every file it wrote, by name."""
    found = {"output": (result.stdout.str() + "\n" + result.stderr.str()).encode()}
    for path in pytester.path.rglob("*"):
        if path.is_file() and not path.name.endswith(".py"):
            found[str(path.relative_to(pytester.path))] = path.read_bytes()
    return found


def leaks(written: dict[str, bytes], values: dict[str, str]) -> list[str]:
    return [
        f"{channel} in {where}"
        for channel, value in values.items()
        for where, content in written.items()
        if value.encode() in content
    ]


def test_no_channel_pytest_has_shows_a_secret(pytester: pytest.Pytester) -> None:
    """Warnings, logs, raw output, thread and __del__ exceptions and encoded URLs: all masked."""
    pytester.makepyfile(hostile=HOSTILE)
    kwargs = '{"root": "{tmp_path}", ' + ", ".join(f'"{k}": "{v}"' for k, v in SECRETS.items())
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-rA",
        "--log-cli-level=DEBUG",
        "--log-file=out/log.txt",
        "--log-file-level=DEBUG",
        "--tokcap-sink=hostile:Hostile",
        f"--tokcap-sink-kwargs={kwargs}}}",
        "--tokcap-report=out/r.json",
        "--tokcap-report-md=out/r.md",
        "--junitxml=out/junit.xml",
        "-k",
        "PUT-1 or FREEZE-5",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    written = everything_written(pytester, result)
    assert any(name.endswith("-timeline.html") for name in written), sorted(written)
    assert leaks(written, {**SECRETS, **ENCODED}) == []
    output = written["output"].decode()
    for shown in (
        "UserWarning: warned about ***",
        "logged ***",
        "caught ***",
        "wrote ***",
        "wrote *** to 2",
        "child echoed ***",
        "PytestUnhandledThreadExceptionWarning",
        "RuntimeError: thread ***",
        "PytestUnraisableExceptionWarning",
        "ValueError: del ***",
    ):
        assert shown in output, shown
    assert "logged ***" in written["out/log.txt"].decode()
    assert "rejected: *** | *** | *** | *** | *** | ***" in written["out/r.json"].decode()


def test_an_interrupt_quoting_a_secret_shows_it_masked(pytester: pytest.Pytester) -> None:
    """A KeyboardInterrupt whose message carries a kwarg value is shown with it masked."""
    pytester.makepyfile(hostile=HOSTILE)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--tokcap-sink=hostile:InterruptsWithItsToken",
        f'--tokcap-sink-kwargs={{"root": "{{tmp_path}}", "token": "{INTERRUPT}"}}',
        "--tokcap-report=r.json",
        "--junitxml=junit.xml",
        "-k",
        "PUT-1",
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    written = everything_written(pytester, result)
    assert leaks(written, {"interrupt": INTERRUPT}) == []
    assert "KeyboardInterrupt: stopped with ***" in written["output"].decode()
    assert Path(pytester.path / "r.json").exists()
