"""The plugin as a framework author meets it: options, collection, header, reports, inertness."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

MEMORY = "--tokcap-sink=reference.memory_store:MemoryTokenStore"
LOCAL = "--tokcap-capability=process-local"

BROKEN = '''
from tokcap_spec import TokenCaptureSnapshot

class Forgetful:
    """Acks every put and forgets it; leaks its kwargs when refused."""

    def __init__(self, **kwargs):
        if "bad" in kwargs:
            raise ValueError(f"refused {kwargs}")

    async def put(self, entry):
        return None

    async def mark_incomplete(self, rollout_id, model_call_id=""):
        return None

    async def freeze(self, rollout_id):
        return TokenCaptureSnapshot(rollout_id, (), False, "s", 0)

    async def drop(self, rollout_id, *, snapshot_id, version):
        return False

    async def close(self):
        return None
'''


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


class TestInert:
    def test_adds_no_tests_without_a_target(self, pytester: pytest.Pytester) -> None:
        """Without a --tokcap target only the user's own tests run and the header is silent."""
        pytester.makepyfile(test_own="def test_own():\n    pass\n")
        result = run(pytester)
        result.assert_outcomes(passed=1)
        assert "tokcap:" not in result.stdout.str()
        assert "tokcap conformance" not in result.stdout.str()

    def test_importing_the_entry_point_loads_nothing_of_the_project(self) -> None:
        """The entry point imports none of tokcap's packages, nor pydantic or hypothesis."""
        code = (
            "import sys, tokcap_pytest\n"
            "names = ('pydantic', 'hypothesis', 'conformance', 'reference', 'tokcap_spec')\n"
            "heavy = [m for m in names if m in sys.modules]\n"
            "print(heavy)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "[]"


class TestCollection:
    def test_collects_the_kit_from_an_empty_directory(self, pytester: pytest.Pytester) -> None:
        """From an empty directory the kit's checks are collected with clause ids in node ids."""
        result = run(pytester, MEMORY, LOCAL, "--collect-only", "-q")
        result.stdout.fnmatch_lines(
            [
                "test_contract.py::test_put[[]PUT-1-durable-on-return[]]",
                "test_contract.py::test_drop[[]DROP-2-stale-version[]]",
            ]
        )

    def test_keyword_selection_runs_one_clause(self, pytester: pytest.Pytester) -> None:
        """-k narrows the kit to the chosen clause as with any tests."""
        result = run(pytester, MEMORY, LOCAL, "-k", "PUT-3")
        result.assert_outcomes(passed=1)

    def test_works_when_loaded_with_dash_p(self, pytester: pytest.Pytester) -> None:
        """-p tokcap_pytest works beside the installed entry point of the same name."""
        result = run(pytester, "-p", "tokcap_pytest", MEMORY, LOCAL, "-k", "FREEZE-4")
        result.assert_outcomes(passed=1)

    def test_works_with_plugin_autoload_off(
        self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With entry points disabled, -p tokcap_pytest alone loads the kit."""
        monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
        result = run(pytester, "-p", "tokcap_pytest", MEMORY, LOCAL, "-k", "FREEZE-4")
        result.assert_outcomes(passed=1)

    def test_junitxml_carries_the_kit_tests(self, pytester: pytest.Pytester) -> None:
        """--junitxml records each check under its clause-named node id."""
        result = run(pytester, MEMORY, LOCAL, "-k", "FREEZE", "--junitxml=out.xml")
        assert result.ret == 0
        xml = (pytester.path / "out.xml").read_text()
        assert 'name="test_freeze[FREEZE-2-idempotent]"' in xml


class TestHelpAndCollectOnly:
    def test_help_shows_each_default_and_environment_variable(
        self, pytester: pytest.Pytester
    ) -> None:
        """pytest --help lists every kit option with its default and environment variable."""
        from tokcap_pytest import OPTIONS

        text = " ".join(run(pytester, "--help").stdout.str().split())
        for option in OPTIONS:
            assert option.flag in text
            assert f"default: {option.default}; env {option.env}, ini {option.ini}" in text

    def test_collect_only_prints_no_verdict(self, pytester: pytest.Pytester) -> None:
        """--co lists the checks and prints no conformance summary."""
        result = run(pytester, MEMORY, LOCAL, "--co", "-q")
        assert result.ret == 0
        assert "tokcap conformance" not in result.stdout.str()
        assert "clauses:" not in result.stdout.str()


class TestHeaderAndSettings:
    def test_header_names_target_kit_spec_fence_and_capabilities(
        self, pytester: pytest.Pytester
    ) -> None:
        """The header names the target, its distribution, kit, spec, fence and capabilities."""
        result = run(pytester, MEMORY, LOCAL, "--tokcap-fence=strict", "--collect-only")
        result.stdout.fnmatch_lines(
            [
                "tokcap * (spec *): judging sink "
                "reference.memory_store:MemoryTokenStore [[]tokcap *[]]",
                "tokcap: fence=strict capabilities=process-local seed=* *",
            ]
        )

    def test_a_run_without_a_seed_draws_its_own(self, pytester: pytest.Pytester) -> None:
        """Two runs that name no seed explore two seeds, each printed for replay."""
        seeds = set()
        for _ in range(2):
            result = run(pytester, MEMORY, LOCAL, "--collect-only")
            header = next(line for line in result.outlines if line.startswith("tokcap: fence="))
            seeds.add(header.split("seed=", 1)[1].split()[0])
        assert len(seeds) == 2

    def test_environment_and_ini_spellings(
        self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A target from the environment and a seed from ini are used when the CLI is silent."""
        pytester.makeini("[pytest]\ntokcap_seed = 11\ntokcap_capability = process-local\n")
        monkeypatch.setenv("TOKCAP_SINK", "reference.memory_store:MemoryTokenStore")
        result = run(pytester, "--collect-only")
        result.stdout.fnmatch_lines(["tokcap: fence=any capabilities=process-local seed=11 *"])

    def test_bad_option_is_a_usage_error_naming_its_origin(
        self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A bad environment value stops the run with an error naming the variable."""
        monkeypatch.setenv("TOKCAP_FENCE", "loose")
        result = run(pytester, MEMORY)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*environment variable TOKCAP_FENCE*any, strict*"])


class TestVerdicts:
    def test_memory_store_passes_with_spawn_not_claimed(self, pytester: pytest.Pytester) -> None:
        """The process-local store passes every claimed clause; SPAWN shows as not claimed."""
        result = run(pytester, MEMORY, LOCAL, "--tokcap-report=r.json", "--tokcap-report-md=r.md")
        assert result.ret == 0
        report = json.loads((pytester.path / "r.json").read_text())
        outcomes = {clause: entry["outcome"] for clause, entry in report["clauses"].items()}
        spawn = ("SPAWN-1", "SPAWN-2", "SPAWN-3", "SPAWN-4")
        assert {outcomes[c] for c in spawn} == {"not-claimed"}
        assert "failed" not in outcomes.values()
        tokcap = {"name": "tokcap", "version": report["kit_version"]}
        assert report["target"] == {
            "sink": "reference.memory_store:MemoryTokenStore",
            "source": "reference.memory_store:MemoryTokenStore",
            "capabilities": ["process-local"],
            "fence": "any",
            "observed_fence": "strict",
            "entry_class": "tokcap_spec.records:TokenEntry",
            "distributions": {"sink": tokcap, "source": tokcap},
            "real_store": False,
        }
        assert "| SPAWN-1 | not-claimed |" in (pytester.path / "r.md").read_text()
        result.stdout.fnmatch_lines(
            ["SPAWN * 0 * 0 * 0 * 4", "clauses: * passed, 0 failed, 0 skipped, 11 not claimed"]
        )

    def test_a_named_resolver_is_judged_and_reported(self, pytester: pytest.Pytester) -> None:
        """--tokcap-lineage claims the LINEAGE family; the report names the resolver."""
        result = run(
            pytester,
            MEMORY,
            LOCAL,
            "--tokcap-lineage=reference.lineage:MemoryLineageResolver",
            "-k",
            "LINEAGE",
            "--tokcap-report=r.json",
        )
        assert result.ret == 0, result.stdout.str()[-2000:]
        report = json.loads((pytester.path / "r.json").read_text())
        assert report["target"]["lineage"] == "reference.lineage:MemoryLineageResolver"
        assert report["target"]["distributions"]["lineage"]["name"] == "tokcap"
        lineage = {c: e["outcome"] for c, e in report["clauses"].items() if c.startswith("LIN")}
        assert lineage == dict.fromkeys(("LINEAGE-1", "LINEAGE-2", "LINEAGE-3"), "passed")
        result.stdout.fnmatch_lines(["tokcap: lineage reference.lineage:MemoryLineageResolver *"])

    def test_without_a_resolver_lineage_is_not_claimed(self, pytester: pytest.Pytester) -> None:
        result = run(pytester, MEMORY, LOCAL, "-k", "LINEAGE", "--tokcap-report=r.json", "-rs")
        assert result.ret == 0
        report = json.loads((pytester.path / "r.json").read_text())
        assert "lineage" not in report["target"]
        assert report["clauses"]["LINEAGE-2"]["outcome"] == "not-claimed"
        result.stdout.fnmatch_lines(
            ["*not claimed: no lineage resolver is named: pass --tokcap-lineage*"]
        )

    def test_memory_store_fails_spawn_without_the_capability(
        self, pytester: pytest.Pytester
    ) -> None:
        """Without process-local the memory store fails SPAWN-3, and the message names the cause."""
        result = run(pytester, MEMORY, "-k", "SPAWN", "--tokcap-report=r.json")
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        report = json.loads((pytester.path / "r.json").read_text())
        assert report["clauses"]["SPAWN-3"]["outcome"] == "failed"
        assert "process memory" in report["clauses"]["SPAWN-3"]["message"]

    def test_failure_names_clause_expected_observed_and_hint(
        self, pytester: pytest.Pytester
    ) -> None:
        """A broken sink fails with the clause id, expectation, observation and hint."""
        pytester.makepyfile(broken=BROKEN)
        result = run(
            pytester, "--tokcap-sink=broken:Forgetful", "-k", "PUT-1", "--tokcap-report=r.json"
        )
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        result.stdout.fnmatch_lines(
            [
                "*[[]PUT-1[]] contract violated",
                "*expected: call * visible to a fresh source*",
                "*observed: snapshot_id=*entries=0*",
                "*hint: *",
                "*see: *docs/clauses.md#put-1",
            ]
        )
        report = json.loads((pytester.path / "r.json").read_text())
        assert report["summary"]["failed"] == 1

    def test_kwarg_values_never_reach_output_or_reports(self, pytester: pytest.Pytester) -> None:
        """A secret passed as a sink kwarg appears nowhere in the output or the reports."""
        pytester.makepyfile(broken=BROKEN)
        secret = "hunter2-do-not-print"
        result = run(
            pytester,
            "--tokcap-sink=broken:Forgetful",
            f'--tokcap-sink-kwargs={{"token": "{secret}"}}',
            "--tokcap-report=r.json",
            "--tokcap-report-md=r.md",
        )
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        for text in (
            result.stdout.str(),
            result.stderr.str(),
            (pytester.path / "r.json").read_text(),
            (pytester.path / "r.md").read_text(),
        ):
            assert secret not in text

    def test_a_leaking_constructor_fails_build_2(self, pytester: pytest.Pytester) -> None:
        """A constructor that formats its kwargs into an error fails BUILD-2."""
        pytester.makepyfile(broken=BROKEN.replace('if "bad" in kwargs', "if kwargs"))
        result = run(
            pytester, "--tokcap-sink=broken:Forgetful", "-k", "BUILD-2", "--tokcap-report=r.json"
        )
        report = json.loads((pytester.path / "r.json").read_text())
        assert report["clauses"]["BUILD-2"]["outcome"] == "failed"
        assert "refused {" not in result.stdout.str()


def test_strict_fence_requires_refusal(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """--tokcap-fence=strict fails a store that accepts late puts with a version bump."""
    pytester.makepyfile(relaxed=RELAXED)
    # Its state lives in this process alone, which it declares.
    args = (
        "--tokcap-sink=relaxed:Relaxed",
        LOCAL,
        "-k",
        "put-after-freeze",
        "--tokcap-report=r.json",
    )
    assert run(pytester, *args).ret == 0
    assert run(pytester, *args, "--tokcap-fence=strict").ret == pytest.ExitCode.TESTS_FAILED


RELAXED = '''
import copy, uuid
from tokcap_spec import TokenCaptureSnapshot

STATE = {}

class Relaxed:
    """Accepts puts after freeze and bumps the version (a relaxed fence)."""

    def _rollout(self, rollout_id):
        return STATE.setdefault(rollout_id, {"entries": {}, "version": 0, "frozen": None})

    async def put(self, entry):
        rollout = self._rollout(entry.rollout_id)
        rollout["entries"][entry.model_call_id] = entry
        rollout["version"] += 1

    async def mark_incomplete(self, rollout_id, model_call_id=""):
        self._rollout(rollout_id)["version"] += 1

    async def freeze(self, rollout_id):
        rollout = self._rollout(rollout_id)
        if rollout["frozen"] is None or rollout["frozen"][1] != rollout["version"]:
            rollout["frozen"] = (uuid.uuid4().hex, rollout["version"])
        entries = tuple(copy.deepcopy(list(rollout["entries"].values())))
        return TokenCaptureSnapshot(rollout_id, entries, False, *rollout["frozen"])

    async def drop(self, rollout_id, *, snapshot_id, version):
        rollout = self._rollout(rollout_id)
        return rollout["frozen"] == (snapshot_id, version) and rollout["version"] == version

    async def close(self):
        return None
'''


class TestWhereTheRunWrites:
    def test_collect_only_writes_no_report(self, pytester: pytest.Pytester) -> None:
        """--co leaves an earlier report as it was, and the header says none is written."""
        earlier = pytester.path / "r.json"
        earlier.write_text('{"run": "a real one"}')
        result = run(pytester, MEMORY, LOCAL, "--co", "--tokcap-report=r.json")
        assert result.ret == 0
        assert earlier.read_text() == '{"run": "a real one"}'
        result.stdout.fnmatch_lines(
            ["tokcap: --tokcap-report: --collect-only runs no check, so r.json is not written"]
        )

    def test_ini_paths_are_relative_to_the_ini_file(
        self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Report paths from an ini file land beside it, whatever the current folder."""
        pytester.makeini(
            "[pytest]\ntokcap_report = out/r.json\ntokcap_report_md = out/r.md\n"
            "tokcap_capability = process-local\n"
        )
        monkeypatch.chdir(pytester.mkdir("elsewhere"))
        result = run(pytester, MEMORY, "-k", "FREEZE-4")
        assert result.ret == 0
        assert (pytester.path / "out" / "r.json").exists()
        assert (pytester.path / "out" / "r.md").exists()
        assert not (pytester.path / "elsewhere" / "out").exists()
        result.stdout.fnmatch_lines(
            [
                f"tokcap: --tokcap-report: the folder {pytester.path / 'out'} does not exist; "
                "it is created for r.json"
            ]
        )

    def test_an_ini_config_path_is_relative_to_the_ini_file(
        self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A Gym config named in an ini file is read from beside it, whatever the current
        folder."""
        config = pytester.mkdir("conf") / "gym.yaml"
        captures = pytester.path / "captures"
        config.write_text(f"token_id_capture:\n  enabled: true\n  dir: {captures}\n")
        pytester.makeini("[pytest]\ntokcap_config = conf/gym.yaml\n")
        monkeypatch.chdir(pytester.mkdir("elsewhere"))
        result = run(pytester, "-k", "FREEZE-4")
        assert result.ret == 0
        result.stdout.fnmatch_lines([f"tokcap: sink read from Gym config {config}"])

    def test_a_real_store_a_config_names_is_judged_only_when_allowed(
        self, pytester: pytest.Pytester
    ) -> None:
        """A config naming a store of its own needs --tokcap-allow-real-store, and the header
        and both reports say a real store was judged."""
        pytester.makefile(
            ".yaml",
            gym="token_id_capture:\n  enabled: true\n"
            "  sink: reference.memory_store:MemoryTokenStore\n",
        )
        args = ("--tokcap-config=gym.yaml", LOCAL, "-k", "FREEZE-4", "--tokcap-report=r.json")
        refused = run(pytester, *args)
        assert refused.ret == pytest.ExitCode.USAGE_ERROR
        refused.stderr.fnmatch_lines(["*Pass --tokcap-allow-real-store*"])
        result = run(pytester, *args, "--tokcap-report-md=r.md", "--tokcap-allow-real-store")
        assert result.ret == 0
        from conformance._notices import REAL_STORE

        result.stdout.fnmatch_lines([f"tokcap: {REAL_STORE}"])
        assert json.loads((pytester.path / "r.json").read_text())["target"]["real_store"]
        assert f"**{REAL_STORE}**" in (pytester.path / "r.md").read_text()

    def test_help_shows_the_choices_of_each_option(self, pytester: pytest.Pytester) -> None:
        """--help shows each option's choices or kind of value, never a bare VALUE."""
        text = run(pytester, "--help").stdout.str()
        for shown in (
            "--tokcap-fence={any,strict}",
            "--tokcap-profile={quick,ci,thorough}",
            "--tokcap-capability={no-delete,process-local,read-back}",
            "--tokcap-budget=KEY=DURATION,...",
            "--tokcap-sink=MODULE:CLASS",
            "--tokcap-report=PATH",
        ):
            assert shown in text
        assert "=VALUE" not in text
