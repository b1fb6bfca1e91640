"""The contract's revisions, locked: for each, its clause ids in order and a digest of each promise.

``conformance/contract.lock.json`` lists every revision of the contract, oldest first. A
revision records the catalog's clause ids in catalog order, each with :func:`digest` of its
promise. The newest revision is the one the kit and ``tokcap_spec.SPEC_REVISION`` implement;
:func:`drift` says how the catalog differs from it, which the project's tests require to be
nothing. Changing a promise, or adding, removing or reordering clauses, therefore takes a new
revision: ``python -m conformance.revision --write <REVISION>`` records one (and sets
``SPEC_REVISION`` to it). A revision once recorded is never rewritten.

The lock file is JSON: ``{"lock_format": 1, "digest": <how digests are made>, "revisions":
[{"revision": "2026.11", "clauses": [["REC-1", "<16 hex digits>"], ...]}, ...]}``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.catalog import CLAUSES, Clause

__all__ = [
    "LOCK",
    "LOCK_FORMAT",
    "WRITE_COMMAND",
    "Locked",
    "RevisionError",
    "digest",
    "drift",
    "latest",
    "locked",
    "main",
    "read",
    "record",
]

LOCK = Path(__file__).with_name("contract.lock.json")
"""The lock file, shipped inside the ``conformance`` package."""

LOCK_FORMAT = 1
"""Version of the lock file's layout."""

WRITE_COMMAND = "python -m conformance.revision --write"

_DIGEST_RULE = (
    "sha256 of the promise text, whitespace runs collapsed to one space and the ends "
    "stripped, UTF-8; the first 16 hex digits"
)
_REVISION = re.compile(r"^\d+(?:\.\d+)*$")
_SPEC_LINE = re.compile(r'^SPEC_REVISION = "[^"]*"$', re.MULTILINE)

Locked = tuple[tuple[str, str], ...]
"""One revision's clauses: ``(clause id, promise digest)`` in catalog order."""


class RevisionError(Exception):
    """A revision cannot be recorded; the message says why and what to do instead."""


def digest(promise: str) -> str:
    """Return the short digest of a promise: changes of wrapping or spacing leave it as it is."""
    normalized = " ".join(promise.split())
    return hashlib.sha256(normalized.encode("utf-8")).hexdigest()[:16]


def locked(clauses: Sequence[Clause] | None = None) -> Locked:
    """Return what a revision of ``clauses`` (default: the catalog) records: each id with the
    digest of its promise."""
    return tuple((found.id, digest(found.promise)) for found in _or_catalog(clauses))


def _or_catalog(clauses: Sequence[Clause] | None) -> Sequence[Clause]:
    return CLAUSES if clauses is None else clauses


