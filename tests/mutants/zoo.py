"""The mutant zoo: every broken store in the ``zoo_*`` modules, what it must fail, the kit runner.

Each mutant is a subclass of the baseline store :class:`base.BaseStore` (or of its relaxed
fence, :class:`base.RelaxedFileStore`) that overrides the one step it breaks, with a
docstring that says what it breaks and how a real transport ends up like that, and with its
judgment declared as class data that :func:`mutants` reads and no runner adds to:

* ``breaks``: the clause it breaks;
* ``also``: clauses it necessarily breaks too (optional);
* ``flags``: the kit options it is judged with, such as ``--tokcap-fence=strict``,
  ``--tokcap-capability=no-delete`` or ``-p zoo_launcher`` (optional);
* ``anomaly``: for a concurrency mutant, the anomaly its failure message must name (optional).

The kit must fail exactly ``{breaks, *also}``: a mutant is *precise* when that set is one
clause. Correct stores are listed in :data:`CORRECT`; the kit must pass them with nothing
failed and nothing blocked.

:func:`run_kit` is the one way a store is judged here, by the zoo tests and by
``tools/kill_matrix.py`` alike: the whole kit in a fresh interpreter and directory, as a
framework author runs it, except that Hypothesis does not shrink (``-p zoo_fast``).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from tokcap_pytest import DEFAULT_SEED

__all__ = ["CORRECT", "HERE", "JudgedStore", "Mutant", "KitRun", "mutants", "run_kit"]

HERE = Path(__file__).resolve().parent
"""The directory that must be on ``PYTHONPATH`` for the kit to import the mutants."""

ROOT_KWARGS = '{"root": "{tmp_path}"}'
RUN_TIMEOUT = 600.0
"""Seconds a kit run may take; then it is sent SIGTERM, as a CI job that ran out of time."""
STOP_GRACE = 60.0
"""Seconds a run sent SIGTERM has to write its report before its process group is killed."""


@dataclass(frozen=True)
class JudgedStore:
    """A store the kit judges: its name, its ``module:Class`` target, flags and kwargs."""

    name: str
    sink: str
    flags: tuple[str, ...] = ()
    kwargs: str | None = ROOT_KWARGS
    contract: str = "capture"
    """The contract the store is judged by; ``staging-v2`` names it the staging sink."""

    def arguments(self, report: str) -> list[str]:
        """Return the kit's command-line arguments for this target, writing ``report``."""
        role = "sink" if self.contract == "capture" else "staging-sink"
        arguments = ["-p", "no:cacheprovider", "-p", "zoo_fast", f"--tokcap-{role}={self.sink}"]
        if self.contract != "capture":
            arguments.append(f"--tokcap-contract={self.contract}")
        if self.kwargs is not None:
            arguments.append(f"--tokcap-{role}-kwargs={self.kwargs}")
        return [*arguments, *self.flags, f"--tokcap-report={report}"]


@dataclass(frozen=True)
class Mutant(JudgedStore):
    """A store that breaks one promise, and the clauses the kit must fail for it."""

    clause: str = ""
    also: tuple[str, ...] = ()
    story: str = ""
    anomaly: str = ""
    """For a concurrency mutant: the anomaly the failure message must name."""

    @property
    def expected(self) -> tuple[str, ...]:
        """Every clause the kit must fail: the one broken, then what it breaks too."""
        return (self.clause, *self.also)


BUDGET = "--tokcap-budget=default"
"""The budget the reference capture stores are judged at, claiming the COST family. The
baseline stores here and in ``independent`` do their disk I/O inside their coroutines on
purpose (the plainest correct store for every other clause), so they hold the loop as long as
an fsync on a loaded disk takes: they are judged without a budget, and their reports show it."""

