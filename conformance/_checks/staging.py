"""STAGE: the staging contract (``--tokcap-contract=staging-v2``), clause by clause.

Each check builds the staging sink and source from the run's targets, stages calls made by
:class:`~conformance._staging.calls.CallFactory` and reads them back, in this process and in
spawned interpreters. Under the ``process-local`` capability the checks that need another
process are not claimed, and a fresh instance in this process stands in for one elsewhere.
"""

from __future__ import annotations

import inspect
import threading
import unicodedata
from typing import Any

from conformance._kit import Kit, PlainEndpoint
from conformance._registry import basic, check
from conformance._staging import steps
from conformance._staging.calls import FLOAT32_SUBNORMAL, CallFactory, next_float32
from conformance._staging.elsewhere import build_elsewhere, fetch_elsewhere, stage_elsewhere
from conformance._violation import NotClaimed
from tokcap_spec.staging import StagedCallRecord, distinct_staging_key

_PROCESS_LOCAL = "process-local"
_NOT_ELSEWHERE = "process-local: the store is not shared with other processes"


def _calls(kit: Kit) -> CallFactory:
    return CallFactory(kit.random, kit.rollout_id("staging"))


def _elsewhere(kit: Kit) -> None:
    if kit.claims(_PROCESS_LOCAL):
        raise NotClaimed(_NOT_ELSEWHERE)


def _expect_fetched(
    kit: Kit,
    source: PlainEndpoint,
    staged: list[tuple[str, StagedCallRecord]],
    where: str,
    *,
    clause: str | None = None,
) -> None:
    """Every ``(key, record)`` fetches its record, in one fetch."""
    __tracebackhide__ = True
    rows = steps.fetch(kit, source, [key for key, _ in staged], clause=clause)
    steps.expect_rows(kit, rows, staged, where, clause=clause)


# --- STAGE-1 ---------------------------------------------------------------------------------


def _expect_plain(kit: Kit, endpoint: PlainEndpoint, name: str) -> None:
    method = getattr(endpoint.raw, name, None)
    if not callable(method):
        kit.fail(
            expected=f"the {endpoint.role} to have a method {name}",
            observed=f"{type(endpoint.raw).__name__} has no callable {name}",
            hint=f"define {name} on the {endpoint.role} class",
        )
    if inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method):
        kit.fail(
            expected=f"{endpoint.role}.{name} to be a plain method",
            observed=f"{name} is a coroutine function",
            hint=f"define {name} with 'def': Gym calls it from plain threads and never awaits",
        )


@basic("STAGE-1", "staging-shapes")
@check("STAGE-1", "plain-methods")
def plain_methods(kit: Kit) -> None:
    """The sink has a plain stage and the source a plain fetch."""
    _expect_plain(kit, kit.staging_sink(), "stage")
    _expect_plain(kit, kit.staging_source(), "fetch")


@check("STAGE-1", "answers")
def answers(kit: Kit) -> None:
    """Stage answers a well-formed result for a valid call, a refused one and a re-stage, and
    fetch answers a list."""
    calls = _calls(kit)
    sink = kit.staging_sink()
    record = calls.root()
    steps.stage(kit, sink, record)
    steps.stage(kit, sink, record)
    steps.stage(kit, sink, record.model_copy(update={"digest": "0" * 64}))
    steps.stage(kit, sink, calls.root(), {"note": "text"})
    steps.fetch(kit, kit.staging_source(), [])


# --- STAGE-2 ---------------------------------------------------------------------------------


@basic("STAGE-2", "staging-builds")
def builds(kit: Kit) -> None:
    """The sink and the source build from their targets and kwargs."""
    kit.staging_sink()
    kit.staging_source()


@check("STAGE-2", "several-instances")
def several_instances(kit: Kit) -> None:
    """Several sinks and sources open on one store at once each work."""
    calls = _calls(kit)
    sinks = [kit.staging_sink() for _ in range(3)]
    sources = [kit.staging_source() for _ in range(2)]
    for sink in sinks:
        steps.stage_ok(kit, sink, calls.root(), why=" from one of several open instances")
    for source in sources:
        steps.fetch(kit, source, [])


@check("STAGE-2", "spawned-construction")
def spawned_construction(kit: Kit) -> None:
    """The sink and the source build in a spawned interpreter from the target and kwargs."""
    _elsewhere(kit)
    answer = build_elsewhere(kit)
    if answer.error:
        kit.fail(
            expected="the sink and the source to build in a spawned interpreter",
            observed=answer.error,
            hint="build from the target and JSON kwargs alone: no object passed in, no state "
            "made by the parent process",
        )


