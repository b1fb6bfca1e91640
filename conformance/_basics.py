"""The plainest use of every operation, tried when a check fails, to tell failed from blocked.

A check that fails may be failing because of its own clause, or because something more basic
is broken: the object is no sink, a plain put raises or is not visible on return, a snapshot
cannot be read, a freeze is not idempotent, an exact drop is refused, a late put slips past the
fence, a mark is not seen. The runner tries these basics in that order, on fresh endpoints and
plain entries; the first one that breaks is the clause the failing check is *blocked by*,
unless it is the check's own.
Each basic is one small promise of one clause, so a store with one bug fails one clause.

The outcome is computed once per run and process: the basics do not depend on the check.
"""

from __future__ import annotations

from conformance import _steps as step
from conformance._kit import Kit, unexpected_error
from conformance._reading import Unreadable
from conformance._registry import Basic, basics_by_name
from conformance._settings import KitSettings
from conformance._violation import ClauseViolation
from tokcap_spec.errors import EndpointError

__all__ = ["ORDER", "STAGING_ORDER", "STRUCTURAL", "first_broken"]

_BUILDS = {False: "BUILD-1", True: "STAGE-2"}
"""The clause a target that cannot be built or used at all breaks, by contract."""

ORDER = (
    "shapes",
    "builds",
    "visible-on-return",
    "one-rollout",
    "isolation",
    "retire",
    "masking",
    "closing",
    "spawned",
)
"""The basics by name, in the order they are tried; each is registered beside its family's
checks with :func:`conformance._registry.basic`."""

STAGING_ORDER = ("staging-shapes", "staging-builds", "staging-round-trip")
"""The basics of the staging contract, in the order they are tried."""

STRUCTURAL = frozenset({"SHAPE-1", "SHAPE-2", "BUILD-1", "BUILD-2", "STAGE-1", "STAGE-2"})
"""Clauses about what the target is, not what it does: only the shape and build basics apply."""

READS_ONLY = ("shapes", "builds", "visible-on-return", "one-rollout", "isolation", "spawned")
"""The basics a LINEAGE clause rests on: a resolver reads what puts stored, here and in other
processes; how a store retires, masks or closes a rollout is no ground to leave its answers
unjudged."""

_outcomes: dict[tuple[int, str], tuple[KitSettings, ClauseViolation | None]] = {}


def first_broken(settings: KitSettings, clause: str = "") -> ClauseViolation | None:
    """Return the violation of the first basic that breaks for the target, or None.

    For a ``clause`` in :data:`STRUCTURAL` only the basics of shape and construction count,
    and for a LINEAGE clause only those of :data:`READS_ONLY`.
    """
    registered = basics_by_name()
    order = STAGING_ORDER if settings.staging else ORDER
    if clause in STRUCTURAL:
        names: tuple[str, ...] = order[:2]
    elif clause.startswith("LINEAGE-"):
        names = READS_ONLY
    else:
        names = order
    for name in names:
        found = registered[name]
        known = _outcomes.get((id(settings), name))
        if known is None or known[0] is not settings:
            # A kit of its own for each: endpoints one basic left open never hinder the next.
            kit = Kit(settings, f"basics-{name}", found.clause)
            try:
                known = (settings, _broken(kit, found))
            finally:
                kit.close()
            _outcomes[(id(settings), name)] = known
        if known[1] is not None:
            return known[1]
    return None


def _broken(kit: Kit, found: Basic) -> ClauseViolation | None:
    try:
        found.function(kit)
    except ClauseViolation as violation:
        return violation
    except Unreadable as problem:
        return step.unreadable(problem, kit)
    except EndpointError as exc:
        return unexpected_error(_BUILDS[kit.settings.staging], "building the target", exc, kit)
    except Exception as exc:
        return unexpected_error(
            _BUILDS[kit.settings.staging], "a plain use of the target", exc, kit
        )
    return None
