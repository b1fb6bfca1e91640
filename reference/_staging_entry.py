"""One staged call as the staging stores hold it: its key, its record and its attachments."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tokcap_spec.staging import StagedCallBaseSnapshot, StagedCallRecord

__all__ = ["Attachment", "StagedEntry", "checked_attachments"]

Attachment = bytes | str
"""What an attachment may be: bytes, or text."""


def checked_attachments(attachments: object) -> dict[str, Attachment]:
    """A plain copy of ``attachments`` (``None`` is none), each value as exact ``bytes`` or ``str``.

    Raises ``TypeError`` naming the first thing that is not a mapping of ``str`` to ``bytes`` or
    ``str``: a ``bytearray``, a number or an object is refused, never converted.
    """
    if attachments is None:
        return {}
    if not isinstance(attachments, Mapping):
        raise TypeError(f"attachments must be a mapping, got {type(attachments).__name__}")
    checked: dict[str, Attachment] = {}
    for name, value in attachments.items():
        if not isinstance(name, str):
            raise TypeError(f"attachment names must be str, got {type(name).__name__} {name!r}")
        if isinstance(value, bytes):
            checked[str(name)] = bytes(value)
        elif isinstance(value, str):
            checked[str(name)] = str(value)
        else:
            raise TypeError(
                f"attachment {name!r} is a {type(value).__name__}; attachments hold bytes or str"
            )
    return checked


@dataclass(frozen=True)
class StagedEntry:
    """A valid staged call under its key, with the attachments staged in the same write."""

    key: str
    record: StagedCallRecord
    attachments: Mapping[str, Attachment]

    def same_call(self, other: StagedEntry) -> bool:
        """Whether ``other`` stages exactly this call: same key, digest and attachments.

        The digest commits to every field, the extras through ``extras_digest``, and to the
        columns as float32, so two records whose floats differ only beyond float32 are one call.
        Attachments are the same when they have the same names and the same values, bytes and
        text told apart.
        """
        return (
            self.key == other.key
            and self.record.digest == other.record.digest
            and _typed(self.attachments) == _typed(other.attachments)
        )

    def difference(self, other: StagedEntry) -> str:
        """What tells the stored call ``self`` from ``other``, for an error message."""
        if self.record.digest != other.record.digest:
            return (
                f"it holds a call with digest {self.record.digest}, "
                f"not the offered {other.record.digest}"
            )
        return (
            f"it holds this call with attachments {sorted(self.attachments)}, "
            f"not the offered {sorted(other.attachments)} (or the values differ)"
        )

    def snapshot(self) -> StagedCallBaseSnapshot:
        """A new row of this call without its extras, validated afresh."""
        fields = self.record.model_dump(exclude={"extras"})
        return StagedCallBaseSnapshot.model_validate(fields)

    def extras(self) -> dict[str, Any] | None:
        """A copy of this call's extras, ``None`` when it has none."""
        return copy.deepcopy(self.record.extras)

    def attachment_copy(self) -> dict[str, Attachment]:
        """A copy of the attachments staged with this call."""
        return dict(self.attachments)


def _typed(attachments: Mapping[str, Attachment]) -> dict[str, tuple[type, Attachment]]:
    return {name: (type(value), value) for name, value in attachments.items()}