# --- STAGE-3 ---------------------------------------------------------------------------------


def _varied(calls: CallFactory) -> list[tuple[StagedCallRecord, dict[str, Any] | None]]:
    """Roots and children of three rollouts, long and short, with and without extras and
    attachments."""
    made: list[tuple[StagedCallRecord, dict[str, Any] | None]] = []
    for rollout in range(3):
        root = calls.root(length=1 if rollout == 0 else None)
        made.append((root, None))
        child = calls.child(root, length=2048 if rollout == 1 else None, extras={"turn": 1})
        made.append((child, {"image": b"\x89PNG\r\n", "caption": "one"} if rollout == 2 else None))
        made.append((calls.child(child), None))
    return made


@basic("STAGE-3", "staging-round-trip")
def round_trip(kit: Kit) -> None:
    """One call staged ok is fetched back by a fresh source."""
    key = steps.stage_ok(kit, kit.staging_sink(), _calls(kit).root())
    steps.fetch_one(kit, kit.staging_source(), key)


@check("STAGE-3", "fresh-source-here")
def fresh_source_here(kit: Kit) -> None:
    """A source built after the stages returned, in this process, fetches every row."""
    sink = kit.staging_sink()
    staged = [
        (steps.stage_ok_taking(kit, sink, record, extra)[0], record)
        for record, extra in _varied(_calls(kit))
    ]
    _expect_fetched(kit, kit.staging_source(), staged, "a source built afterwards fetched")


@check("STAGE-3", "fresh-source-elsewhere")
def fresh_source_elsewhere(kit: Kit) -> None:
    """A source built in a spawned interpreter after the stages returned fetches every row."""
    _elsewhere(kit)
    sink = kit.staging_sink()
    staged = [
        (steps.stage_ok_taking(kit, sink, record, extra)[0], record)
        for record, extra in _varied(_calls(kit))
    ]
    answer = fetch_elsewhere(kit, [key for key, _ in staged])
    if answer.error:
        kit.fail(
            expected="a source in another process to fetch every key stage answered ok",
            observed=answer.error,
            hint="answer ok only once the call is durable where every process reads",
        )
    if len(answer.value) != len(staged):
        kit.fail(
            clause="STAGE-8",
            expected=f"fetch of {len(staged)} keys in another process to answer {len(staged)} rows",
            observed=f"it answered {len(answer.value)}",
            hint="answer one row per key asked, or raise",
        )
    steps.expect_rows(kit, answer.value, staged, "another process fetched")


# --- STAGE-4 ---------------------------------------------------------------------------------


def _refusals(calls: CallFactory) -> list[tuple[str, Any, StagedCallRecord, bool]]:
    """``(what, handed over, the correct call with its ids, must be refused)``."""
    out: list[tuple[str, Any, StagedCallRecord, bool]] = []
    correct = calls.root()
    out.append(
        (
            "a record whose digest is not its fields'",
            correct.model_copy(update={"digest": "f" * 64}),
            correct,
            True,
        )
    )
    correct = calls.root(extras={"experts": [1, 2]})
    wrong = correct.model_copy(update={"extras": {"experts": [1, 3]}})
    out.append(("a record whose extras do not match their digest", wrong, correct, True))
    correct = calls.root()
    tokens = [*correct.token_ids_delta[:-1], correct.token_ids_delta[-1] + 1]
    out.append(
        (
            "a record whose tokens are not its digest's",
            correct.model_copy(update={"token_ids_delta": tokens}),
            correct,
            True,
        )
    )
    correct = calls.root()
    out.append(("None", None, correct, True))
    correct = calls.root()
    out.append(("a plain dict of a valid call's fields", correct.model_dump(), correct, False))
    return out


@check("STAGE-4", "refusals")
def refusals(kit: Kit) -> None:
    """Invalid records are refused without a raise, and leave the ids free for the correct
    call."""
    sink, source = kit.staging_sink(), kit.staging_source()
    for what, handed, correct, must_refuse in _refusals(_calls(kit)):
        staged = steps.stage(kit, sink, handed, doing=f"stage({what})")
        if staged.ok and must_refuse:
            kit.fail(
                expected=f"stage of {what} to be refused with ok=False",
                observed=f"it was answered ok under {staged.key!r}",
                hint="validate the record (StagedCallRecord.model_validate of its fields) "
                "before storing it",
            )
        if staged.ok:
            continue
        key = steps.stage_ok(kit, sink, correct, why=f", after {what} with its ids was refused")
        steps.expect_row(
            kit, steps.fetch_one(kit, source, key), correct, f"the row after {what} was refused"
        )
        _expect_extras_after_refusal(kit, source, key, correct, handed, what)


