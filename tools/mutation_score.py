"""Measure how many machine-made mutants of a reference module the kit kills.

    python tools/mutation_score.py [--jobs 2] [--seed N] MODULE ...   # reference/memory_store.py
    python tools/mutation_score.py --render                           # the doc from results only

cosmic-ray (extra ``mutation``) enumerates the mutants of each MODULE and applies them one at a
time, never in the working tree: each job gets a scratch copy of the shipped packages
(``tokcap_spec``, ``reference``, ``conformance``, ``tokcap_pytest.py``) and runs the kit there
as a user runs it (``python -m pytest -p tokcap_pytest --tokcap-sink=... -x -q``) with a fixed
``--tokcap-seed``, so a run replays. The kit must pass the unmutated copy first. A mutant is
*killed* when the kit run fails (the first clause it names is recorded), *survives* when it
passes, and is a *timeout* when the run outlives the deadline.

A module that carries Redis scripts (``reference/_redis_scripts.py``) has its Lua mutated too
(``tools/lua_mutants.py``: comparisons, logic, flags, numbers, removed statements), judged the
same way; a Redis store's run gets a durable server the tool starts on a free loopback port
(``tools/mutation_redis.py``). Staging stores are judged under ``--tokcap-contract=staging-v2``.

Every survivor must be explained in ``docs/mutation-equivalents.json``: either an equivalent
(``reason``: why no behaviour the contract names changes) or a known blind spot (``clause`` it
breaks and a ``witness`` sequence that shows it). Entries are keyed by module, operator, line,
the source line's text and the mutated line's text. Results are kept per module in
``docs/mutation-results.json`` and rendered to ``docs/mutation-score.md``; running one module
leaves the others' results as they were. Exits 1 when a survivor is unexplained.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
EQUIVALENTS = PROJECT / "docs" / "mutation-equivalents.json"
RESULTS = PROJECT / "docs" / "mutation-results.json"
DOC = PROJECT / "docs" / "mutation-score.md"
SHIPPED = ("tokcap_spec", "reference", "conformance", "tokcap_pytest.py")
DEFAULT_SEED = 20261201
SESSION = "session.sqlite"
_CLAUSE = re.compile(r"\[([A-Z]+(?:-[A-Z]+)*-\d+)\] contract violated")

# The tool's own modules sit beside it; loaded from a path (as the tests do), it finds them too.
if str(PROJECT / "tools") not in sys.path:
    sys.path.insert(0, str(PROJECT / "tools"))

from mutation_targets import (  # noqa: E402, F401 (target_options: for the tests)
    GYM_ROOT,
    OUTSIDE,
    REDIS_URL,
    kit_command,
    needs_gym,
    needs_redis,
    target_options,
    targets,
)


@dataclass(frozen=True)
class Explanation:
    """One recorded survivor: an equivalent (``reason``) or a blind spot (``clause``, ``witness``).

    It names its mutant by module, operator, 1-based line, the stripped text of that line in
    the module and the stripped text the mutant puts there (empty when the line is removed).
    """

    module: str
    operator: str
    line: int
    source: str
    mutant: str
    reason: str = ""
    clause: str = ""
    witness: str = ""

    @property
    def equivalent(self) -> bool:
        """Whether this survivor changes no behaviour the contract names."""
        return not self.clause


def load_explanations(path: Path = EQUIVALENTS) -> list[Explanation]:
    """Return the recorded survivors; raise ``ValueError`` for an entry that says too little."""
    data = json.loads(path.read_text(encoding="utf-8"))
    found = []
    for number, raw in enumerate(data["survivors"], 1):
        entry = Explanation(**raw)
        if bool(entry.reason) == bool(entry.clause) or bool(entry.clause) != bool(entry.witness):
            raise ValueError(
                f"{path} entry {number}: give either a reason, or a clause and a witness"
            )
        found.append(entry)
    return found


@dataclass(frozen=True)
class Mutant:
    """One mutant cosmic-ray made, and what the kit made of it."""

    module: str
    operator: str
    occurrence: int
    line: int
    source: str
    mutant: str
    outcome: str
    clause: str
    diff: str

    def explained_by(self, entry: Explanation) -> bool:
        """Whether ``entry`` names this mutant."""
        return (entry.module, entry.operator, entry.line, entry.source, entry.mutant) == (
            self.module,
            self.operator,
            self.line,
            self.source,
            self.mutant,
        )


def _mutated_text(diff: str) -> str:
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and line[1:2] != "+"]
    return added[0].strip() if added else ""


def _first_clause(output: str) -> str:
    found = _CLAUSE.search(output)
    if found:
        return found[1]
    # No check ran: the mutant does not compile, or the store does not build (a usage error).
    return "syntax error" if "SyntaxError" in output else "startup"


def make_copy(destination: Path, module: str = "") -> None:
    """Copy the shipped packages into ``destination``, leaving caches behind, and ``module``
    too when it lives outside them."""
    destination.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SHIPPED:
        source = PROJECT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=ignore)
        else:
            shutil.copy2(source, destination / name)
    if module in OUTSIDE:
        (destination / module).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT / module, destination / module)


def _config(module: str, command: list[str], timeout: float) -> str:
    # JSON strings are valid TOML basic strings.
    return "\n".join(
        [
            "[cosmic-ray]",
            f"module-path = {json.dumps(module)}",
            f"timeout = {timeout:.1f}",
            "excluded-modules = []",
            f"test-command = {json.dumps(shlex.join(command))}",
            "",
            "[cosmic-ray.distributor]",
            'name = "local"',
            "",
        ]
    )


def _cosmic_ray(*arguments: str | Path, cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "cosmic_ray.cli", *map(str, arguments)], cwd=cwd)


def _baseline(command: list[str], copy: Path, env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the kit fails the unmutated copy:\n{done.stdout}\n{done.stderr}")
    return time.monotonic() - started


Span = tuple[tuple[int, int], tuple[int, int]]


def annotation_spans(source: str) -> list[Span]:
    """Return where the parameter and return annotations of ``source``'s functions are, as
    (line, column) start and end, when the module postpones annotations; else nothing.

    Under ``from __future__ import annotations`` a function's annotations are never evaluated
    (the kit never asks for type hints), so a mutant inside one cannot change behaviour.
    """
    tree = ast.parse(source)
    postponed = any(
        isinstance(node, ast.ImportFrom)
        and node.module == "__future__"
        and any(alias.name == "annotations" for alias in node.names)
        for node in tree.body
    )
    if not postponed:
        return []
    spans: list[Span] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            every += [found for found in (arguments.vararg, arguments.kwarg) if found]
            notes = [found.annotation for found in every if found.annotation is not None]
            notes += [node.returns] if node.returns is not None else []
            spans += [
                ((n.lineno, n.col_offset), (n.end_lineno or n.lineno, n.end_col_offset or 0))
                for n in notes
            ]
    return spans


def _in_annotation(item: Any, spans: list[Span]) -> bool:
    start = tuple(item.mutations[0].start_pos)
    return any(begin <= start < end for begin, end in spans)


def _shard(
    session: Path, copies: list[Path], functions: Sequence[str], spans: list[Span]
) -> tuple[int, int]:
    """Give each copy the session, every job but its share marked skipped; return the jobs
    chosen and the mutants left out because they lie inside an annotation (``spans``).

    With ``functions``, only mutants inside those functions or methods are anyone's share.
    """
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    chosen = 0
    for index, copy in enumerate(copies):
        shutil.copy2(session, copy / SESSION)
        with use_db(str(copy / SESSION), WorkDB.Mode.open) as db:
            items = sorted(db.work_items, key=_order)
            if functions:
                items = [i for i in items if i.mutations[0].definition_name in functions]
            noted = [i for i in items if _in_annotation(i, spans)]
            items = [i for i in items if not _in_annotation(i, spans)]
            chosen = len(items)
            mine = {item.job_id for item in items[index :: len(copies)]}
            for item in db.work_items:
                if item.job_id not in mine:
                    db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
    return chosen, len(noted)


def _order(item: Any) -> tuple[Any, ...]:
    spec = item.mutations[0]
    return (spec.start_pos, spec.operator_name, spec.occurrence)


def _done(copies: list[Path]) -> int:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome

    done = 0
    for copy in copies:
        with use_db(str(copy / SESSION), WorkDB.Mode.open) as db:
            done += sum(r.worker_outcome != WorkerOutcome.SKIPPED for _, r in db.results)
    return done


def _collect(module: str, copies: list[Path], source: list[str]) -> list[Mutant]:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    found = []
    for copy in copies:
        with use_db(str(copy / SESSION), WorkDB.Mode.open) as db:
            for item, result in db.completed_work_items:
                if result.worker_outcome == WorkerOutcome.SKIPPED:
                    continue
                spec = item.mutations[0]
                output = result.output or ""
                if result.test_outcome == TestOutcome.SURVIVED:
                    outcome = "survived"
                elif result.test_outcome == TestOutcome.KILLED:
                    outcome = "timeout" if output == "timeout" else "killed"
                else:
                    outcome = "incompetent"
                line = spec.start_pos[0]
                found.append(
                    Mutant(
                        module=module,
                        operator=spec.operator_name,
                        occurrence=spec.occurrence,
                        line=line,
                        source=source[line - 1].strip(),
                        mutant=_mutated_text(result.diff or ""),
                        outcome=outcome,
                        clause=_first_clause(output) if outcome == "killed" else "",
                        diff=result.diff or "",
                    )
                )
    return sorted(found, key=lambda m: (m.line, m.operator, m.occurrence))


def run_module(
    module: str, jobs: int, seed: int, scratch: Path, functions: Sequence[str] = ()
) -> dict[str, Any]:
    """Run the mutants of ``module`` in ``jobs`` scratch copies; return the module's record.

    With ``functions``, only the mutants inside those functions or methods are run. A module
    carrying Redis scripts has its Lua mutants run too (never narrowed by ``functions``).
    """
    gym = _gym_root() if needs_gym(module) else GYM_ROOT
    if not needs_redis(module):
        return _run_with(module, jobs, seed, scratch, functions, "", gym)
    import mutation_redis

    with mutation_redis.server() as url:
        return _run_with(module, jobs, seed, scratch, functions, url, gym)


def _gym_root() -> str:
    """Unpack the pinned NeMo Gym wheel where the interop tests keep it; return the folder."""
    sys.path.insert(0, str(PROJECT / "tests"))
    from interop.gym_release import fetch_wheel, pinned_wheel, unpack

    cache = PROJECT / ".pytest_cache" / "d" / "tokcap-interop"
    cache.mkdir(parents=True, exist_ok=True)
    pin = pinned_wheel()
    return str(unpack(fetch_wheel(pin, cache), pin, cache))


def _run_with(
    module: str,
    jobs: int,
    seed: int,
    scratch: Path,
    functions: Sequence[str],
    url: str,
    gym: str,
) -> dict[str, Any]:
    started = time.monotonic()
    copies = [scratch / f"copy-{index}" for index in range(jobs)]
    for copy in copies:
        make_copy(copy, module)
    command = kit_command(sys.executable, module, seed, url or REDIS_URL, gym)
    env = {**_environment(), "HYPOTHESIS_STORAGE_DIRECTORY": str(scratch / "hypothesis")}
    baseline = _baseline(command, copies[0], env)
    timeout = max(60.0, 6 * baseline)
    source = (copies[0] / module).read_text(encoding="utf-8").splitlines()
    spans = annotation_spans("\n".join(source))
    found, noted = _run_cosmic_ray(module, copies, command, timeout, functions, spans)
    mutants = [asdict(mutant) for mutant in found]
    tool = "cosmic-ray 8.7.0"
    if url:
        import lua_mutants
        import mutation_redis

        if lua_mutants.lua_lines("\n".join(source)):
            tool += " and tools/lua_mutants.py"
            mutants += mutation_redis.run_lua(module, copies, command, env, timeout, _first_clause)
            mutants.sort(key=lambda m: (m["line"], m["operator"], m["occurrence"]))
    return {
        "generated": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        "tool": tool,
        "command": shlex.join(kit_command("python", module, seed)),
        "seed": seed,
        "jobs": jobs,
        "baseline_seconds": round(baseline, 1),
        "timeout_seconds": round(timeout, 1),
        "wall_seconds": round(time.monotonic() - started),
        "functions": sorted(functions),
        "annotation_mutants": noted,
        "mutants": mutants,
    }


def _run_cosmic_ray(
    module: str,
    copies: list[Path],
    command: list[str],
    timeout: float,
    functions: Sequence[str],
    spans: list[Span],
) -> tuple[list[Mutant], int]:
    scratch = copies[0].parent
    config = scratch / "cosmic-ray.toml"
    config.write_text(_config(module, command, timeout), encoding="utf-8")
    if _cosmic_ray("init", config, scratch / SESSION, cwd=copies[0]).wait() != 0:
        raise SystemExit("cosmic-ray init failed")
    chosen, noted = _shard(scratch / SESSION, copies, functions, spans)
    running = [_cosmic_ray("exec", config, SESSION, cwd=copy) for copy in copies]
    try:
        while any(process.poll() is None for process in running):
            time.sleep(20)
            print(f"{module}: {_done(copies)} of {chosen} mutants done", flush=True)
    finally:
        for process in running:
            if process.poll() is None:
                process.terminate()
                process.wait()
    if any(process.returncode != 0 for process in running):
        raise SystemExit("cosmic-ray exec failed")
    source = (copies[0] / module).read_text(encoding="utf-8").splitlines()
    return _collect(module, copies, source), noted


def _environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def _explain(mutant: Mutant, entries: list[Explanation]) -> Explanation | None:
    return next((entry for entry in entries if mutant.explained_by(entry)), None)


def render(results: dict[str, Any], entries: list[Explanation]) -> str:
    """Return ``docs/mutation-score.md`` for the recorded results."""
    lines = [
        "# Mutation score",
        "",
        "Generated by `python tools/mutation_score.py MODULE`: cosmic-ray 8.7.0 makes every "
        "mutant of the module its default operators can (and `tools/lua_mutants.py` every "
        "mutant of the Lua a Redis module carries), and applies each in a scratch copy of "
        "the shipped packages, where the kit judges it as a user runs it, with a fixed seed "
        "(`--tokcap-seed`). Killed means the kit run failed (the first clause it named is "
        "shown); a timeout is a run that outlived the deadline. Every survivor is either "
        "equivalent (no behaviour the contract names changes; the reason is given) or a blind "
        "spot (the clause it breaks and the operations that show it). Both are recorded in "
        "`docs/mutation-equivalents.json`. The score is the share of the mutants that are not "
        "equivalent that the kit killed or timed out. Mutants inside a function's annotations are "
        "not run where the module postpones annotations (`from __future__ import annotations`): "
        "they are never evaluated, so they cannot change behaviour; the scope says how many.",
        "",
        "| module | scope | mutants | killed | survived | timeouts | survived % | equivalent | "
        "blind spots | unexplained | score | s per mutant and job |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    sections: list[str] = []
    for module, record in sorted(results.items()):
        mutants = [Mutant(**raw) for raw in record["mutants"]]
        counts = Counter(mutant.outcome for mutant in mutants)
        survivors = [mutant for mutant in mutants if mutant.outcome == "survived"]
        explained = [(mutant, _explain(mutant, entries)) for mutant in survivors]
        equivalent = sum(1 for _, entry in explained if entry is not None and entry.equivalent)
        blind = sum(1 for _, entry in explained if entry is not None and not entry.equivalent)
        total = len(mutants)
        per_mutant = record["wall_seconds"] * record["jobs"] / max(1, total)
        lines.append(
            f"| `{module}` | {_scope(record)} | {total} | {counts['killed']} | "
            f"{counts['survived']} | "
            f"{counts['timeout']} | {100 * counts['survived'] / max(1, total):.1f}% | "
            f"{equivalent} | {blind} | {len(survivors) - equivalent - blind} | "
            f"{score(counts, equivalent):.1f}% | {per_mutant:.1f} |"
        )
        sections += _module_section(module, record, mutants, explained)
    return "\n".join([*lines, *sections]) + "\n"


def score(counts: Counter[str], equivalent: int) -> float:
    """Return the percent of the mutants that are not equivalent which the kit killed or
    timed out (100 when every mutant is equivalent)."""
    caught = counts["killed"] + counts["timeout"]
    judged = sum(counts.values()) - equivalent
    return 100.0 * caught / judged if judged else 100.0


def _module_section(
    module: str,
    record: dict[str, Any],
    mutants: list[Mutant],
    explained: list[tuple[Mutant, Explanation | None]],
) -> list[str]:
    lines = [
        "",
        f"## `{module}`",
        "",
        f"Run {record['generated']} with {record['tool']}, {record['jobs']} jobs, "
        f"{record['wall_seconds']} s wall; the unmutated run took {record['baseline_seconds']} s "
        f"and each mutant had {record['timeout_seconds']:g} s. Scope: {_scope(record)}. Each "
        "mutant was judged by:",
        "",
        f"    {record['command']}",
        "",
        f"Replay: `{_replay(module, record)}`.",
        "",
        "### Survivors",
        "",
    ]
    if not explained:
        lines.append("None.")
    for mutant, entry in explained:
        if entry is None:
            verdict = "**unexplained**: record it as equivalent or as a blind spot"
        elif entry.equivalent:
            verdict = f"equivalent: {entry.reason}"
        else:
            verdict = f"**blind spot**, breaks {entry.clause}: {entry.witness}"
        lines += [
            f"- line {mutant.line}, `{mutant.operator}`: {verdict}",
            "",
            "  ```diff",
            *(f"  {text}" for text in _hunk(mutant.diff)),
            "  ```",
            "",
        ]
    killed = [mutant for mutant in mutants if mutant.outcome != "survived"]
    by_clause = Counter(_killer(mutant) for mutant in killed)
    lines += [
        "### Killed, by the clause that failed first",
        "",
        ", ".join(f"{clause} {count}" for clause, count in sorted(by_clause.items())) or "none",
        "",
        "<details><summary>every killed mutant</summary>",
        "",
        "| line | operator | mutant | killed by |",
        "| ---: | --- | --- | --- |",
    ]
    for mutant in killed:
        shown = mutant.mutant.replace("|", "\\|") or "(line removed)"
        lines.append(
            f"| {mutant.line} | `{mutant.operator.removeprefix('core/')}` | `{shown}` | "
            f"{_killer(mutant)} |"
        )
    return [*lines, "", "</details>"]


def _replay(module: str, record: dict[str, Any]) -> str:
    functions = record.get("functions") or []
    chosen = f" --functions {' '.join(functions)}" if functions else ""
    return f"python tools/mutation_score.py {module} --seed {record['seed']}{chosen}"


def _scope(record: dict[str, Any]) -> str:
    functions = record.get("functions") or []
    scope = "mutants inside " + ", ".join(f"`{n}`" for n in functions) if functions else "all"
    noted = record.get("annotation_mutants", 0)
    return f"{scope} but {noted} in annotations" if noted else scope


def _killer(mutant: Mutant) -> str:
    if mutant.outcome != "killed":
        return mutant.outcome
    return mutant.clause or "no clause named"


def _hunk(diff: str) -> list[str]:
    return [
        line for line in diff.splitlines() if line[:1] in "+-@" and line[:3] not in ("+++", "---")
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="repo paths such as reference/memory_store.py")
    parser.add_argument("--jobs", type=int, default=2, help="kit runs at a time (default 2)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the kit's --tokcap-seed")
    parser.add_argument(
        "--functions", nargs="+", default=(), help="run only mutants inside these functions"
    )
    parser.add_argument("--render", action="store_true", help="only rewrite the doc")
    options = parser.parse_args(argv)
    if not options.modules and not options.render:
        parser.error("name a module, or --render")
    results: dict[str, Any] = {}
    if RESULTS.exists():
        results = json.loads(RESULTS.read_text(encoding="utf-8"))
    for module in options.modules:
        targets(module)
        with tempfile.TemporaryDirectory(prefix="tokcap-mutation-") as scratch:
            record = run_module(
                module, options.jobs, options.seed, Path(scratch), options.functions
            )
        results[module] = record
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    entries = load_explanations()
    DOC.write_text(render(results, entries), encoding="utf-8")
    print(f"wrote {DOC}")
    unexplained = 0
    for module, record in sorted(results.items()):
        mutants = [Mutant(**raw) for raw in record["mutants"]]
        counts = Counter(mutant.outcome for mutant in mutants)
        print(
            f"{module}: {len(mutants)} mutants, " + ", ".join(f"{n} {k}" for k, n in counts.items())
        )
        for mutant in mutants:
            if mutant.outcome == "survived" and _explain(mutant, entries) is None:
                unexplained += 1
                print(f"  unexplained: line {mutant.line} {mutant.operator}: {mutant.mutant}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
