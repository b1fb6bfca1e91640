"""The two sides of staging: a sink that makes staged calls durable, a source that reads them.

Both are structural and synchronous: an implementation needs no base class, only plain methods
with these names and signatures. The inference worker calls them from its capture hooks, which
are not coroutines, so a store whose client is asynchronous runs its calls off the worker's
event loop itself. ``isinstance`` checks only that the methods exist, not that they are not
coroutine functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from tokcap_spec.staging.records import StagedCallBaseSnapshot, StagedCallRecord, StageResult

__all__ = ["StagingSink", "StagingSource"]


@runtime_checkable
class StagingSink(Protocol):
    """Makes one staged call durable per ``stage``, and says so only once it is.

    ``stage`` is called from several completion threads at once, never serialized for it: the
    sink guards whatever state its calls share.
    """

    def stage(
        self, record: StagedCallRecord, *, attachments: Mapping[str, Any] | None = None
    ) -> StageResult:
        """Store ``record`` durably and return a result naming its staging key, or the error.

        ``attachments`` are the framework's own payloads for the call (processed media, for
        one). They belong in the same durable write as the record, and never in the record, its
        extras or any digest. A sink that takes them stores every one before reporting success
        or refuses the call; dropping one silently breaks the contract. The keyword is passed
        only when there are attachments, so a sink defined as ``stage(self, record)`` serves
        calls without them, and a call with them fails there with ``TypeError``, which the
        caller reports as a failed capture.
        """
        ...


@runtime_checkable
class StagingSource(Protocol):
    """Reads staged calls back by staging key."""

    def fetch(self, staging_keys: list[str]) -> list[StagedCallBaseSnapshot]:
        """Return one row per key of ``staging_keys``, in the order asked for.

        Rows carry no extras: a consumer that needs them fetches them by the same key and
        checks them against the row's ``extras_digest`` where it uses them.
        """
        ...