def _expect_extras_after_refusal(
    kit: Kit, source: PlainEndpoint, key: str, correct: StagedCallRecord, handed: Any, what: str
) -> None:
    """Where the store declares read-back, the extras under the correct call's key are not the
    refused call's (whether read-back keeps extras at all is STAGE-11's)."""
    if not kit.claims(_READ_BACK) or not source.has("fetch_extras"):
        return
    try:
        (extras,) = source.raw.fetch_extras([key])
    except Exception:
        return
    left = getattr(handed, "extras", None)
    difference = steps.value_difference(correct.extras, extras)
    if difference and left != correct.extras and not steps.value_difference(left, extras):
        kit.fail(
            expected=f"the extras under {key!r} to be the correct call's, after {what} with "
            "its ids was refused",
            observed=kit.redact(difference),
            hint="validate the whole record, extras against their digest included, before "
            "writing any of it: a refused call must leave nothing behind",
        )


@check("STAGE-4", "odd-attachments")
def odd_attachments(kit: Kit) -> None:
    """Attachments the sink may not take are answered, never raised on; a refusal leaves the
    ids free: another call with the same ids is then ok and is the call fetched."""
    calls = _calls(kit)
    sink, source = kit.staging_sink(), kit.staging_source()
    for what, attachments in (
        ("a list", ["not", "a", "mapping"]),
        ("a mapping keyed by ints", {1: b"x"}),
        ("a mapping to an object", {"handle": object()}),
        ("a mapping to a number", {"count": 3}),
    ):
        record = calls.root()
        staged = steps.stage(kit, sink, record, attachments, doing=f"stage with attachments {what}")
        if staged.ok:
            continue
        correct = calls.variant(record, weight_version=record.weight_version + 1)
        key = steps.stage_ok(
            kit, sink, correct, why=f", after the call with attachments {what} was refused"
        )
        steps.expect_row(
            kit,
            steps.fetch_one(kit, source, key),
            correct,
            f"the row after the call with attachments {what} was refused",
        )


# --- STAGE-5 ---------------------------------------------------------------------------------

_LONG = "r" * 300


def _id_pairs() -> list[tuple[str, str]]:
    """Pairs of ids that naive keys confuse, each pair distinct from every other."""
    composed, decomposed = "caf\u00e9", unicodedata.normalize("NFD", "caf\u00e9")
    return [
        ("a/b", "c"),
        ("a", "b/c"),
        ("a%2Fb", "c"),
        ("a", "b%2Fc"),
        ("a%252Fb", "c"),
        ("a%", "2Fb/c"),
        ("a:b", "c"),
        ("a", "b:c"),
        ("a|b", "c"),
        ("a", "b|c"),
        ("a-b", "c"),
        ("a", "b-c"),
        ("a_b", "c"),
        ("a", "b_c"),
        ("ab", "c"),
        ("A", "b/c"),
        (composed, "c"),
        (decomposed, "c"),
        ("\u00fcber/\u6f22\u5b57", "\U0001f600"),
        (_LONG + "x", "c"),
        (_LONG + "y", "c"),
        ("a", _LONG + "x"),
        ("a", _LONG + "y"),
        ("a b", "c"),
        ("a\tb", "c"),
        ("a\\b", "c"),
        ("a", "b\\c"),
    ]


@check("STAGE-5", "distinct-keys")
def distinct_keys(kit: Kit) -> None:
    """Pairs of ids naive keys confuse each stage ok under a key of their own."""
    calls = _calls(kit)
    sink = kit.staging_sink()
    prefix = calls.rollout_id("ids")
    keys: dict[str, tuple[str, str]] = {}
    staged = []
    for rollout, call in _id_pairs():
        record = calls.root(f"{prefix}{rollout}", call)
        key = steps.stage_ok(
            kit, sink, record, why=f" whatever its ids hold ({rollout!r}, {call!r})"
        )
        if key in keys:
            kit.fail(
                expected="distinct (rollout_id, model_call_id) pairs to get distinct keys",
                observed=f"{keys[key]!r} and {(rollout, call)!r} both got {key!r}",
                hint="encode the ids so that no two pairs make one key, e.g. "
                "tokcap_spec.staging.distinct_staging_key",
            )
        keys[key] = (rollout, call)
        staged.append((key, record))
    _expect_fetched(kit, kit.staging_source(), staged, "fetched")


