"""Rollout ids and the route prefixes that carry them.

Every store keys its records by rollout id, and most stores turn that id into a file name,
a key or a URL segment. The pattern below keeps every such mapping safe: no path
separators, no ``.``/``..``, no empty id, at most 200 characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from tokcap_spec.errors import InvalidRolloutIdError

__all__ = [
    "ROLLOUT_ID_PATTERN",
    "ROLLOUT_ROUTE_PREFIX",
    "TRAINING_CAPTURE_SEGMENT",
    "is_valid_rollout_id",
    "rollout_id_from_path",
    "rollout_route",
    "training_capture_route",
    "validate_call_id",
    "validate_rollout_id",
    "validate_rollout_ids",
]

ROLLOUT_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
"""Ids the kit uses and every reference store accepts (matched in full)."""

ROLLOUT_ROUTE_PREFIX: Final = "/ng-rollout/"
TRAINING_CAPTURE_SEGMENT: Final = "training-token-capture"


def is_valid_rollout_id(rollout_id: object) -> bool:
    """Return whether ``rollout_id`` is a string matching :data:`ROLLOUT_ID_PATTERN`."""
    return isinstance(rollout_id, str) and ROLLOUT_ID_PATTERN.fullmatch(rollout_id) is not None


def validate_rollout_id(rollout_id: object) -> str:
    """Return ``rollout_id`` unchanged, or raise :class:`InvalidRolloutIdError` saying why."""
    if is_valid_rollout_id(rollout_id):
        assert isinstance(rollout_id, str)
        return rollout_id
    if not isinstance(rollout_id, str):
        reason = f"must be a str, got {type(rollout_id).__name__}"
    elif not rollout_id:
        reason = "must not be empty"
    elif len(rollout_id) > 200:
        reason = f"must be at most 200 characters, got {len(rollout_id)}"
    else:
        reason = (
            "may hold only letters, digits, '.', '_' and '-', and must start with a letter or digit"
        )
    shown = repr(rollout_id) if not isinstance(rollout_id, str) else repr(rollout_id[:80])
    raise InvalidRolloutIdError(f"invalid rollout id {shown}: {reason}")


def validate_rollout_ids(rollout_ids: Iterable[str]) -> list[str]:
    """Return a batch of ids as a list, each validated; a lone string is refused, not iterated."""
    if isinstance(rollout_ids, str | bytes):
        raise TypeError(
            "expected an iterable of rollout ids, got a single "
            f"{type(rollout_ids).__name__} {rollout_ids[:80]!r}; wrap it in a list"
        )
    return [validate_rollout_id(rollout_id) for rollout_id in rollout_ids]


def validate_call_id(model_call_id: object, *, allow_empty: bool = False) -> str:
    """Return ``model_call_id`` unchanged if it is a str, non-empty unless ``allow_empty``.

    Any other string is accepted as it is: call ids are never normalized (PUT-6).
    """
    if not isinstance(model_call_id, str):
        raise TypeError(f"model_call_id must be a str, got {type(model_call_id).__name__}")
    if not model_call_id and not allow_empty:
        raise ValueError("model_call_id must be a non-empty str, got ''")
    return model_call_id


def rollout_route(rollout_id: str, rest: str = "") -> str:
    """Return the evaluation-capture route ``/ng-rollout/<id>/<rest>`` for a valid id."""
    return f"{ROLLOUT_ROUTE_PREFIX}{validate_rollout_id(rollout_id)}/{rest.lstrip('/')}"


def training_capture_route(rollout_id: str, rest: str = "") -> str:
    """Return the training-capture route ``/ng-rollout/<id>/training-token-capture/<rest>``."""
    return rollout_route(rollout_id, f"{TRAINING_CAPTURE_SEGMENT}/{rest.lstrip('/')}")


def rollout_id_from_path(path: str) -> str | None:
    """Return the rollout id a ``/ng-rollout/<id>/...`` path carries, or None if it carries none."""
    if not path.startswith(ROLLOUT_ROUTE_PREFIX):
        return None
    candidate = path[len(ROLLOUT_ROUTE_PREFIX) :].split("/", 1)[0]
    return candidate if is_valid_rollout_id(candidate) else None
