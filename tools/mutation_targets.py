"""The stores a mutation run judges each module through, and the kit command that does it.

A module maps to one or more targets: each is the kit options naming a store built from the
module (with its lineage resolver where it has one), plus, where the run needs it, a
``PYTHONPATH=`` entry. ``{redis_url}`` and ``{gym_root}`` stand for the server the tool starts
and the unpacked NeMo Gym modules; ``{tmp_path}`` is the kit's own.
"""

from __future__ import annotations

import shlex
from pathlib import Path

MEMORY_STORE = (
    "--tokcap-sink=reference:MemoryTokenStore",
    "--tokcap-capability=process-local",
    "--tokcap-lineage=reference:MemoryLineageResolver",
    "--tokcap-fence=strict",
)
FILE_STORE = (
    "--tokcap-sink=reference:FileTokenStore",
    '--tokcap-sink-kwargs={"root": "{tmp_path}"}',
    "--tokcap-lineage=reference:FileLineageResolver",
    "--tokcap-fence=strict",
)

STAGING = ("--tokcap-contract=staging-v2", "--tokcap-capability=read-back")
FILE_STAGING = (
    *STAGING,
    "--tokcap-staging-sink=reference:FileStagingStore",
    '--tokcap-staging-sink-kwargs={"root": "{tmp_path}"}',
)
MEMORY_STAGING = (
    *STAGING,
    "--tokcap-capability=process-local",
    "--tokcap-staging-sink=reference:MemoryStagingStore",
    '--tokcap-staging-sink-kwargs={"namespace": "mutation"}',
)
GYM_ROOT = "{gym_root}"
"""Stands for the folder holding NeMo Gym 0.7.0's unpacked modules (the pinned wheel the
interop tests fetch), put on the import path of a run judged on Gym's classes."""
GYM_STAGING = (f"PYTHONPATH={GYM_ROOT}", *FILE_STAGING, "--tokcap-staging-classes=gym")
BUILT_FOR_GYM = (
    f"PYTHONPATH={GYM_ROOT}",
    *FILE_STAGING[:-1],
    '--tokcap-staging-sink-kwargs={"root": "{tmp_path}", "classes": "gym"}',
    "--tokcap-staging-classes=gym",
)
"""Staging stores run the staging-v2 contract; the modules they share are judged through the
file store, whose checks include spawned processes, on tokcap_spec's classes and then on
NeMo Gym's, as Gym's capture stages and fetches: as it comes, and built for them."""

REDIS_URL = "{redis_url}"
"""Stands for the URL of the server the tool starts for a run of a Redis module."""
REDIS_STORE = (
    "--tokcap-sink=reference:RedisTokenStore",
    '--tokcap-sink-kwargs={"url": "' + REDIS_URL + '"}',
    "--tokcap-lineage=reference:RedisLineageResolver",
    "--tokcap-fence=strict",
)
REDIS_STAGING = (
    *STAGING,
    "--tokcap-staging-sink=reference:RedisStagingStore",
    '--tokcap-staging-sink-kwargs={"url": "' + REDIS_URL + '", "namespace": "mutation"}',
)

ROOTED = '--tokcap-sink-kwargs={"root": "{tmp_path}"}'
STRICT = "--tokcap-fence=strict"
OUTSIDE: dict[str, tuple[tuple[str, ...], ...]] = {
    "examples/first_sink/mysink.py": (("--tokcap-sink=mysink:SqliteSink", ROOTED, STRICT),),
    "tests/mutants/independent.py": (
        ("--tokcap-sink=independent:SqliteStore", ROOTED, STRICT),
        ("--tokcap-sink=independent:RelaxedSqliteStore", ROOTED),
        ("--tokcap-sink=independent:MappingEntriesStore", ROOTED, STRICT),
        (
            "--tokcap-sink=independent:OwnRecordsOnlyStore",
            ROOTED,
            STRICT,
            "--tokcap-entry-class=independent:Record",
        ),
    ),
}
"""Stores written apart from the reference ones (the first sink of docs/first-sink.md and the
suite's independent sqlite store), by the repo path of their module: the module is copied
beside the shipped packages and its folder put on the judged run's import path. A module that
builds several stores has each judged in turn; a mutant is killed when any run fails."""


def targets(module: str) -> tuple[tuple[str, ...], ...]:
    """Return, for each store built from ``module`` (a repo path), the kit options naming it."""
    if module == "reference/memory_store.py":
        return (MEMORY_STORE,)
    if module == "reference/file_store.py" or module.startswith("reference/_file_"):
        return (FILE_STORE,)
    if module in OUTSIDE:
        return OUTSIDE[module]
    if module in ("reference/redis_store.py", "reference/_redis_scripts.py"):
        return (REDIS_STORE,)
    if module == "reference/staging_redis.py":
        return (REDIS_STAGING,)
    if module == "reference/staging_memory.py":
        return (MEMORY_STAGING,)
    if module == "reference/staging_file.py" or module.startswith("reference/_staging_"):
        return (FILE_STAGING, GYM_STAGING, BUILT_FOR_GYM)
    raise SystemExit(f"{module}: no store is known to be built from this module")


def target_options(module: str) -> tuple[str, ...]:
    """Return the kit options naming the first store that ``module`` builds."""
    return targets(module)[0]


def needs_redis(module: str) -> bool:
    """Whether the stores built from ``module`` need a Redis server."""
    return any(REDIS_URL in option for options in targets(module) for option in options)


def needs_gym(module: str) -> bool:
    """Whether a store built from ``module`` is judged on NeMo Gym's classes too."""
    return any(GYM_ROOT in option for options in targets(module) for option in options)


def kit_command(
    python: str,
    module: str,
    seed: int,
    redis_url: str = REDIS_URL,
    gym_root: str = GYM_ROOT,
) -> list[str]:
    """Return the kit run, as a user runs it, that judges a mutant of ``module``.

    ``redis_url`` names the server of a Redis module's store, ``gym_root`` the unpacked NeMo
    Gym modules (each shown as a placeholder if not given). A target's ``PYTHONPATH=``
    entry is set in the run's environment.

    A module outside the shipped packages is imported from its folder in the scratch copy
    (the run's working directory), so the mutant, not the repo's file, is judged. A module
    that builds several stores gets one shell command running the kit on each in turn, which
    stops at the first run that fails.
    """
    folder = [f"PYTHONPATH={Path(module).parent}"] if module in OUTSIDE else []
    runs = []
    for options in targets(module):
        filled = [o.replace(REDIS_URL, redis_url).replace(GYM_ROOT, gym_root) for o in options]
        path = folder + [o for o in filled if o.startswith("PYTHONPATH=")]
        runs.append(
            [
                *(["env", *path] if path else []),
                python,
                *("-m", "pytest", "-p", "no:cacheprovider", "-p", "tokcap_pytest"),
                *(o for o in filled if not o.startswith("PYTHONPATH=")),
                "--tokcap-profile=ci",
                f"--tokcap-seed={seed}",
                "-x",
                "-q",
            ]
        )
    if len(runs) == 1:
        return runs[0]
    return ["sh", "-c", " && ".join(shlex.join(run) for run in runs)]