@check("STAGE-5", "stable-keys")
def stable_keys(kit: Kit) -> None:
    """The same call staged again, by another instance, gets the same key."""
    calls = _calls(kit)
    first, second = kit.staging_sink(), kit.staging_sink()
    for record in [calls.root(), calls.root(calls.rollout_id("x/y"), "call/1")]:
        key = steps.stage_ok(kit, first, record)
        again = steps.stage_ok(kit, second, record, why=" when staged again identically")
        if again != key:
            kit.fail(
                expected="the same call staged again by another instance to get the same key",
                observed=f"{key!r} the first time, {again!r} the second",
                hint="derive the key from the ids alone, never from time, chance or the instance",
            )


# --- STAGE-6 ---------------------------------------------------------------------------------

_THREADS = 16


def _together(kit: Kit, work: list[Any]) -> list[Any]:
    """Run each callable of ``work`` on its own thread, all released at once; return their
    results (or the exceptions they raised)."""
    results: list[Any] = [None] * len(work)
    gate = threading.Barrier(len(work))

    def run(index: int) -> None:
        try:
            gate.wait()
            results[index] = work[index]()
        except BaseException as exc:
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(work))]
    with kit.watch.call(["stage"]):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(kit.settings.timeout)
    if any(thread.is_alive() for thread in threads):
        kit.fail(
            expected=f"{len(work)} stages from threads to return",
            observed=f"some did not return within {kit.settings.timeout:g} s",
            hint="a lock held across a blocking call, or a deadlock between threads",
        )
    return results


def _answered(kit: Kit, result: Any, doing: str) -> steps.Staged:
    __tracebackhide__ = True
    if isinstance(result, Exception):
        kit.fail(
            clause="STAGE-4",
            expected=f"{doing} to answer without raising",
            observed=kit.redact(f"it raised {type(result).__name__}: {result}"),
            hint="guard what stage calls share; report failures as ok=False",
        )
    return steps.read_result(kit, result, doing)


@check("STAGE-6", "threads")
def threads(kit: Kit) -> None:
    """Sixteen threads staging calls of shared rollouts at once keep every call whole."""
    calls = _calls(kit)
    sink = kit.staging_sink()
    rollouts = [calls.rollout_id() for _ in range(4)]
    records = [
        calls.root(rollouts[i % 4], f"call-{i}", length=1 + i * 7) for i in range(_THREADS * 3)
    ]
    batches = [records[i::_THREADS] for i in range(_THREADS)]

    def staged_batch(batch: list[StagedCallRecord]) -> Any:
        return [sink.raw.stage(steps.wired(kit, record)) for record in batch]

    results = _together(kit, [lambda b=batch: staged_batch(b) for batch in batches])
    staged = []
    for batch, result in zip(batches, results, strict=True):
        if isinstance(result, Exception):
            _answered(kit, result, "stage from a thread")
        for record, answer in zip(batch, result, strict=True):
            read = _answered(kit, answer, "stage from a thread")
            if not read.ok:
                kit.fail(
                    expected="every valid call staged from racing threads to be ok",
                    observed=f"one was refused: {read.error}",
                    hint="stages from many threads at once must each succeed",
                )
            staged.append((read.key, record))
    _expect_fetched(kit, kit.staging_source(), staged, "fetched after racing threads staged")


@check("STAGE-6", "processes")
def processes(kit: Kit) -> None:
    """Spawned processes staging calls of shared rollouts at once keep every call whole."""
    _elsewhere(kit)
    calls = _calls(kit)
    rollouts = [calls.rollout_id() for _ in range(3)]
    batches = [
        [calls.root(rollouts[i % 3], f"w{worker}-{i}") for i in range(12)] for worker in range(3)
    ]
    answers = stage_elsewhere(kit, batches)
    staged = []
    for batch, answer in zip(batches, answers, strict=True):
        for record, (ok, key, error, answered) in zip(batch, answer, strict=True):
            if answered:
                kit.fail(
                    clause="STAGE-1",
                    expected=f"stage in a spawned interpreter to answer a {answered[0]}",
                    observed=f"it answered {answered[1]}",
                    hint=f"return {answered[0]}: the caller refuses any other class",
                )
            if ok is not True or not isinstance(key, str) or not key:
                kit.fail(
                    expected="every valid call staged from racing processes to be ok",
                    observed=f"one answered ok={ok!r} key={key!r}: {kit.redact(error)}",
                    hint="stages from many processes at once must each succeed",
                )
            staged.append((key, record))
    _expect_fetched(kit, kit.staging_source(), staged, "fetched after racing processes staged")