CORRECT = (
    JudgedStore("BaseStore", "base:BaseStore", ("--tokcap-fence=strict",)),
    JudgedStore("RelaxedFileStore", "base:RelaxedFileStore"),
    JudgedStore(
        "MemoryTokenStore",
        "reference.memory_store:MemoryTokenStore",
        ("--tokcap-capability=process-local", "--tokcap-fence=strict", BUDGET),
        kwargs=None,
    ),
    JudgedStore(
        "FileTokenStore", "reference.file_store:FileTokenStore", ("--tokcap-fence=strict", BUDGET)
    ),
    JudgedStore(
        "FileTokenStoreForeignEntries",
        "reference.file_store:FileTokenStore",
        ("--tokcap-fence=strict", "--tokcap-entry-class=independent:Record", BUDGET),
    ),
    JudgedStore("SqliteStore", "independent:SqliteStore", ("--tokcap-fence=strict",)),
    JudgedStore(
        "OwnRecordsOnlyStore",
        "independent:OwnRecordsOnlyStore",
        ("--tokcap-fence=strict", "--tokcap-entry-class=independent:Record"),
    ),
    JudgedStore("RelaxedSqliteStore", "independent:RelaxedSqliteStore"),
    JudgedStore(
        "MappingEntriesStore",
        "independent:MappingEntriesStore",
        ("--tokcap-fence=strict",),
    ),
    JudgedStore(
        "FileTokenStoreWithLineage",
        "reference.file_store:FileTokenStore",
        ("--tokcap-fence=strict", "--tokcap-lineage=reference.lineage:FileLineageResolver", BUDGET),
    ),
    JudgedStore(
        "SilentConflictsWithLineage",
        "zoo_lineage:SilentConflicts",
        ("--tokcap-fence=strict", "--tokcap-lineage=zoo_lineage:SilentConflicts"),
    ),
    JudgedStore(
        "MemoryTokenStoreWithLineage",
        "reference.memory_store:MemoryTokenStore",
        (
            "--tokcap-capability=process-local",
            "--tokcap-fence=strict",
            "--tokcap-lineage=reference.lineage:MemoryLineageResolver",
            BUDGET,
        ),
        kwargs=None,
    ),
    JudgedStore(
        "StagingBase",
        "staging_base:StagingBase",
        ("--tokcap-capability=read-back",),
        contract="staging-v2",
    ),
    JudgedStore("TakesNoAttachments", "staging_base:TakesNoAttachments", contract="staging-v2"),
    JudgedStore(
        "FileStagingStore",
        "reference.staging_file:FileStagingStore",
        ("--tokcap-capability=read-back",),
        contract="staging-v2",
    ),
    JudgedStore(
        "MemoryStagingStore",
        "reference.staging_memory:MemoryStagingStore",
        ("--tokcap-capability=process-local", "--tokcap-capability=read-back"),
        kwargs='{"namespace": "kit"}',
        contract="staging-v2",
    ),
)
"""Stores that must pass the whole kit with no failed and no blocked clause."""


def _zoo_modules() -> list[str]:
    """Every ``zoo_*`` module that defines mutants (plugins such as ``zoo_fast`` define none)."""
    return sorted(
        path.stem
        for path in HERE.glob("zoo_*.py")
        if "breaks: ClassVar" in path.read_text(encoding="utf-8")
    )


def mutants() -> list[Mutant]:
    """Import every zoo module and return its mutants, by module and definition order."""
    found = []
    for module_name in _zoo_modules():
        module = importlib.import_module(module_name)
        classes = [
            value
            for value in vars(module).values()
            if inspect.isclass(value)
            and value.__module__ == module_name
            and "breaks" in vars(value)
        ]
        classes.sort(key=lambda cls: inspect.getsourcelines(cls)[1])
        for cls in classes:
            doc = inspect.getdoc(cls) or ""
            summary = doc.splitlines()[0] if doc else ""
            found.append(
                Mutant(
                    name=cls.__name__,
                    sink=f"{module_name}:{cls.__name__}",
                    flags=tuple(getattr(cls, "flags", ())),
                    clause=cls.breaks,
                    also=tuple(getattr(cls, "also", ())),
                    story=summary.split(": ", 1)[-1],
                    anomaly=getattr(cls, "anomaly", ""),
                    contract=getattr(cls, "contract", "capture"),
                )
            )
    return found


