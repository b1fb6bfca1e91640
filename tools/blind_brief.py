"""Write the brief of a blind round: each clause's promise and NeMo Gym 0.7.0's protocol text.

    python tools/blind_brief.py OUT [--gym-root DIR]

A blind writer reads only what this writes, so it cannot write the bugs the kit already looks
for: ``OUT/promises.md`` holds each kit clause's id, title and promise, and nothing of what the
catalog says about how the kit checks it, what it varies or how stores usually break it;
``OUT/gym/`` holds the protocol, record and staging modules of the released NeMo Gym 0.7.0
wheel (its own docstrings), never its store or its own conformance checks. ``OUT/read.json``
lists every file of the brief with its sha256, for ``docs/blind-rounds.json``'s ``read``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from conformance.catalog import CLAUSES, FAMILY_TITLES, KIT, contract_of  # noqa: E402

GYM_FILES = (
    "nemo_gym/token_id_capture/protocols.py",
    "nemo_gym/token_id_capture/records.py",
    "nemo_gym/token_id_capture/sink.py",
    "nemo_gym/token_id_capture/lineage.py",
    "nemo_gym/token_id_capture/staging/protocols.py",
    "nemo_gym/token_id_capture/staging/records.py",
    "nemo_gym/token_id_capture/staging/digest.py",
)
"""The protocol text of the release: the modules a framework author implements against."""


def promises() -> str:
    """Every kit clause's id, title and promise, by contract and family; nothing else."""
    lines = ["# The promises", ""]
    for contract in ("capture", "staging-v2"):
        lines += [f"## Contract `{contract}`", ""]
        for family, title in FAMILY_TITLES.items():
            members = [c for c in CLAUSES if c.family == family and c.checked_by == KIT]
            if not members or contract_of(family) != contract:
                continue
            lines += [f"### {family}: {title}", ""]
            for clause in members:
                lines += [f"- **{clause.id}** ({clause.title}): {clause.promise}", ""]
    return "\n".join(lines)


def _gym_root() -> Path:
    found = sorted((PROJECT / ".pytest_cache" / "d" / "tokcap-interop").glob("unpacked-0.7.0-*"))
    if not found:
        raise SystemExit("no unpacked NeMo Gym 0.7.0: run the interop tests once, or --gym-root")
    return found[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--gym-root", type=Path, default=None)
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "promises.md").write_text(promises(), encoding="utf-8")
    root = args.gym_root or _gym_root()
    for name in GYM_FILES:
        target = out / "gym" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / name, target)
    read = {
        str(path.relative_to(out)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(out.rglob("*"))
        if path.is_file() and path.name != "read.json"
    }
    (out / "read.json").write_text(json.dumps(read, indent=2) + "\n", encoding="utf-8")
    print(f"brief written to {out}: {len(read)} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
