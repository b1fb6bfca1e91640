"""Typed errors raised by token stores and by the capture configuration.

Every error a conforming store raises on purpose derives from :class:`TokenCaptureError`,
so a capture path can tell "the store refused this" apart from a bug in the store.

Each error is also the built-in exception NeMo Gym's own store raises for the same refusal,
so code written against Gym's store catches ours unchanged: a conflicting re-put is a
``ValueError``; a write after freeze or after retirement is a ``RuntimeError``; a failed
durable write is an ``OSError``; a bad rollout id or sink target is a ``ValueError``.
"""

from __future__ import annotations

__all__ = [
    "ConflictingEntryError",
    "CorruptStoreError",
    "EndpointError",
    "InvalidEntryError",
    "InvalidRolloutIdError",
    "MaskFractionExceededError",
    "RolloutFrozenError",
    "RolloutRetiredError",
    "StoreWriteError",
    "TokenCaptureError",
]


class TokenCaptureError(Exception):
    """Base class of every error a token store or the capture config raises on purpose."""


class InvalidRolloutIdError(TokenCaptureError, ValueError):
    """A rollout id does not match :data:`tokcap_spec.ids.ROLLOUT_ID_PATTERN`."""


class RolloutFrozenError(TokenCaptureError, RuntimeError):
    """A put of a new call reached a rollout that is already frozen (strict fence, FENCE-1).

    Also a ``RuntimeError``; the message names the rollout and the call.
    """

    @classmethod
    def for_call(cls, rollout_id: str, model_call_id: str) -> RolloutFrozenError:
        """Return the error for a new call ``model_call_id`` that reached frozen ``rollout_id``."""
        return cls(
            f"rollout {rollout_id!r} is frozen; expected no new call, got model_call_id "
            f"{model_call_id!r}"
        )


class RolloutRetiredError(TokenCaptureError, RuntimeError):
    """A write reached a rollout that a consumer already dropped or retired (FENCE-2).

    Also a ``RuntimeError``; the message names the rollout.
    """

    @classmethod
    def for_rollout(cls, rollout_id: str) -> RolloutRetiredError:
        """Return the error for a write that reached dropped or retired ``rollout_id``."""
        return cls(
            f"rollout {rollout_id!r} was already dropped or retired; expected a live rollout "
            "(delete it to reuse the id)"
        )


class ConflictingEntryError(TokenCaptureError, ValueError):
    """A ``model_call_id`` was reused with a different payload (PUT-4).

    Also a ``ValueError``; the message names the rollout and the call.
    """


class InvalidEntryError(TokenCaptureError, ValueError):
    """An entry breaks the record rules (REC-2 to REC-4) and was refused: nothing was stored.

    Also a ``ValueError``, caused by pydantic's ``ValidationError``. The message names the
    rollout, the call and each broken field with its rule, never a field's value, and says what
    the caller owes the rollout: a mark, so that it is masked rather than trained on.
    """


class CorruptStoreError(TokenCaptureError):
    """Stored records are damaged in a way the store cannot repair without losing evidence."""


class StoreWriteError(TokenCaptureError, OSError):
    """The store could not make a write durable; nothing was acknowledged."""


class EndpointError(TokenCaptureError, ValueError):
    """A ``module.path:ClassName`` sink or source target cannot be built (BUILD-2).

    Messages name the target and the keyword-argument *names*; they never carry values,
    because sink kwargs routinely hold credentials.
    """


class MaskFractionExceededError(TokenCaptureError):
    """More finalized rollouts were masked than ``max_mask_fraction`` allows (CFG-6)."""
