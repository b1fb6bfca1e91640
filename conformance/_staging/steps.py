"""The steps the staging checks are made of: stage, read the answer, fetch, compare rows.

Each step calls the implementation within the run's deadline and turns what it sees into
the clause it breaks: a malformed answer breaks STAGE-1 whatever the check, a raise from
``stage`` breaks STAGE-4, a row that is not the staged call breaks the check's own clause
(STAGE-9 unless it names another).
"""

from __future__ import annotations

import inspect
import struct
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conformance._kit import Kit, PlainEndpoint
from conformance._settings import DEFAULT_STAGING_CLASSES
from conformance._staging.calls import float32_bits, sealed
from tokcap_spec.staging import StagedCallBaseSnapshot, StagedCallRecord
from tokcap_spec.staging.classes import WireClasses, wire_classes

__all__ = [
    "Staged",
    "expect_missing",
    "expect_row",
    "fetch",
    "fetch_one",
    "read_result",
    "read_row",
    "required_classes",
    "shown_value",
    "stage",
    "stage_ok",
    "value_difference",
    "wired",
]

_FLOAT_COLUMNS = ("token_mask_delta", "generation_log_probs_delta")


@dataclass(frozen=True)
class Staged:
    """What one ``stage`` answered: ``ok``, the key (``""`` when refused) and the error."""

    ok: bool
    key: str
    error: str


def required_classes(kit: Kit) -> WireClasses | None:
    """The staging classes the run names (``--tokcap-staging-classes``), or None by default:
    records are then tokcap_spec's and a result is read by its fields."""
    name = kit.settings.staging_classes
    return None if name == DEFAULT_STAGING_CLASSES else wire_classes(name)


def wired(kit: Kit, record: Any) -> Any:
    """``record`` as the run's staging classes carry it: the call a sink will meet."""
    classes = required_classes(kit)
    return record if classes is None else classes.record_of(record)


_A_RECORD = object()
"""What :func:`read_result` is told when the answer is to a record of the run's classes."""


def read_result(kit: Kit, result: Any, doing: str, handed: Any = _A_RECORD) -> Staged:
    """Read a ``stage`` answer as Gym reads it; a malformed one breaks STAGE-1.

    Under ``--tokcap-staging-classes`` the answer to a record of those classes (``handed``, by
    default one) must be an instance of their ``StageResult``, as NeMo Gym's capture requires
    of its own; what a sink answers for anything else (``None``, a dict) is read by its fields,
    since such a caller hands over nothing else.
    """
    __tracebackhide__ = True
    _refuse_awaitable(kit, result, "stage", f"{doing} to answer a StageResult")
    classes = required_classes(kit)
    typed = handed is _A_RECORD or (classes is not None and isinstance(handed, classes.record))
    if classes is not None and typed and not isinstance(result, classes.result):
        kit.fail(
            clause="STAGE-1",
            expected=f"{doing} to answer a {classes.describe()}",
            observed=f"it answered {type(result).__module__}.{type(result).__qualname__}",
            hint=f"return {classes.describe()}: the caller refuses any other class "
            "(NeMo Gym's capture turns it into a failed capture)",
        )
    missing = [name for name in ("ok", "staging_key", "error") if not hasattr(result, name)]
    if missing:
        kit.fail(
            clause="STAGE-1",
            expected=f"{doing} to answer a StageResult (ok, staging_key, error)",
            observed=f"it answered {type(result).__name__}, which has no {', '.join(missing)}",
            hint="return tokcap_spec.staging.StageResult (or Gym's own StageResult)",
        )
    ok, key, error = result.ok, result.staging_key, result.error
    if type(ok) is not bool:
        kit.fail(
            clause="STAGE-1",
            expected=f"{doing} to answer ok as a bool",
            observed=f"ok is {type(ok).__name__} {kit.redact(repr(ok))}",
            hint="set ok=True or ok=False",
        )
    if ok and (not isinstance(key, str) or not key):
        kit.fail(
            clause="STAGE-1",
            expected=f"{doing}, answered ok, to name a non-empty staging key",
            observed=f"staging_key is {kit.redact(repr(key))}",
            hint="return StageResult(ok=True, staging_key=<the key fetch takes>)",
        )
    if not ok and (not isinstance(error, str) or not error):
        kit.fail(
            clause="STAGE-1",
            expected=f"{doing}, answered not ok, to say why in a non-empty error",
            observed=f"error is {kit.redact(repr(error))}",
            hint="return StageResult(ok=False, error=<what went wrong>)",
        )
    return Staged(ok, key if ok else "", "" if ok else kit.redact(str(error)))


