"""The baseline store with a relaxed fence, under the target name ``relaxed:RelaxedFileStore``.

A put of a new call after ``freeze`` is stored and moves the version, so dropping the earlier
snapshot returns False (FENCE-1, relaxed). Everything else is :class:`base.BaseStore`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from base import BaseStore

__all__ = ["RelaxedFileStore"]


class RelaxedFileStore(BaseStore):
    """The correct baseline store with a relaxed fence."""

    fence: ClassVar[Literal["strict", "relaxed"]] = "relaxed"