@dataclass(frozen=True)
class KitRun:
    """What one kit run against one store showed."""

    target: JudgedStore
    exit_code: int
    seconds: float
    clauses: dict[str, Any] = field(default_factory=dict)
    judged: dict[str, Any] = field(default_factory=dict)
    """The report's ``target``: what was judged, and with which classes and capabilities."""
    problem: str = ""
    output: str = ""
    timelines: tuple[str, ...] = ()
    """Names of the timeline pictures (SVG in HTML) the run wrote next to its report."""
    junit_failures: tuple[str, ...] = ()
    """The text of every test case the run's junit file counts as failed."""

    def unreported_failures(self) -> list[str]:
        """Failed clauses no failed junit case carries the message of; empty when they agree.

        Also names a mismatch between junit's failure count and the run's exit code.
        """
        problems = [
            f"{clause} failed in the report, but no junit failure says [{clause}]"
            for clause in self.failed
            if not any(f"[{clause}] contract violated" in text for text in self.junit_failures)
        ]
        if bool(self.junit_failures) != (self.exit_code == 1):
            problems.append(
                f"junit counts {len(self.junit_failures)} failures, the exit code is "
                f"{self.exit_code}"
            )
        return problems

    def _with(self, outcome: str) -> tuple[str, ...]:
        return tuple(c for c, e in self.clauses.items() if e["outcome"] == outcome)

    @property
    def failed(self) -> tuple[str, ...]:
        """The clauses the kit failed, in catalog order."""
        return self._with("failed")

    @property
    def blocked(self) -> tuple[str, ...]:
        """The clauses the kit could not judge because a more basic one failed."""
        return self._with("blocked")

    @property
    def exact(self) -> bool:
        """Whether a mutant run failed, and failed exactly the mutant's declared clauses."""
        return (
            isinstance(self.target, Mutant)
            and self.exit_code == 1
            and set(self.failed) == set(self.target.expected)
        )

    @property
    def caught(self) -> bool:
        """Whether a mutant run failed with the mutant's own clause among the failures."""
        return (
            isinstance(self.target, Mutant)
            and self.exit_code == 1
            and self.target.clause in self.failed
        )


ZOO_SEED = DEFAULT_SEED
"""The seed every zoo run uses unless told another."""


def run_kit(target: JudgedStore, extra: Sequence[str] = ()) -> KitRun:
    """Run the whole kit against ``target`` in a fresh interpreter and directory."""
    with tempfile.TemporaryDirectory(prefix="tokcap-zoo-") as scratch:
        report = Path(scratch) / "report.json"
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(HERE), environment.get("PYTHONPATH")])
        )
        environment["TMPDIR"] = scratch
        # The zoo judges every mutant on one seed, so its verdicts replay; --tokcap-seed in
        # ``extra`` still wins.
        environment.setdefault("TOKCAP_SEED", str(ZOO_SEED))
        junit = Path(scratch) / "junit.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            f"--junitxml={junit}",
            *target.arguments(str(report)),
            *extra,
        ]
        started = time.monotonic()
        code, output, problem = _run(command, scratch, environment)
        seconds = time.monotonic() - started
        if not report.exists():
            tail = output.strip().splitlines()[-3:]
            said = f"{problem}, " if problem else ""
            return KitRun(target, code, seconds, problem=f"{said}no report: " + " / ".join(tail))
        written = json.loads(report.read_text(encoding="utf-8"))
        clauses = written["clauses"]
        pictures = tuple(
            path.name
            for path in sorted(Path(scratch).glob("*timeline*.html"))
            if "<svg" in path.read_text(encoding="utf-8")
        )
        return KitRun(
            target,
            code,
            seconds,
            clauses,
            problem=problem,
            judged=written["target"],
            output=output[-4000:],
            timelines=pictures,
            junit_failures=_junit_failures(junit),
        )


def _run(command: list[str], scratch: str, environment: dict[str, str]) -> tuple[int, str, str]:
    """Run a kit process to its end: its exit code, its output, and ``"timed out"`` when it
    was stopped after ``RUN_TIMEOUT`` (with SIGTERM, so it reports what it judged so far)."""
    process = subprocess.Popen(
        command,
        cwd=scratch,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    problem = ""
    try:
        output, _ = process.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        problem = "timed out"
        process.send_signal(signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
    with contextlib.suppress(ProcessLookupError):  # workers the run left behind
        os.killpg(process.pid, signal.SIGKILL)
    return process.returncode, output, problem


def _junit_failures(junit: Path) -> tuple[str, ...]:
    """The text of every failed test case in the run's junit file."""
    if not junit.exists():
        return ()
    tree = ElementTree.parse(junit)
    return tuple(
        f"{failure.get('message', '')}\n{failure.text or ''}"
        for failure in tree.iter()
        if failure.tag in ("failure", "error")
    )