def _refuse_awaitable(kit: Kit, answer: Any, method: str, expected: str) -> None:
    """An awaitable answer breaks STAGE-1: the method is a coroutine function."""
    __tracebackhide__ = True
    if inspect.isawaitable(answer):
        if inspect.iscoroutine(answer):
            answer.close()
        kit.fail(
            clause="STAGE-1",
            expected=expected,
            observed=f"it answered an awaitable: {method} is a coroutine function",
            hint=f"define {method} with 'def', not 'async def': Gym calls it from plain threads",
        )


def stage(
    kit: Kit,
    sink: PlainEndpoint,
    record: Any,
    attachments: Mapping[str, Any] | Any | None = None,
    *,
    doing: str = "",
) -> Staged:
    """Stage ``record`` (with ``attachments`` when given) and read the answer.

    A raise breaks STAGE-4: ``stage`` reports every failure in its answer.
    """
    __tracebackhide__ = True
    doing = doing or f"stage({_ids(record)})"
    _keys_given(kit).setdefault(_pair(record), set())
    _attempts(kit)[_pair(record)] += 1
    record = wired(kit, record)
    try:
        if attachments is None:
            result = sink.stage(record)
        else:
            result = sink.stage(record, attachments=attachments)
    except Exception as exc:
        kit.fail(
            clause="STAGE-4",
            expected=f"{doing} to answer, ok or not, without raising",
            observed=kit.redact(f"it raised {type(exc).__name__}: {exc}"),
            hint="catch every error in stage and return StageResult(ok=False, error=...)",
        )
    staged = read_result(kit, result, doing, record)
    if staged.ok:
        _keys_given(kit).setdefault(_pair(record), set()).add(staged.key)
    return staged


_GIVEN: list[Any] = [None, {}, Counter()]
"""The run :func:`_keys_given` and :func:`_attempts` speak of, the keys each pair was answered
by ok stages, and how often each pair was staged."""


def _this_run(kit: Kit) -> list[Any]:
    if _GIVEN[0] is not kit.settings:
        _GIVEN[:] = [kit.settings, {}, Counter()]
    return _GIVEN


def _keys_given(kit: Kit) -> dict[tuple[str, str], set[str]]:
    """Every key an ok stage of this run answered, by ``(rollout_id, model_call_id)``."""
    given: dict[tuple[str, str], set[str]] = _this_run(kit)[1]
    return given


def _attempts(kit: Kit) -> Counter[tuple[str, str]]:
    """How many stages of this run handed each ``(rollout_id, model_call_id)``, ok or not."""
    attempts: Counter[tuple[str, str]] = _this_run(kit)[2]
    return attempts


def _pair(record: Any) -> tuple[str, str]:
    return (str(getattr(record, "rollout_id", "")), str(getattr(record, "model_call_id", "")))


def _expect_keys_apart(kit: Kit, mine: tuple[str, str], other: tuple[str, str]) -> None:
    """Fail STAGE-5 when two distinct pairs were answered one key by ok stages of this run."""
    __tracebackhide__ = True
    given = _keys_given(kit)
    shared = sorted(given.get(mine, set()) & given.get(other, set()))
    if mine != other and shared:
        kit.fail(
            clause="STAGE-5",
            expected="distinct (rollout_id, model_call_id) pairs to get distinct keys",
            observed=kit.redact(
                f"{mine!r} and {other!r} were both answered the key {shared[0]!r}, which now "
                f"fetches {other!r}"
            ),
            hint="encode both ids into the key so that no two pairs make one key (a key of the "
            "call id alone meets every rollout's call-0), e.g. "
            "tokcap_spec.staging.distinct_staging_key",
        )


def stage_ok(
    kit: Kit,
    sink: PlainEndpoint,
    record: StagedCallRecord,
    attachments: Mapping[str, Any] | None = None,
    *,
    clause: str | None = None,
    why: str = "",
) -> str:
    """Stage a valid call and return its key; a refusal breaks ``clause`` (the check's own)."""
    __tracebackhide__ = True
    staged = stage(kit, sink, record, attachments)
    if not staged.ok:
        _refused_for_its_ids(kit, sink, record, attachments, staged.error)
        kit.fail(
            clause=clause,
            expected=f"stage({_ids(record)}) of a valid call to be ok{why}",
            observed=f"it was refused: {staged.error}",
            hint="a valid call is stored and answered ok; refuse only what cannot be stored",
        )
    return staged.key


