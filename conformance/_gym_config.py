"""Reading the sink a Gym config file names, exactly as a serving process would build it.

The block is read in the dialect it is written in
(:func:`tokcap_spec.gym07_config.read_capture_config`): the seed's, or NeMo Gym 0.7.0's once it
uses a key 0.7.0 added. Either way only ``enabled``, ``sink``, ``sink_kwargs``, ``dir`` and
``model_call_capture_dir`` decide what is judged; every other key is validated by its dialect's
rules and then left alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tokcap_spec.config import FILE_STORE_TARGET, TOKEN_ID_CAPTURE_BLOCK
from tokcap_spec.gym07_config import GYM07_DIALECT, capture_config_dialect, read_capture_config

__all__ = ["DIRECTORY_ONLY", "global_config_from_file", "sink_from_gym_config"]

DIRECTORY_ONLY = "directory_only"
"""The key :func:`sink_from_gym_config` adds to mark kwargs derived from a bare ``dir``."""


def global_config_from_file(path: Path) -> dict[str, Any]:
    """Return the global config dict holding the ``token_id_capture`` block.

    The block may sit at the top level of the file or under ``env.nemo_gym``.
    """
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        # The parser's own text quotes the offending line, which may hold a credential.
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ValueError(f"{path} is not valid YAML: {problem}{where}") from None
    if not isinstance(document, dict):
        raise ValueError(f"{path} must hold a mapping at the top level")
    if TOKEN_ID_CAPTURE_BLOCK in document:
        return document
    nested = (
        (document.get("env") or {}).get("nemo_gym")
        if isinstance(document.get("env"), dict)
        else None
    )
    if isinstance(nested, dict) and TOKEN_ID_CAPTURE_BLOCK in nested:
        return nested
    raise ValueError(
        f"{path} has no '{TOKEN_ID_CAPTURE_BLOCK}' block, neither at the top level nor under "
        "env.nemo_gym"
    )


def sink_from_gym_config(path: Path) -> tuple[str, dict[str, Any]]:
    """Return the ``(target, kwargs)`` a serving process would build its sink from.

    With no ``sink`` configured the file store is in use: the target is the reference file
    store rooted at the resolved directory, and the kwargs carry :data:`DIRECTORY_ONLY` so that
    the caller can judge it somewhere other than among the real captures.
    """
    global_config = global_config_from_file(path)
    try:
        config = read_capture_config(global_config)
    except ValidationError as exc:
        # pydantic echoes input values; only locations and reasons may leave this function.
        reasons = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'block'}: {error['msg']}"
            for error in exc.errors()
        )
        dialect = (
            " (read as NeMo Gym 0.7.0's, for the keys it added)"
            if capture_config_dialect(global_config) == GYM07_DIALECT
            else ""
        )
        raise ValueError(
            f"its {TOKEN_ID_CAPTURE_BLOCK} block{dialect} is invalid: {reasons}"
        ) from None
    settings = config.token_id_capture
    if not settings.enabled:
        raise ValueError(f"{TOKEN_ID_CAPTURE_BLOCK}.enabled is false: capture builds no sink")
    if settings.sink is not None:
        return settings.sink, dict(settings.sink_kwargs)
    directory = config.resolved_dir()
    if directory is None:
        raise ValueError(f"{TOKEN_ID_CAPTURE_BLOCK} names neither a sink nor a directory")
    return FILE_STORE_TARGET, {"root": str(directory), DIRECTORY_ONLY: True}


def lineage_from_gym_config(path: Path) -> tuple[str, dict[str, Any]] | None:
    """The ``(target, kwargs)`` of the lineage resolver a NeMo Gym 0.7.0 block names, or None.

    Only a 0.7.0 block has a ``lineage_store``; the block is read and validated as
    :func:`sink_from_gym_config` reads it, which the caller has already done.
    """
    config = read_capture_config(global_config_from_file(path))
    target = getattr(config.token_id_capture, "lineage_store", None)
    if not target:
        return None
    return str(target), dict(getattr(config.token_id_capture, "lineage_store_kwargs", {}))
