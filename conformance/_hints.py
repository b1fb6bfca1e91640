"""What to do about the mistakes a first implementation usually makes, named from the error.

Each function looks at an error and returns a sentence naming the usual cause and its fix,
or an empty string when the error is not that mistake.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["module_lookup", "null_log_prob"]

NULL_LOG_PROB = (
    "a log prob came back as null: -inf (the log prob of a token the sampler could not pick) "
    "does not survive an encoder that writes non-finite floats as null, such as pydantic's "
    "model_dump_json; store the entry losslessly, as entry.to_json_bytes() read back with "
    "TokenEntry.from_json_bytes(), or with json.dumps(..., allow_nan=True)"
)


def module_lookup(module_name: str, exc: BaseException) -> str:
    """For a target module that is not found at all, say where Python looked and how to
    put the current folder there; empty for any other import error."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if not missing or not (module_name == missing or module_name.startswith(f"{missing}.")):
        return ""
    package, _, leaf = missing.rpartition(".")
    found = getattr(sys.modules.get(package), "__file__", None) if package else None
    if found is not None:
        return (
            f"Python found the package {package!r} at {Path(found).parent}, and no module "
            f"{leaf!r} in it: name a module the package holds"
        )
    here = Path.cwd()
    top = module_name.split(".", 1)[0]
    holds = [name for name in (f"{top}.py", top) if (here / name).exists()]
    on_path = any(Path(entry or ".").resolve() == here.resolve() for entry in sys.path)
    fixes = (
        "run `python -m pytest ...` (it puts the current folder on sys.path, the `pytest` "
        "script does not), or `PYTHONPATH=. pytest ...`, or install the package that holds "
        "it (`pip install -e .`)"
    )
    if holds and not on_path:
        return (
            f"Python looks {missing!r} up on sys.path, and the current folder {here}, which "
            f"holds {holds[0]}, is not on it: {fixes}"
        )
    where = "holds" if on_path else "does not hold"
    return (
        f"Python looks {missing!r} up on sys.path, which {where} the current folder {here}; "
        f"no folder on it has {top}.py or {top}/. From the folder that holds it, {fixes}"
    )


def null_log_prob(exc: BaseException) -> str:
    """For pydantic refusing a log prob that is None (here or in what caused ``exc``), name
    ``-inf`` and lossless encoding; empty for any other error."""
    from pydantic import ValidationError

    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ValidationError):
            for error in cause.errors(include_url=False):
                if "generation_log_probs" in error["loc"] and error.get("input", 0) is None:
                    return NULL_LOG_PROB
        cause = cause.__cause__ or cause.__context__
    return ""