def stage_ok_taking(
    kit: Kit,
    sink: PlainEndpoint,
    record: StagedCallRecord,
    attachments: Mapping[str, Any] | None,
    *,
    why: str = "",
) -> tuple[str, Mapping[str, Any] | None]:
    """Stage a valid call with ``attachments``, or alone where the sink refuses them.

    STAGE-4 lets a sink refuse attachments it does not take (STAGE-11 judges a sink that
    declares it keeps them), so a refusal of the call with attachments is followed by the call
    alone, which must be ok. Returns the key and the attachments the sink took.
    """
    __tracebackhide__ = True
    if attachments:
        staged = stage(kit, sink, record, attachments)
        if staged.ok:
            return staged.key, attachments
        why = f"{why}, staged alone once it was refused with attachments ({staged.error})"
    return stage_ok(kit, sink, record, why=why), None


def _refused_for_its_ids(
    kit: Kit,
    sink: PlainEndpoint,
    record: StagedCallRecord,
    attachments: Mapping[str, Any] | None,
    error: str,
) -> None:
    """Fail STAGE-5 when the refused call stages ok under ids nothing else holds: the refusal
    came from its ids alone (keys that meet another pair's, ids the store cannot take)."""
    __tracebackhide__ = True
    if not isinstance(record, StagedCallRecord) or _attempts(kit)[_pair(record)] > 1:
        return  # what an earlier stage of these very ids left behind is another clause's
    rollout = kit.rollout_id("fresh-ids")
    fresh = sealed({**record.model_dump(), "rollout_id": rollout, "model_call_id": rollout})
    if not stage(kit, sink, fresh, attachments, doing=f"stage({_ids(fresh)})").ok:
        return  # refused whatever its ids: not a matter of keys
    kit.fail(
        clause="STAGE-5",
        expected=f"stage({_ids(record)}) of a valid call to be ok",
        observed=f"it was refused ({error}), while the very same call under ids nothing else "
        "holds stages ok",
        hint="the key must be distinct for every (rollout_id, model_call_id) pair and take any "
        "id: a key of the call id alone meets every other rollout's call of that id (each "
        "numbers its calls from call-0); encode both ids, e.g. "
        "tokcap_spec.staging.distinct_staging_key",
    )


def fetch(
    kit: Kit, source: PlainEndpoint, keys: list[str], *, clause: str | None = None
) -> list[Any]:
    """Fetch ``keys``; a raise or an answer that is no list of one row per key breaks
    ``clause``."""
    __tracebackhide__ = True
    shown = _keys(kit, keys)
    try:
        rows = source.fetch(list(keys))
    except Exception as exc:
        kit.fail(
            clause=clause,
            expected=f"fetch({shown}) of keys stage answered ok to return their rows",
            observed=kit.redact(f"it raised {type(exc).__name__}: {exc}"),
            hint="every key an ok stage returned must stay fetchable",
        )
    _refuse_awaitable(kit, rows, "fetch", f"fetch({shown}) to answer a list")
    if not isinstance(rows, list):
        kit.fail(
            clause="STAGE-1",
            expected=f"fetch({shown}) to answer a list",
            observed=f"it answered {type(rows).__name__}",
            hint="return a list with one row per key, in the order asked",
        )
    if len(rows) != len(keys):
        kit.fail(
            clause="STAGE-8",
            expected=f"fetch of {len(keys)} keys to answer {len(keys)} rows",
            observed=f"it answered {len(rows)}",
            hint="answer one row per key asked, repeats included, or raise",
        )
    return rows


def fetch_one(kit: Kit, source: PlainEndpoint, key: str, *, clause: str | None = None) -> Any:
    """Fetch the one row of ``key`` (see :func:`fetch`)."""
    __tracebackhide__ = True
    (row,) = fetch(kit, source, [key], clause=clause)
    return row