def read(path: Path = LOCK) -> dict[str, Locked]:
    """Return every recorded revision, oldest first."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("lock_format") != LOCK_FORMAT:
        raise RevisionError(f"{path}: lock_format {data.get('lock_format')!r} is not {LOCK_FORMAT}")
    return {
        entry["revision"]: tuple((str(each), str(sha)) for each, sha in entry["clauses"])
        for entry in data["revisions"]
    }


def latest(path: Path = LOCK) -> str:
    """Return the newest recorded revision: the one the kit implements."""
    return list(read(path))[-1]


def drift(clauses: Sequence[Clause] | None = None, path: Path = LOCK) -> list[str]:
    """Return how ``clauses`` (default: the catalog) differ from the newest recorded revision,
    one line per change; an empty list when they are that revision."""
    revision = latest(path)
    before = dict(read(path)[revision])
    now = dict(locked(clauses))
    changes = [f"{each} is new since {revision}" for each in now if each not in before]
    changes += [f"{each} was removed since {revision}" for each in before if each not in now]
    changes += [
        f"the promise of {each} changed since {revision}"
        for each, sha in now.items()
        if each in before and before[each] != sha
    ]
    kept_now = [each for each in now if each in before]
    kept_before = [each for each in before if each in now]
    if kept_now != kept_before:
        changes.append(f"the clauses are in another order than in {revision}")
    return changes


def advice(path: Path = LOCK) -> str:
    """Say what to do when :func:`drift` is not empty."""
    revision = latest(path)
    return (
        f"the clause catalog is no longer contract revision {revision}. If the change is meant, "
        f"record a new revision: `{WRITE_COMMAND} <REVISION>` with a revision after {revision} "
        f"(such as {_next(revision)}); it appends the revision to {_shown(path)}, sets "
        "SPEC_REVISION in tokcap_spec/__init__.py to it, and CHANGELOG.md then needs a line for "
        f"it. Otherwise restore the promises of revision {revision}."
    )


def record(
    revision: str,
    clauses: Sequence[Clause] | None = None,
    path: Path = LOCK,
    spec_init: Path | None = None,
) -> bool:
    """Append ``revision`` recording ``clauses`` (default: the catalog) to the lock, and set
    ``SPEC_REVISION`` in ``spec_init`` to it; return False if the lock already records exactly
    that.

    Raises :class:`RevisionError` for a revision that is recorded with other promises, is
    not after the newest one, or would record nothing new.
    """
    if not _REVISION.match(revision):
        raise RevisionError(f"revision {revision!r} is not dotted numbers such as 2026.12")
    revisions = read(path)
    wanted = locked(clauses)
    if revision in revisions:
        if revisions[revision] == wanted:
            return False
        raise RevisionError(
            f"revision {revision} is recorded with other promises and is never rewritten: "
            f"record the change as a new revision after {latest(path)}"
        )
    newest = latest(path)
    if _key(revision) <= _key(newest):
        raise RevisionError(f"revision {revision} is not after the newest one, {newest}")
    if revisions[newest] == wanted:
        raise RevisionError(f"the catalog is revision {newest} exactly; nothing to record")
    updated = None
    if spec_init is not None:
        text = spec_init.read_text(encoding="utf-8")
        if not _SPEC_LINE.search(text):
            raise RevisionError(f'{spec_init} has no line `SPEC_REVISION = "..."` to set')
        updated = _SPEC_LINE.sub(f'SPEC_REVISION = "{revision}"', text, count=1)
    revisions[revision] = wanted
    _write(path, revisions)
    if spec_init is not None and updated is not None:
        spec_init.write_text(updated, encoding="utf-8", newline="\n")
    return True


def _write(path: Path, revisions: dict[str, Locked]) -> None:
    # One clause a line, so that a new revision reads as a plain diff.
    parts = []
    for revision, clauses in revisions.items():
        rows = ",\n".join(f"        {json.dumps([each, sha])}" for each, sha in clauses)
        parts.append(
            f'    {{\n      "revision": {json.dumps(revision)},\n      "clauses": [\n'
            f"{rows}\n      ]\n    }}"
        )
    text = (
        f'{{\n  "lock_format": {LOCK_FORMAT},\n  "digest": {json.dumps(_DIGEST_RULE)},\n'
        f'  "revisions": [\n' + ",\n".join(parts) + "\n  ]\n}\n"
    )
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8", newline="\n")
    partial.replace(path)


def _key(revision: str) -> tuple[int, ...]:
    return tuple(int(part) for part in revision.split("."))


def _next(revision: str) -> str:
    parts = revision.split(".")
    if len(parts) == 2 and len(parts[1]) == 2:  # a year and a month
        year, month = int(parts[0]), int(parts[1])
        return f"{year + 1}.01" if month >= 12 else f"{year}.{month + 1:02d}"
    return ".".join([*parts[:-1], str(int(parts[-1]) + 1)])


def _shown(path: Path) -> str:
    return "conformance/contract.lock.json" if path == LOCK else str(path)


def main(argv: Sequence[str] | None = None) -> int:
    """``--check``: exit 1 naming every change when the catalog is not the newest revision.
    ``--write REVISION``: record a new revision (exit 0), or refuse (exit 1) saying why."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance.revision",
        description="Check the clause catalog against the locked contract revision, or "
        "record a new revision.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true", help="exit 1 if the catalog drifted")
    action.add_argument("--write", metavar="REVISION", help="record a new revision")
    parser.add_argument("--lock", type=Path, default=LOCK, help=argparse.SUPPRESS)
    parser.add_argument("--spec-init", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    lock: Path = args.lock
    if args.check:
        changes = drift(path=lock)
        if changes:
            print("\n".join([*changes, advice(lock)]), file=sys.stderr)
            return 1
        print(f"the clause catalog is contract revision {latest(lock)}")
        return 0
    spec_init: Path = args.spec_init or _spec_init()
    try:
        added = record(args.write, path=lock, spec_init=spec_init)
    except RevisionError as refused:
        print(f"refused: {refused}", file=sys.stderr)
        return 1
    if added:
        print(
            f"recorded revision {args.write} in {_shown(lock)} and set SPEC_REVISION in "
            f"{spec_init}; add a line for it to CHANGELOG.md"
        )
    else:
        print(f"revision {args.write} is already recorded with these promises")
    return 0


def _spec_init() -> Path:
    import tokcap_spec

    return Path(tokcap_spec.__file__)


if __name__ == "__main__":
    sys.exit(main())
