"""Staging keys that tell every pair of ids apart, ``/`` in the ids or not.

:func:`~tokcap_spec.staging.records.staging_key` joins the two ids with ``/``, so
``("a/b", "c")`` and ``("a", "b/c")`` share a key. :func:`distinct_staging_key` first
percent-encodes ``%`` (as ``%25``) and ``/`` (as ``%2F``) in each id: neither encoded id holds a
``/``, so the one ``/`` between them splits the key back into the pair, and no two pairs share a
key. For ids without ``%`` and ``/`` the key is the default one.
"""

from __future__ import annotations

__all__ = ["distinct_staging_key", "split_staging_key"]


def _encode(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


def _decode(part: str) -> str:
    return part.replace("%2F", "/").replace("%25", "%")


def distinct_staging_key(rollout_id: str, model_call_id: str) -> str:
    """The key a call with these ids is staged under, distinct for every distinct pair.

    ``"{rollout_id}/{model_call_id}"`` after ``%`` and ``/`` in each id are written ``%25`` and
    ``%2F``; no other character changes. Raises ``ValueError`` when either id is empty and
    ``TypeError`` when either is not a ``str``.
    """
    for name, value in (("rollout_id", rollout_id), ("model_call_id", model_call_id)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        if not value:
            raise ValueError(f"{name} must not be empty")
    return f"{_encode(rollout_id)}/{_encode(model_call_id)}"


def split_staging_key(key: str) -> tuple[str, str]:
    """The ``(rollout_id, model_call_id)`` that :func:`distinct_staging_key` made ``key`` from.

    Raises ``ValueError`` for a string it cannot have made: one without exactly one ``/``, with
    an empty side, or with a ``%`` that does not start ``%25`` or ``%2F``.
    """
    rollout, slash, call = key.partition("/")
    if not slash or not rollout or not call or "/" in call:
        raise ValueError(f"{key!r} is not a staging key of two non-empty ids")
    pair = (_decode(rollout), _decode(call))
    if distinct_staging_key(*pair) != key:
        raise ValueError(f"{key!r} holds a '%' that is not '%25' or '%2F'")
    return pair