# --- STAGE-7 ---------------------------------------------------------------------------------


@check("STAGE-7", "identical-restage")
def identical_restage(kit: Kit) -> None:
    """Staging the call a key holds again is ok with the same key, from any instance, also for
    log probs that differ only below float32 precision."""
    calls = _calls(kit)
    first, second, source = kit.staging_sink(), kit.staging_sink(), kit.staging_source()
    record = calls.root(extras={"n": 1})
    key, taken = steps.stage_ok_taking(kit, first, record, {"a": b"1"})
    finer = [value + value * 2**-40 for value in record.generation_log_probs_delta]
    same_digest = calls.variant(record, generation_log_probs_delta=finer)
    for sink, again, attachments, what in (
        (first, record, taken, "the same record"),
        (second, StagedCallRecord.model_validate(record.model_dump()), taken, "an equal copy"),
        (second, same_digest, taken, "log probs equal after float32 rounding"),
    ):
        answer = steps.stage(kit, sink, again, attachments)
        if not answer.ok or answer.key != key:
            kit.fail(
                expected=f"a re-stage of {what} (the same digest) to be ok under {key!r}",
                observed=f"ok={answer.ok}, key {answer.key!r} {answer.error}".rstrip(),
                hint="compare calls by digest: the digest commits to float32 bits",
            )
    steps.expect_row(kit, steps.fetch_one(kit, source, key), record, "the row after re-stages")


@check("STAGE-7", "racing-restages")
def racing_restages(kit: Kit) -> None:
    """Threads staging one call at once all answer ok with one key; different calls racing
    for the same ids each keep their own key's call."""
    calls = _calls(kit)
    sink, source = kit.staging_sink(), kit.staging_source()
    record = calls.root(length=64)
    handed = steps.wired(kit, record)
    results = _together(kit, [lambda: sink.raw.stage(handed) for _ in range(8)])
    read = [_answered(kit, result, "an identical stage from a thread") for result in results]
    keys = {answer.key for answer in read if answer.ok}
    if not all(answer.ok for answer in read) or len(keys) != 1:
        refused = [answer.error for answer in read if not answer.ok]
        kit.fail(
            expected="eight identical stages at once to be ok under one key",
            observed=f"keys {sorted(keys)!r}; refused: {refused[:2]!r}",
            hint="an identical re-stage is a no-op, also when it races the first stage",
        )
    _expect_fetched(kit, source, [(keys.pop(), record)], "fetched")
    base = calls.root(length=8)
    rivals = [calls.variant(base, weight_version=base.weight_version + 1 + i) for i in range(8)]
    handed_rivals = [steps.wired(kit, rival) for rival in rivals]
    results = _together(kit, [lambda r=rival: sink.raw.stage(r) for rival in handed_rivals])
    for rival, result in zip(rivals, results, strict=True):
        answer = _answered(kit, result, "a racing stage of a rival call")
        if answer.ok:
            steps.expect_row(
                kit,
                steps.fetch_one(kit, source, answer.key),
                rival,
                f"the row under the key {answer.key!r} a racing stage was answered",
            )


def _rivals(calls: CallFactory) -> list[tuple[str, StagedCallRecord, StagedCallRecord]]:
    """``(what differs, the stored call, a different call with its ids)``."""
    out = []
    base = calls.root(length=6, generation_log_probs_delta=[0.0, -0.5, -1.0, -2.0, -3.0, -4.0])
    out.append(
        (
            "one token id",
            base,
            calls.variant(
                base,
                token_ids_delta=[*base.token_ids_delta[:-1], base.token_ids_delta[-1] + 1],
                cumulative_hash=base.cumulative_hash,
            ),
        )
    )
    base = calls.root(
        length=4,
        token_mask_delta=[1.0, 1.0, 1.0, 1.0],
        generation_log_probs_delta=[-0.25, -0.5, -1.0, -2.0],
    )
    out.append(
        (
            "one mask",
            base,
            calls.variant(
                base,
                token_mask_delta=[1.0, 1.0, 1.0, 0.0],
                generation_log_probs_delta=[-0.25, -0.5, -1.0, 0.0],
            ),
        )
    )
    base = calls.root(
        length=3, token_mask_delta=[0.0, 1.0, 1.0], generation_log_probs_delta=[0.0, -1.0, 0.0]
    )
    out.append(
        (
            "0.0 staged as -0.0",
            base,
            calls.variant(base, generation_log_probs_delta=[0.0, -1.0, -0.0]),
        )
    )
    base = calls.root(
        length=3, token_mask_delta=[1.0, 1.0, 1.0], generation_log_probs_delta=[-1.0, -1.5, -2.0]
    )
    out.append(
        (
            "a log prob one float32 step away",
            base,
            calls.variant(base, generation_log_probs_delta=[-1.0, next_float32(-1.5), -2.0]),
        )
    )
    base = calls.root()
    out.append(
        ("the weight version", base, calls.variant(base, weight_version=base.weight_version + 1))
    )
    base = calls.root(extras={"k": 1})
    out.append(("the extras", base, calls.variant(base, extras={"k": 2})))
    base = calls.root()
    out.append(("the chain hash", base, calls.variant(base, chain_hash="0" * 64)))
    return out