def read_row(kit: Kit, row: Any, where: str) -> dict[str, Any]:
    """The fields of a fetched row, validated as a base snapshot; anything else breaks
    STAGE-9."""
    __tracebackhide__ = True
    blamed = "STAGE-9"
    fields: dict[str, Any]
    if hasattr(row, "model_dump"):
        fields = dict(row.model_dump())
    elif isinstance(row, Mapping):
        fields = dict(row)
    else:
        kit.fail(
            clause=blamed,
            expected=f"{where} to be a StagedCallBaseSnapshot",
            observed=f"it is {type(row).__name__}",
            hint="return tokcap_spec.staging.StagedCallBaseSnapshot rows (or Gym's own)",
        )
    if "extras" in fields:
        kit.fail(
            clause=blamed,
            expected=f"{where} to carry no extras: fetch answers metadata-only rows",
            observed="it has an extras field",
            hint="build the row as a StagedCallBaseSnapshot; extras are fetched apart",
        )
    try:
        StagedCallBaseSnapshot.model_validate(fields)
    except Exception as exc:
        kit.fail(
            clause=blamed,
            expected=f"{where} to validate as a StagedCallBaseSnapshot (its digest recomputing)",
            observed=kit.redact(f"{type(exc).__name__}: {_first_line(exc)}"),
            hint="store every digested field exactly as staged, floats to their float32 bits",
        )
    return fields


def expect_row(
    kit: Kit, row: Any, record: StagedCallRecord, where: str, *, clause: str | None = None
) -> None:
    """``row`` is ``record`` without its extras: every field as staged, floats to their float32
    bits.

    A row that is not a valid base snapshot, or that holds the staged call's ids and digest
    with a field changed, breaks STAGE-9. A row of another call (other ids, or the same ids
    with another digest) breaks ``clause``, by default the check's own.
    """
    __tracebackhide__ = True
    fields = read_row(kit, row, where)
    wanted = record.model_dump(exclude={"extras"})
    for name in ("rollout_id", "model_call_id", "digest"):
        if fields.get(name) != wanted[name]:
            _expect_keys_apart(
                kit,
                _pair(record),
                (str(fields.get("rollout_id")), str(fields.get("model_call_id"))),
            )
            kit.fail(
                clause=clause,
                expected=f"{where} to hold the call staged under it ({_ids(record)})",
                observed=f"it holds another call: {name} "
                f"{_difference(kit, name, wanted[name], fields.get(name))}",
                hint="a key fetches the one call staged under it, never another's",
            )
    for name, value in wanted.items():
        got = fields.get(name)
        if name in _FLOAT_COLUMNS:
            same = isinstance(got, list) and [float32_bits(v) for v in got] == [
                float32_bits(v) for v in value
            ]
        else:
            same = type(got) is type(value) and got == value
        if not same:
            kit.fail(
                clause="STAGE-9",
                expected=f"{where} to hold the call staged under it ({_ids(record)}), {name} "
                "as staged",
                observed=f"{name} differs: {_difference(kit, name, value, got)}",
                hint=_hint(name),
            )


def expect_rows(
    kit: Kit,
    rows: list[Any],
    staged: Sequence[tuple[str, StagedCallRecord]],
    where: str,
    *,
    clause: str | None = None,
) -> None:
    """Each of ``rows`` is the call staged under the key asked in its place (see
    :func:`expect_row`). Rows that are the asked calls in another order break STAGE-8."""
    __tracebackhide__ = True
    wanted = [_identity(record.model_dump()) for _, record in staged]
    got = [_identity(_fields_or_none(row)) for row in rows]
    if got != wanted and sorted(map(repr, got)) == sorted(map(repr, wanted)):
        first = next(i for i, (one, two) in enumerate(zip(wanted, got, strict=True)) if one != two)
        kit.fail(
            clause="STAGE-8",
            expected=f"the rows {where} in the order their keys were asked",
            observed=f"they are the asked calls in another order, from row {first} on",
            hint="answer rows in request order: never sort, group by node or de-duplicate",
        )
    for (key, record), row in zip(staged, rows, strict=True):
        expect_row(kit, row, record, f"the row {where} under {key!r}", clause=clause)


def _identity(fields: dict[str, Any] | None) -> tuple[Any, ...]:
    if fields is None:
        return ()
    return tuple(fields.get(name) for name in ("rollout_id", "model_call_id", "digest"))


def _fields_or_none(row: Any) -> dict[str, Any] | None:
    if hasattr(row, "model_dump"):
        return dict(row.model_dump())
    if isinstance(row, Mapping):
        return dict(row)
    return None


