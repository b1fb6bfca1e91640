"""Each construction of the target has a deadline of its own and is counted; a slow target is
told at start-up what it will cost the run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from modules_on_disk import importable

from conformance import _constructions as constructions
from conformance._deadline import Watch, watched
from conformance._probe import CONSTRUCTIONS
from tokcap_pytest import DEFAULT_SEED
from tokcap_spec.config import TokenIdCaptureConfig, TokenIdCaptureSettings

BUILD_SECONDS = 1.2
DEADLINE = 2.0
"""Shorter than two constructions, longer than one."""
ONE_SECOND_BUDGET = 270
"""Constructions a ci run may make: at a second each, what is left of five minutes runs the
checks themselves."""

SLOW = f'''
import threading
from reference import FileTokenStore

class SlowToBuild(FileTokenStore):
    """Every construction takes {BUILD_SECONDS} s, as a store that connects to a far server."""
    def __init__(self, root):
        threading.Event().wait({BUILD_SECONDS})
        super().__init__(root)
'''


def test_two_constructions_in_one_call_each_have_the_whole_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """build_sink() twice under one marked call passes when each build is within the deadline."""
    importable(tmp_path / "modules", monkeypatch, slow=SLOW)
    config = TokenIdCaptureConfig(
        token_id_capture=TokenIdCaptureSettings(
            enabled=True, sink="slow:SlowToBuild", sink_kwargs={"root": str(tmp_path)}
        )
    )
    watch = Watch(DEADLINE)
    before = constructions.counted()

    def build_twice() -> float:
        started = time.monotonic()
        with watch.call([f"{constructions.PREFIX}slow:SlowToBuild"]):
            config.build_sink(), config.build_sink()
        return time.monotonic() - started

    assert watched(build_twice, watch) > DEADLINE
    assert constructions.counted() - before == 2


def test_a_slow_target_passes_build_1_and_is_told_the_run_it_faces(
    pytester: pytest.Pytester,
) -> None:
    """BUILD-1 builds twice within its deadline; start-up names the expected duration."""
    pytester.makepyfile(slow=SLOW)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--tokcap-sink=slow:SlowToBuild",
        '--tokcap-sink-kwargs={"root": "{tmp_path}"}',
        f"--tokcap-timeout={DEADLINE:g}",
        "--tokcap-report=r.json",
        "-k",
        "BUILD-1",
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    times = CONSTRUCTIONS["ci"]
    result.stderr.fnmatch_lines(
        [
            f"tokcap: building the target took 1.? s; a ci run builds it about {times} times,"
            " so expect the run to take at least * min * s"
        ]
    )
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["clauses"]["BUILD-1"]["outcome"] == "passed"
    assert report["constructions"] == 3  # the start-up build and BUILD-1's two


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["quick", "ci"])
def test_the_expected_count_of_constructions_is_what_a_run_makes(
    pytester: pytest.Pytester, profile: str
) -> None:
    """The count start-up quotes is within half again of what a reference store's run makes."""
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--tokcap-sink=reference:FileTokenStore",
        '--tokcap-sink-kwargs={"root": "{tmp_path}"}',
        f"--tokcap-profile={profile}",
        f"--tokcap-seed={DEFAULT_SEED}",
        "--tokcap-report=r.json",
    )
    assert result.ret == pytest.ExitCode.OK
    report = json.loads((pytester.path / "r.json").read_text())
    # Hypothesis draws from constants it caches per machine, so the count moves by a fifth
    # or so between machines; the figure start-up quotes is an estimate of the duration.
    assert CONSTRUCTIONS[profile] / 1.5 <= report["constructions"] <= CONSTRUCTIONS[profile] * 1.5
    if profile == "ci":
        # A target whose constructor takes a second finishes the ci profile in under five
        # minutes: the checks reuse instances wherever a clause needs no fresh one.
        assert report["constructions"] <= ONE_SECOND_BUDGET