@check("STAGE-7", "different-restage")
def different_restage(kit: Kit) -> None:
    """A different call with the ids of a stored one is refused, or keyed apart; never swapped
    in or answered ok under the stored call's key."""
    sink, source = kit.staging_sink(), kit.staging_source()
    for what, stored, rival in _rivals(_calls(kit)):
        key = steps.stage_ok(kit, sink, stored)
        answer = steps.stage(kit, sink, rival, doing=f"a re-stage differing in {what}")
        if answer.ok and answer.key == key:
            kit.fail(
                expected=f"a re-stage differing in {what} to be refused, or keyed apart",
                observed=f"it was answered ok under the stored call's key {key!r}",
                hint="compare the digests of the stored and the new call, and refuse a "
                "different one (ok=False) without touching the stored call",
            )
        steps.expect_row(
            kit,
            steps.fetch_one(kit, source, key),
            stored,
            f"the stored row after a re-stage differing in {what}",
        )
        if answer.ok:
            steps.expect_row(
                kit,
                steps.fetch_one(kit, source, answer.key),
                rival,
                f"the row under the rival's own key {answer.key!r}",
            )


# --- STAGE-8 ---------------------------------------------------------------------------------


@check("STAGE-8", "order")
def order(kit: Kit) -> None:
    """Fetch answers rows in the order asked, repeats included, in batches of any size."""
    calls = _calls(kit)
    sink, source = kit.staging_sink(), kit.staging_source()
    staged = [
        (steps.stage_ok(kit, sink, record), record)
        for record in calls.chain(6) + calls.chain(6) + [calls.root() for _ in range(20)]
    ]
    shuffled = list(staged)
    kit.random.shuffle(shuffled)
    repeated = [staged[0], staged[5], staged[0], staged[-1], staged[5], staged[0]]
    big = [kit.random.choice(staged) for _ in range(300)]
    for picked, what in (
        (list(reversed(staged)), "reversed"),
        (shuffled, "shuffled"),
        (repeated, "with repeats"),
        (staged[3:4], "alone"),
        (big, "a batch of 300"),
    ):
        rows = steps.fetch(kit, source, [key for key, _ in picked])
        steps.expect_rows(kit, rows, picked, f"asked for {what}")
    if steps.fetch(kit, source, []) != []:
        kit.fail(
            expected="fetch([]) to answer []",
            observed="it answered rows",
            hint="answer an empty list for an empty list",
        )


@check("STAGE-8", "missing-keys")
def missing_keys(kit: Kit) -> None:
    """A fetch with a key that holds nothing raises, wherever the key stands."""
    calls = _calls(kit)
    sink, source = kit.staging_sink(), kit.staging_source()
    keys = [steps.stage_ok(kit, sink, calls.root()) for _ in range(3)]
    absent = distinct_staging_key(calls.rollout_id("never-staged"), "call-0")
    for asked, where in (
        ([absent], "alone"),
        ([absent, *keys], "first"),
        ([keys[0], absent, keys[1]], "in the middle"),
        ([*keys, absent], "last"),
        ([keys[0], keys[0] + "x", keys[1]], "a staged key with a character more"),
    ):
        steps.expect_missing(kit, source, asked, f"a key that holds nothing stands {where}")


# --- STAGE-9 ---------------------------------------------------------------------------------