def expect_missing(kit: Kit, source: PlainEndpoint, keys: list[str], why: str) -> None:
    """``fetch(keys)`` raises: some key holds nothing (STAGE-8 unless the check says else)."""
    __tracebackhide__ = True
    try:
        rows = source.fetch(list(keys))
    except Exception:
        return
    kit.fail(
        expected=f"fetch({_keys(kit, keys)}) to raise: {why}",
        observed=f"it answered {_shown_rows(kit, rows)}",
        hint="raise (StagedCallMissingError) when any key holds nothing; never answer short",
    )


def _difference(kit: Kit, name: str, wanted: Any, got: Any) -> str:
    if isinstance(wanted, list) and isinstance(got, list) and len(wanted) == len(got):
        for index, (one, other) in enumerate(zip(wanted, got, strict=True)):
            if name in _FLOAT_COLUMNS:
                if float32_bits(one) != float32_bits(other):
                    return f"at index {index} staged {one!r}, fetched {other!r}"
            elif type(one) is not type(other) or one != other:
                return f"at index {index} staged {one!r}, fetched {other!r}"
    return kit.redact(f"staged {_short(wanted)}, fetched {_short(got)}")


def _hint(name: str) -> str:
    if name in _FLOAT_COLUMNS:
        return "keep float bits: -0.0 negative, subnormals nonzero; never round to fewer digits"
    if name == "token_ids_delta":
        return "token ids are u64: parse JSON integers as ints, never through a double"
    if name in ("rollout_id", "model_call_id", "parent_call_id"):
        return "store ids byte for byte: no normalization, case folding or re-encoding"
    return "store every field of the record as staged"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _ids(record: Any) -> str:
    rollout = getattr(record, "rollout_id", None)
    call = getattr(record, "model_call_id", None)
    if rollout is None or call is None:
        return type(record).__name__
    return f"{_short(rollout)}, {_short(call)}"


def _keys(kit: Kit, keys: Sequence[str]) -> str:
    if len(keys) <= 3:
        return kit.redact(repr(list(keys)))
    return f"{len(keys)} keys"


def _shown_rows(kit: Kit, rows: Any) -> str:
    if isinstance(rows, list):
        kinds = sorted({type(row).__name__ for row in rows})
        return f"a list of {len(rows)} ({', '.join(kinds) or 'empty'})"
    return kit.redact(_short(rows))


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return " ".join(lines[:3]) if lines else ""


def value_difference(wanted: Any, got: Any, where: str = "") -> str:
    """What tells ``got`` from ``wanted``, ``""`` when they are the same value: the same types
    all the way down (``True`` is not ``1``, ``b"x"`` not ``"x"``), floats to their bits
    (``-0.0`` is not ``0.0``), mappings by their keys, sequences element by element."""
    at = f" at {where}" if where else ""
    if type(got) is not type(wanted):
        return f"wanted {_short(wanted)}{at}, got {type(got).__name__} {_short(got)}"
    if isinstance(wanted, float):
        if struct.pack(">d", wanted) != struct.pack(">d", got):
            return f"wanted {wanted!r}{at}, got {got!r}"
        return ""
    if isinstance(wanted, Mapping):
        if set(wanted) != set(got):
            lost, extra = (
                sorted(map(repr, set(wanted) - set(got))),
                sorted(map(repr, set(got) - set(wanted))),
            )
            return f"keys differ{at}: missing {lost or 'none'}, unexpected {extra or 'none'}"
        for name in wanted:
            found = value_difference(wanted[name], got[name], f"{where}[{name!r}]")
            if found:
                return found
        return ""
    if isinstance(wanted, list | tuple):
        if len(wanted) != len(got):
            return f"wanted {len(wanted)} items{at}, got {len(got)}"
        for index, (one, other) in enumerate(zip(wanted, got, strict=True)):
            found = value_difference(one, other, f"{where}[{index}]")
            if found:
                return found
        return ""
    return "" if wanted == got else f"wanted {_short(wanted)}{at}, got {_short(got)}"


def shown_value(value: Any) -> str:
    """A short description of an answer: its type, and its length for a container."""
    if isinstance(value, list | tuple | dict):
        return f"a {type(value).__name__} of {len(value)}"
    return f"{type(value).__name__} {_short(value)}"