def _hard_values(calls: CallFactory) -> list[tuple[str, StagedCallRecord]]:
    out = []
    ids = [0, 1, 2**31, 2**32 + 1, 2**53 + 1, 2**63, 2**64 - 1]
    out.append(("token ids up to 2**64 - 1", calls.root(token_ids_delta=ids)))
    masks = [1.0, -0.0, 0.0, 1.0, -0.0]
    out.append(
        (
            "a mask holding -0.0",
            calls.root(
                token_ids_delta=[9] * len(masks),
                token_mask_delta=masks,
                generation_log_probs_delta=[-0.5, 0.0, -0.0, -1.0, -0.0],
            ),
        )
    )
    probs = [-0.0, -FLOAT32_SUBNORMAL, -1e-42, -3.4e38, -1.0000001, -2.5e-8, -0.1]
    out.append(
        (
            "log probs -0.0, subnormals and extremes",
            calls.root(
                token_ids_delta=[5] * len(probs),
                token_mask_delta=[1.0] * len(probs),
                generation_log_probs_delta=probs,
            ),
        )
    )
    out.append(("a delta of 8192 tokens", calls.root(length=8192)))
    out.append(
        (
            "non-ASCII ids",
            calls.root(calls.rollout_id("\u00e9t\u00e9-\u6f22"), "\u0430\u0431\u0432/\U0001f600"),
        )
    )
    root = calls.root(extras={"nested": {"a": [1, 2.5, None, "x"], "b": True}})
    out.append(("nested extras", root))
    out.append(("a child with extras", calls.child(root, extras={"z": [[]]})))
    return out


@check("STAGE-9", "round-trip")
def round_trip_values(kit: Kit) -> None:
    """Rows carry every field as staged: u64 ids, float32 bits, non-ASCII ids, hashes."""
    sink = kit.staging_sink()
    staged = []
    for what, record in _hard_values(_calls(kit)):
        staged.append((steps.stage_ok(kit, sink, record, why=f" ({what})"), record))
    _expect_fetched(kit, kit.staging_source(), staged, "fetched")


# --- STAGE-10 --------------------------------------------------------------------------------


@check("STAGE-10", "other-versions")
def other_versions(kit: Kit) -> None:
    """Records of another schema, digest or extras digest version are refused and stored not."""
    calls = _calls(kit)
    sink, source = kit.staging_sink(), kit.staging_source()
    for field, value in (
        ("schema_version", 1),
        ("schema_version", 3),
        ("digest_version", 1),
        ("digest_version", 3),
        ("extras_digest_version", 2),
    ):
        record = calls.root()
        answer = steps.stage(
            kit,
            sink,
            record.model_copy(update={field: value}),
            doing=f"stage of a record of {field} {value}",
        )
        if answer.ok:
            kit.fail(
                expected=f"a record of {field} {value} to be refused with ok=False",
                observed=f"it was answered ok under {answer.key!r}",
                hint="refuse every version but schema 2, digest 2 and extras digest 1",
            )
        key = steps.stage_ok(
            kit, sink, record, why=f", after a record of {field} {value} with its ids was refused"
        )
        steps.expect_row(kit, steps.fetch_one(kit, source, key), record, "the row")


# --- STAGE-11 --------------------------------------------------------------------------------

_READ_BACK = "read-back"
_READ_BACK_METHODS = ("fetch_extras", "fetch_attachments")


def _claim_read_back(kit: Kit) -> None:
    if not kit.claims(_READ_BACK):
        raise NotClaimed(
            "the store does not declare read-back (--tokcap-capability=read-back): "
            "fetch_extras and fetch_attachments are not judged"
        )


def _read_back_source(kit: Kit) -> PlainEndpoint:
    """A fresh source with plain read-back methods; one without breaks STAGE-11."""
    __tracebackhide__ = True
    source = kit.staging_source()
    for name in _READ_BACK_METHODS:
        method = getattr(source.raw, name, None)
        if not callable(method):
            kit.fail(
                expected=f"a source declaring read-back to have a plain method {name}",
                observed=f"{type(source.raw).__name__} has no callable {name}",
                hint="define fetch_extras(staging_keys) and fetch_attachments(staging_key), or "
                "do not declare read-back",
            )
        if inspect.iscoroutinefunction(method):
            kit.fail(
                expected=f"{name} to be a plain method, as fetch is",
                observed=f"{name} is a coroutine function",
                hint=f"define {name} with 'def'",
            )
    return source


def _read(kit: Kit, call: Any, shown: str) -> Any:
    """Call a read-back method; a raise breaks STAGE-11."""
    __tracebackhide__ = True
    try:
        return call()
    except Exception as exc:
        kit.fail(
            expected=f"{shown} of keys stage answered ok to answer",
            observed=kit.redact(f"it raised {type(exc).__name__}: {exc}"),
            hint="every key an ok stage returned keeps its extras and attachments",
        )


def _expect_key_error(kit: Kit, call: Any, shown: str) -> None:
    __tracebackhide__ = True
    try:
        answered = call()
    except KeyError:
        return
    except Exception as exc:
        kit.fail(
            expected=f"{shown} to raise KeyError: a key holds no call",
            observed=kit.redact(f"it raised {type(exc).__name__}: {exc}"),
            hint="raise KeyError (StagedCallMissingError is one) for a key that holds nothing",
        )
    kit.fail(
        expected=f"{shown} to raise KeyError: a key holds no call",
        observed=kit.redact(f"it answered {steps.shown_value(answered)}"),
        hint="raise KeyError (StagedCallMissingError is one); never answer None or {} for a "
        "key that holds nothing",
    )


def _extras_calls(calls: CallFactory) -> list[StagedCallRecord]:
    root = calls.root(
        extras={
            "experts": [[1, 2], [3, 4]],
            "z": -0.0,
            "nested": {"a": [1, 2.5, None, "x"], "b": True, "c": 0},
            "text": "caf\u00e9/\U0001f600\u2028",
        }
    )
    return [root, calls.child(root, extras={"turn": 1, "flag": False}), calls.root()]


@check("STAGE-11", "extras")
def extras_read_back(kit: Kit) -> None:
    """Every staged call's extras come back exact, in the order asked.

    Read by a fresh source, shuffled with repeats; a key that holds nothing raises KeyError,
    alone and after a staged key.
    """
    _claim_read_back(kit)
    calls = _calls(kit)
    sink = kit.staging_sink()
    records = _extras_calls(calls)
    staged = [(steps.stage_ok(kit, sink, record), record) for record in records]
    source = _read_back_source(kit)
    picked = [staged[1], staged[0], staged[2], staged[0], staged[1]]
    kit.random.shuffle(picked)
    keys = [key for key, _ in picked]
    shown = f"fetch_extras of {len(keys)} keys"
    answered = _read(kit, lambda: source.raw.fetch_extras(list(keys)), shown)
    if not isinstance(answered, list) or len(answered) != len(keys):
        kit.fail(
            expected=f"{shown} to answer a list of {len(keys)}, one per key asked",
            observed=kit.redact(f"it answered {steps.shown_value(answered)}"),
            hint="answer one entry per key asked, repeats included, in request order",
        )
    for (key, record), got in zip(picked, answered, strict=True):
        difference = steps.value_difference(record.extras, got)
        if difference:
            kit.fail(
                expected=f"the extras under {key!r} to be the ones staged with the call",
                observed=kit.redact(difference),
                hint="store the extras with the record and read them back as staged: types, "
                "-0.0 and nesting kept",
            )
    absent = distinct_staging_key(calls.rollout_id("never-staged"), "call-0")
    for asked, where in (([absent], "alone"), ([staged[0][0], absent], "after a staged key")):
        _expect_key_error(
            kit,
            lambda asked=asked: source.raw.fetch_extras(list(asked)),
            f"fetch_extras with a key that holds nothing {where}",
        )


def _attachment_sets() -> list[dict[str, Any] | None]:
    return [
        {"image": bytes(range(256)), "caption": "a cat/\U0001f600", "empty": b"", "blank": ""},
        {"frames/0": b"\x00" * 200_000, "\u00fcber": "bytes? no, text"},
        None,
        {"one": b"1"},
    ]


@check("STAGE-11", "attachments")
def attachments_read_back(kit: Kit) -> None:
    """Every attachment staged with a call comes back exact, bytes and text told apart.

    Read by a fresh source in shuffled order; a key that holds nothing raises KeyError.
    """
    _claim_read_back(kit)
    calls = _calls(kit)
    sink = kit.staging_sink()
    staged = []
    for attachments in _attachment_sets():
        record = calls.root()
        staged.append((steps.stage_ok(kit, sink, record, attachments), attachments or {}))
    source = _read_back_source(kit)
    order = list(staged)
    kit.random.shuffle(order)
    for key, attachments in order:
        shown = f"fetch_attachments({key!r})"
        got = _read(kit, lambda key=key: source.raw.fetch_attachments(key), shown)
        difference = steps.value_difference(attachments, got)
        if difference:
            kit.fail(
                expected=f"{shown} to answer every attachment staged with the call, as staged",
                observed=kit.redact(difference),
                hint="store the attachments in the same durable write as the record, or refuse "
                "the call; never ack attachments that were not stored",
            )
    absent = distinct_staging_key(calls.rollout_id("never-staged"), "call-0")
    _expect_key_error(
        kit,
        lambda: source.raw.fetch_attachments(absent),
        "fetch_attachments of a key that holds nothing",
    )
