"""Every clause of the token-capture contract, with why it matters and how it is usually broken.

This is the one source of the clause texts. ``docs/clauses.md`` is rendered from it (see
:mod:`conformance.clauses_doc`), and the clause ids here are the ones check ids, node ids and
failure messages carry. The catalog lists clauses in contract order, family by family.

A clause is proven either by the kit, against any implementation (``checked_by == "kit"``), or
by the project's own test module named in ``checked_by``, when the clause is about
``tokcap_spec`` or the reference consumer rather than about a sink or source.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

__all__ = [
    "CAPTURE",
    "CLAUSES_DOC",
    "CLAUSES",
    "CONTRACTS",
    "CONTRACT_DIFFERENCES",
    "STAGING",
    "FAMILY_TITLES",
    "KIT",
    "KIT_FAMILIES",
    "Clause",
    "clause",
    "contract_of",
    "families_of",
    "family_of",
    "position",
]

CLAUSES_DOC = "docs/clauses.md"
"""Where a source checkout explains every clause; the installed kit prints the same text with
``python -m conformance.clauses <ID>``."""

KIT = "kit"
"""The ``checked_by`` value of clauses the kit checks against the implementation under test."""

FAMILY_TITLES = {
    "REC": "Records",
    "SHAPE": "Shape",
    "BUILD": "Construction",
    "SPAWN": "Spawned workers",
    "PUT": "Put",
    "FREEZE": "Freeze",
    "FENCE": "Fences",
    "DROP": "Exact-snapshot retire",
    "MASK": "Masking",
    "CLOSE": "Close",
    "EXT": "Extensions",
    "LINEAGE": "Lineage",
    "COST": "Cost to the serving loop",
    "CFG": "Config",
    "CONS": "Consumer",
    "STAGE": "Staging",
}
"""Every clause family in catalog order, with the title the docs give it."""


CONTRACTS = ("capture", "staging-v2")
"""The contracts the kit judges, the default first: ``--tokcap-contract`` takes one of these."""
CAPTURE, STAGING = CONTRACTS

_STAGING_FAMILIES = ("STAGE",)

CONTRACT_DIFFERENCES: tuple[tuple[str, str, str], ...] = (
    ("methods", "coroutines (`async def`)", "plain methods, called from worker threads"),
    (
        "unknown record fields",
        "kept and carried along (REC-1)",
        "refused when a staged record is validated: it forbids them",
    ),
    (
        "floats",
        "float64, `-inf` log probs allowed; identity is every float64 bit",
        "finite only; committed to as float32 bits, so values equal after float32 rounding "
        "are one call (STAGE-7, STAGE-9)",
    ),
    ("token ids", "int32", "u64, 0 to 2**64 - 1 (STAGE-9)"),
    (
        "what a write holds",
        "one whole call (`TokenEntry`)",
        "one call's token delta on its parent's, tied by chain and cumulative hashes",
    ),
    (
        "identity of a write",
        "`(rollout_id, model_call_id)`; a different re-put marks the rollout incomplete",
        "the returned staging key; a different re-stage is refused or keyed apart (STAGE-7)",
    ),
    (
        "errors",
        "raised",
        "`stage` reports them in its result and never raises; `fetch` raises (STAGE-4, STAGE-8)",
    ),
    (
        "retire",
        "freeze, then drop the exact snapshot",
        "none: the framework owns the rows' lifetime",
    ),
)
"""Where the two contracts differ: ``(aspect, capture, staging-v2)``, rendered in the docs."""


def contract_of(family: str) -> str:
    """Return the contract a clause family belongs to: :data:`STAGING` for ``STAGE``, else
    :data:`CAPTURE`."""
    return STAGING if family in _STAGING_FAMILIES else CAPTURE


def family_of(clause_id: str) -> str:
    """Return the family of a clause id: the part before the first ``-`` (``EXT`` for
    ``EXT-BEGIN-1``)."""
    return clause_id.split("-", 1)[0]


@dataclass(frozen=True)
class Clause:
    """One contract clause.

    ``promise`` states what a conforming implementation guarantees; ``why`` says what goes wrong
    in training when the promise is broken; ``how_broken`` lists the usual ways real transports
    break it; ``checked_by`` is :data:`KIT` or the path of the project test module proving it.
    """

    id: str
    family: str
    title: str
    promise: str
    why: str
    how_broken: str
    checked_by: str
    hazards: str = ""
    """What the kit varies when it judges the clause: its hazard space (kit clauses only)."""

    def __post_init__(self) -> None:
        if family_of(self.id) != self.family or self.family not in FAMILY_TITLES:
            raise ValueError(f"clause {self.id} is filed under family {self.family!r}")
        if self.checked_by != KIT and not (
            self.checked_by.startswith("tests/") and self.checked_by.endswith(".py")
        ):
            raise ValueError(
                f"clause {self.id}: checked_by must be {KIT!r} or a tests/ module path, "
                f"got {self.checked_by!r}"
            )

    @property
    def anchor(self) -> str:
        """The fragment ``docs/clauses.md`` gives this clause: the id in lower case."""
        return self.id.lower()


_RECORD_TESTS = "tests/spec/test_records.py"
_CONFIG_TESTS = "tests/spec/test_config.py"
_CONSUMER_TESTS = "tests/reference/test_consumer.py"

CLAUSES: tuple[Clause, ...] = (
    Clause(
        id="REC-1",
        family="REC",
        title="Record fields",
        promise=(
            "A `TokenEntry` has `schema_version` (1 today), `rollout_id`, `model_call_id`, "
            "`model`, `prompt_token_ids`, `generation_token_ids`, `generation_log_probs`, "
            "`routed_experts`, `output_items`, `token_item_index` and `created_at`. Fields the "
            "reader does not know are carried along, never discarded."
        ),
        why=(
            "The trainer rebuilds every turn from these fields. A field lost on the way, such as "
            "the routed experts of a mixture-of-experts model or metadata a newer producer "
            "added, silently changes what the policy is trained on."
        ),
        how_broken=(
            "Fixed-column stores that drop unknown fields; reader models that ignore extras; "
            "`routed_experts` left out because the first model tried was dense."
        ),
        checked_by=_RECORD_TESTS,
    ),
    Clause(
        id="REC-2",
        family="REC",
        title="Newer record schemas are refused",
        promise=(
            "Reading a record whose `schema_version` is above the reader's own fails with an "
            "error that states both numbers. A record of an older version reads, and the "
            "fields it lacks take their defaults."
        ),
        why=(
            "A reader that guesses at a newer layout can misalign tokens and log probs without "
            "any error, and the trainer learns from the result. Refusing turns a silent "
            "corruption into a plain request to upgrade."
        ),
        how_broken=(
            "Ignoring `schema_version`; comparing versions as strings; refusing older records "
            "as well, which strands data already captured."
        ),
        checked_by=_RECORD_TESTS,
    ),
    Clause(
        id="REC-3",
        family="REC",
        title="Token and log-prob lengths agree",
        promise=(
            "`generation_token_ids` and `generation_log_probs` always have the same length, and "
            "`token_item_index` is either None or a valid position in `output_items`."
        ),
        why=(
            "Policy-gradient losses pair each generated token with its log prob. A length "
            "mismatch crashes the trainer mid-run or, worse, shifts the pairing so that every "
            "token is weighted by its neighbour's probability."
        ),
        how_broken=(
            "Cutting one list at a stop token and not the other; appending a final token after "
            "the log probs were collected; counting `token_item_index` from 1."
        ),
        checked_by=_RECORD_TESTS,
    ),
    Clause(
        id="REC-4",
        family="REC",
        title="Log probs and token ids are in range",
        promise=(
            "Log probs are floats. NaN is refused when a record is built, while `-inf` is a "
            "valid log prob that every store must hand back unchanged. Token ids are integers "
            "from 0 up to, not including, 2**31."
        ),
        why=(
            "`-inf` marks a token the sampler could not have picked; replacing it with a finite "
            "number or null changes importance ratios, and a NaN poisons every gradient it "
            "reaches. Ids of 31 bits or more do not fit the int32 tensors trainers use."
        ),
        how_broken=(
            "Accepting NaN from a numerically unstable sampler; accepting booleans, floats or "
            "negative numbers as token ids; treating `-inf` as an error."
        ),
        checked_by=_RECORD_TESTS,
    ),
    Clause(
        id="SHAPE-1",
        family="SHAPE",
        title="The protocol shape",
        promise=(
            "The sink has `put`, `mark_incomplete` and `close`; the source has `freeze`, `drop` "
            "and `close`. All six are `async def` methods, so the object satisfies `TokenSink` "
            "or `TokenSource` structurally, without subclassing. One object may be both."
        ),
        why=(
            "The serving path awaits every call. A plain method hands back a value where a "
            "coroutine is expected and capture fails on the first rollout, or it blocks the "
            "event loop that serves every other rollout in the worker."
        ),
        how_broken=(
            "Synchronous methods; differently named methods (`flush`, `commit`); a plain `def` "
            "that returns a coroutine, which the structural check cannot tell apart from a "
            "synchronous method."
        ),
        hazards=(
            "Each protocol method of the sink and the source built from the target: missing, a "
            "plain function, one returning something not awaitable; snapshots read through the "
            "five attributes, with entries as pydantic models, dataclasses, mappings or plain "
            "objects."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="SHAPE-2",
        family="SHAPE",
        title="Drop takes keyword arguments",
        promise=(
            "`drop(rollout_id, *, snapshot_id, version)`: the snapshot id and the version can "
            "be passed by name."
        ),
        why=(
            "Consumers pass both by keyword so the two can never be swapped. A signature that "
            "refuses them breaks every consumer at the moment it retires a rollout, and the "
            "records pile up."
        ),
        how_broken=(
            "Positional-only parameters; other names (`sid`, `ver`); one parameter taking the "
            "whole snapshot object."
        ),
        hazards=(
            "`drop` called with keywords only, on an unknown rollout and on real snapshots; "
            "answers that are not bools."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="SHAPE-3",
        family="SHAPE",
        title="Snapshots are immutable",
        promise=(
            "A snapshot never changes once `freeze` has returned it: not when the caller edits "
            "its lists, and not when the rollout is written afterwards. What a caller does to "
            "one result has no effect on any later freeze."
        ),
        why=(
            "The consumer builds a training sample from the snapshot and later drops it by id "
            "and version. If the snapshot moves underneath, the sample and the evidence it "
            "retires no longer match, and a later freeze can return the caller's edits as data."
        ),
        how_broken=(
            "Handing out the store's own lists instead of copies; an in-memory store that keeps "
            "appending to the snapshot object it returned; entries loaded lazily when iterated; "
            "copies of the record's own fields that share an extra field's values."
        ),
        hazards=(
            "The caller editing a returned snapshot's entry list and every list and mapping "
            "inside its entries, an extra field's included (entries as objects or as any "
            "mapping, read-only views included), then freezing from the same and a fresh "
            "source; later marks and puts, then the earlier snapshot reread as it is, after "
            "the same source froze again and after a fresh one did."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="BUILD-1",
        family="BUILD",
        title="Built from a target string and plain kwargs",
        promise=(
            "A sink is built from a `module.path:ClassName` target and keyword arguments, the "
            "way `TokenIdCaptureConfig.build_sink` builds it. The kwargs are plain data that "
            "survive a trip through JSON or YAML, and every build returns a new instance."
        ),
        why=(
            "The config file is all that serving processes share. A sink that needs a live "
            "object handed in cannot be described there, so it cannot run in a real deployment "
            "and the run captures nothing."
        ),
        how_broken=(
            "Constructors that take a client or a callable; factories that return one shared "
            "singleton; kwargs holding paths or datetimes no config file can express."
        ),
        hazards=(
            "The target built through `TokenIdCaptureConfig.build_sink` and directly, more than "
            "once, with the run's kwargs: each build a new, working object."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="BUILD-2",
        family="BUILD",
        title="Bad targets fail at startup, without secrets",
        promise=(
            "A target that cannot be built is refused when the service starts: a target with "
            "no `:`, a module that does not import, a missing name, kwargs the constructor "
            "rejects, a protocol method missing or not callable. The error names the target "
            "and the kwarg names; kwarg values never appear in it."
        ),
        why=(
            "A broken sink found at the first rollout wastes every rollout in flight, and one "
            "that is silently absent lets a run train with no captured tokens at all. Kwarg "
            "values often hold passwords, and error text ends up in widely shared logs."
        ),
        how_broken=(
            "Building lazily on the first put; `TypeError` text that prints the whole kwargs "
            "dict; a connection URL with its password formatted into an exception."
        ),
        hazards=(
            "An unknown kwarg whose value is a secret: the error's text, arguments and "
            "traceback searched for it; a sink that accepted it is put into and frozen, and must "
            "not refuse it then."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="SPAWN-1",
        family="SPAWN",
        title="Works in a freshly spawned worker",
        promise=(
            "A sink built inside a brand-new interpreter started with multiprocessing `spawn`, "
            "the way uvicorn starts its workers, from nothing but the target string and kwargs, "
            "works. Nothing the launching process set up is carried over."
        ),
        why=(
            "Model calls are served from worker processes. A sink that only works where it was "
            "installed captures nothing in production, and every rollout then trains without "
            "its token evidence or from re-tokenized text."
        ),
        how_broken=(
            "Launcher-installed sinks (`install_token_sink`) that workers never see; module "
            "globals the launcher set; relying on `fork` to copy an open client."
        ),
        hazards=(
            "A sink built inside a spawned interpreter from the target string and kwargs alone, "
            "putting and marking there; one worker alone building the first instance of a store "
            "nothing was ever built on."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="SPAWN-2",
        family="SPAWN",
        title="Workers may construct at the same moment",
        promise=(
            "Several workers building their sinks at once all succeed: there is no one-time "
            "setup that only the first of them may run."
        ),
        why=(
            "Workers start together. A start-up race that fails one of them takes a serving "
            "process down or leaves it capturing nothing, so part of every batch goes missing."
        ),
        how_broken=(
            "Creating a table or directory without tolerating that it exists; migrations run by "
            "every constructor; a setup that looks for a marker it writes last; lock files held "
            "while constructing."
        ),
        hazards=(
            "Three spawned workers released together to construct their sinks, on the run's "
            "store and (when the kwargs use `{tmp_path}`) on new empty folders nothing was "
            "ever built on, three of them under ci. Each worker imports the target before the "
            "workers meet, so that their constructions start at one moment."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="SPAWN-3",
        family="SPAWN",
        title="Other processes' acks are visible here",
        promise=(
            "Entries acked by sinks in other processes can be frozen, byte for byte, by a "
            "source in this process."
        ),
        why=(
            "Generation happens in workers and consumption in the trainer's process. Evidence "
            "that stays with its writer is invisible to the consumer, which then trains on a "
            "rebuilt or empty trajectory."
        ),
        how_broken=(
            "Records kept in a module dict; per-process temporary directories; write caches no "
            "other process reads."
        ),
        hazards=(
            "Entries put by sinks in two spawned workers, frozen and compared exactly from a "
            "source here: plain ones and ones holding 64-bit floats, `-0.0` and extra fields (a "
            "change the same entry also meets when put and frozen here is PUT-2's)."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="SPAWN-4",
        family="SPAWN",
        title="Concurrent workers lose nothing and mix nothing",
        promise=(
            "Workers writing at the same time, to one rollout and to different rollouts, keep "
            "every acked entry, never file an entry under the wrong rollout, and never blend "
            "two entries into one."
        ),
        why=(
            "Parallel tool calls and batched generation write concurrently. A lost entry leaves "
            "a hole in the trajectory; a misfiled or blended one trains a sample on tokens from "
            "another episode."
        ),
        how_broken=(
            "Read-modify-write of one blob per rollout without a lock, so the last writer wins; "
            "appends to a shared file that interleave; sequence numbers handed out twice."
        ),
        hazards=(
            "Spawned workers writing one shared rollout and one rollout each, with the same "
            "call ids in every rollout and re-puts among them, then freezers in other "
            "processes; the whole history judged against the sequential model."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="PUT-1",
        family="PUT",
        title="Durable and visible on return",
        promise=(
            "When `put` returns without raising, the entry is stored: a newly built source, in "
            "any process, finds it at its next freeze."
        ),
        why=(
            "The ack is what lets the producer move on. An acked record that is lost means the "
            "consumer freezes a trajectory with a turn missing and trains on it as if it were "
            "whole."
        ),
        how_broken=(
            "Buffering writes until `close` or a timer flushes them; fire-and-forget background "
            "tasks; write-behind caches; returning before the remote store confirmed the write."
        ),
        hazards=(
            "A freeze the moment a put returns, on another thread's event loop while the sink's "
            "loop stands still, by a source built after the put and by one built before it (a "
            "consumer's long-lived source); plain and 4,096-token entries, and long-context "
            "ones (65,536 prompt and 16,384 generated tokens) whose write outlasts a small one; "
            "many attempts, in the check and in the basic every failing check consults; and a "
            "freeze by a source a spawned worker builds while the sink here stays open, and "
            "one here while a spawned writer still runs (records that reach other processes "
            "only once their writer flushes or closes)."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="PUT-2",
        family="PUT",
        title="Exact round trip",
        promise=(
            "The entry frozen back equals the entry put in every field. Floats are compared by "
            "their bits, so `-inf` and `-0.0` must survive, and so must extra fields and any "
            "unicode text."
        ),
        why=(
            "Log probs feed importance ratios and KL terms directly: a rounded or nulled value "
            "shifts the gradient of its token, and a changed token id trains the model on text "
            "it never produced."
        ),
        how_broken=(
            "float32 columns; `-inf` turned into null by a strict JSON encoder; stores that "
            "normalize `-0.0`; fixed schemas that drop extra fields; text re-encoded through a "
            "legacy charset."
        ),
        hazards=(
            "An 8,192/2,048-token entry with `-inf` and `-0.0` log probs, full 64-bit floats, "
            "token ids 0 and 2**31-1, unicode model names and texts, routed experts or None, "
            "fractional timestamps and an extra field holding every line break "
            "`str.splitlines` knows (U+2028, U+2029 and U+0085 among them); text holding a "
            "lone surrogate, which a store may refuse but, once it acked it, must give back; "
            "then entries drawn over every field."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="PUT-3",
        family="PUT",
        title="An identical re-put is a no-op",
        promise=(
            "Before freeze, putting an entry whose field values equal a stored one (floats bit "
            "for bit), from the same sink or another, changes nothing: still one entry, the "
            "rollout still clean, no error. After freeze a strict fence may refuse it by raising "
            "or accept it as a no-op; either way nothing changes: one entry, not incomplete, the "
            "same version, and the snapshot taken before it still drops."
        ),
        why=(
            "Producers retry after timeouts. If a retry duplicated the turn or masked the "
            "rollout, ordinary network hiccups would discard good training data or count a turn "
            "twice."
        ),
        how_broken=(
            "Append-only stores that keep both copies; treating every second write of a call id "
            "as a conflict; comparing objects instead of canonical bytes; bumping the version "
            "on an identical re-put after freeze, so the consumer's drop is refused."
        ),
        hazards=(
            "The same entry put three times before freeze, from the same and a fresh sink; "
            "once more from a fresh sink after freeze; the snapshots compared and the earlier "
            "one dropped; equal entries whose mappings were built in another key order, "
            "re-put before and after freeze."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="PUT-4",
        family="PUT",
        title="A conflicting re-put fails closed",
        promise=(
            "When a `model_call_id` is put again with a different payload, that `put` raises or "
            "the rollout freezes as incomplete from then on. Quietly keeping either payload "
            "and reporting the rollout clean is not allowed."
        ),
        why=(
            "Two payloads for one call make the evidence ambiguous: training on either may pair "
            "one generation's tokens with a reward another generation earned."
        ),
        how_broken=(
            "Last-writer-wins upserts (`INSERT OR REPLACE`, a plain `SET`); first-writer-wins "
            "`SETNX` that drops the loser without a word."
        ),
        hazards=(
            "Two puts of one call that differ in a single field, each field in turn: one prompt "
            "id, one generated id, one log prob, the sign of a zero log prob, one routed "
            "expert, an output item's text, `token_item_index`, the model name, `created_at`, "
            "an extra field; the second put from the same sink or a fresh one. A difference the "
            "store cannot keep even once is PUT-2's, not this clause's."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="PUT-5",
        family="PUT",
        title="Rollouts are isolated",
        promise=(
            "Writes to one rollout never appear in, mark, or change the version of another, "
            "including ids that differ only in letter case or in `.`, `_` and `-`."
        ),
        why=(
            "A rollout is one episode judged by one reward. Entries leaking in from another "
            "episode train the policy on tokens that reward never judged."
        ),
        how_broken=(
            "Case-folding keys (case-insensitive file systems or collations); slugifying ids "
            "into file names so `a.b` and `a_b` collide; one version counter for all rollouts."
        ),
        hazards=(
            "Ids that differ only by case or by `.`, `_`, `-`; ids that extend one another "
            "(`r`, `r.a`, `ra`, `r1`, `r-1`, `r_1`); the case-swapped twin; ids of 199 and "
            "200 characters that differ only in their last character or are one shorter; puts "
            "and marks on some, then freezes, versions and drops of the others; pairs whose "
            "rollout and call ids, joined with `.`, `-`, `_` or nothing, spell another pair's "
            "join, and chains of such pairs drawn from a grammar of separators."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="PUT-6",
        family="PUT",
        title="Any call id works",
        promise=(
            "Every non-empty string is a valid `model_call_id`: unicode, spaces, newlines and "
            "slashes are stored and come back exactly as given."
        ),
        why=(
            "Call ids come from the serving stack, not from the sink. A call id the sink mangles "
            "or rejects loses that turn's tokens, or merges two turns into one."
        ),
        how_broken=(
            "Using the call id unescaped as a file name or URL path segment; splitting keys on "
            "`/` or `:`; stripping whitespace."
        ),
        hazards=(
            "Call ids with spaces, newlines, tabs and carriage returns, slashes and "
            "backslashes, quotes, path traversal, unicode with combining marks and emoji, 300 "
            "characters, and look-alikes that case folding, normalizing, sanitizing or an "
            "escaping that leaves its escape character alone would merge (a newline and `\\n`, "
            "a tab and `\\t`, `/` and `%2F`) or a line reader would split (U+2028, U+2029, "
            "U+0085, a carriage return), all in one rollout; then call ids drawn at random."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="FREEZE-1",
        family="FREEZE",
        title="A snapshot has an identity",
        promise="Every snapshot carries a non-empty string `snapshot_id` and an integer `version`.",
        why=(
            "These two values are a consumer's only handle on exactly what it consumed. "
            "Without them drop cannot tell the snapshot a sample was built from from a later "
            "one."
        ),
        how_broken=(
            "Empty ids for rollouts without entries; versions coming back from a driver as "
            "strings or floats; None before the first write."
        ),
        hazards=(
            "Every snapshot of every check: `snapshot_id` empty or not a str, `version` a bool, "
            "float, str or None."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="FREEZE-2",
        family="FREEZE",
        title="Freezing is idempotent",
        promise=(
            "With no write in between, every freeze, from any instance in any process, returns "
            "the same `snapshot_id`, the same `version` and the same entries."
        ),
        why=(
            "A consumer that retries, or that freezes in another process, must be able to drop "
            "what it built from. If each freeze mints a new identity, no drop ever matches and "
            "records accumulate, or a retry builds a different sample."
        ),
        how_broken=(
            "Snapshot ids minted per call (a fresh uuid at every freeze); versions taken from "
            'the clock; ids hashed from entries in whatever order they were listed; "did the '
            'rollout change?" asked with `is`, which holds for small ints only.'
        ),
        hazards=(
            "Freezing again with no write in between, from the source that froze first, from "
            "a fresh one, and from one in a spawned worker (which must see the same pair and "
            "entries: an id salted per process by `hash()` differs there); a rollout of 12 "
            "entries a spawned worker put, frozen by two more, each started with a string-hash "
            "salt of its own (an id hashed in a set's order differs); a rollout of 260 puts, "
            "frozen twice, whose version passes 256."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="FREEZE-3",
        family="FREEZE",
        title="One entry per call id",
        promise=(
            "A snapshot holds each `model_call_id` at most once. The order of `entries` carries "
            "no meaning, and consumers must not read any into it."
        ),
        why=(
            "A turn listed twice gets twice the gradient weight. A consumer that reads list "
            "order as turn order rebuilds a different conversation from a different store."
        ),
        how_broken=(
            "Append logs replayed without de-duplication; merging shards that each hold a copy; "
            "a sink that recognises re-puts only of the calls it put itself."
        ),
        hazards=(
            "The same calls put over and over, in both orders, then frozen from a fresh source; "
            "identical re-puts from another sink, fresh and long-lived."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="FREEZE-4",
        family="FREEZE",
        title="A never-written rollout freezes empty",
        promise=(
            "Freezing a rollout that nothing was ever written to returns a snapshot with no "
            "entries and `incomplete` False, not an error."
        ),
        why=(
            "Episodes without a captured call happen (an early abort, a tool-only episode). A "
            "consumer that crashes on them stalls the whole pipeline behind one rollout."
        ),
        how_broken=(
            "Raising `KeyError` or `FileNotFoundError` for unknown rollouts; returning None; "
            "reporting unknown rollouts as incomplete."
        ),
        hazards=("Rollouts never written, frozen from fresh sources."),
        checked_by=KIT,
    ),
    Clause(
        id="FREEZE-5",
        family="FREEZE",
        title="An atomic cut under concurrency",
        promise=(
            "While other processes are still putting, a freeze returns entries that were all "
            "really put and are all whole, and it includes every put acked before the freeze "
            "was called. A put acked after the freeze returned that is missing from it falls "
            "under FENCE-1. Freezes racing each other agree."
        ),
        why=(
            "Consumers freeze as soon as a rollout ends, while late writes may be in flight. "
            "A torn or partial cut trains on half a turn, and a write that slipped past the cut "
            "unseen would be retired without ever being consumed."
        ),
        how_broken=(
            "Listing keys and then reading them one by one with no snapshot isolation; setting "
            "the frozen flag after reading instead of before; racing freezes that each mint "
            "their own snapshot id."
        ),
        hazards=(
            "Spawned writers putting, re-putting and marking while freezers in other processes "
            "and here freeze and drop mid-write; rounds where two writes race a freeze or a "
            "drop; then rounds in which the freezers and a writer freeze a growing, unchanged "
            "rollout at the same moment; the history judged against the sequential model."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="FENCE-1",
        family="FENCE",
        title="Writes after freeze are fenced",
        promise=(
            "Once a rollout is frozen, a `put` of a new call either raises (a strict fence) or "
            "is accepted and moves the version, so that dropping the earlier snapshot returns "
            "False (a relaxed fence). The kit reports which fence it found, and "
            "`--tokcap-fence=strict` accepts only the first."
        ),
        why=(
            "A turn written after the consumer took its snapshot was never trained on. If the "
            "old snapshot could still be dropped, that turn would be deleted unseen, and the "
            "stored trajectory would no longer be the one that happened."
        ),
        how_broken=(
            "Freeze as a plain read that records no fence; versions bumped by marks but not by "
            "puts; drop comparing only the `snapshot_id`."
        ),
        hazards=(
            "A new call put after a fresh source froze, from the long-lived sink that wrote "
            "before the freeze (whatever it remembers of the rollout being open is stale) and "
            "from a fresh sink and from a sink a spawned worker builds (a fence kept in one "
            "process's memory), then the old snapshot dropped; `--tokcap-fence=strict` requires "
            "the refusal."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="FENCE-2",
        family="FENCE",
        title="A dropped rollout refuses writes",
        promise=(
            "After a `drop` returned True, every `put` to that rollout raises, whether the call "
            "is new or one that was dropped."
        ),
        why=(
            "A late write into a retired rollout brings it back as a partial trajectory, which "
            "a later sweep may pick up and train on as if it were complete."
        ),
        how_broken=(
            "Deleting the records without keeping a tombstone; treating a put after a delete as "
            "the first write of a new rollout."
        ),
        hazards=("A new and an already stored call put after a successful drop, from fresh sinks."),
        checked_by=KIT,
    ),
    Clause(
        id="DROP-1",
        family="DROP",
        title="The exact snapshot retires",
        promise=(
            "`drop` with the `snapshot_id` and `version` of the rollout's current frozen state "
            "returns True, whichever instance it is called on."
        ),
        why=(
            "A consumer that cannot retire what it trained on leaves storage growing without "
            "bound, and after a restart the same rollout may be consumed again and counted twice."
        ),
        how_broken=(
            "Comparing with a snapshot cached only by the instance that froze; versions that "
            "come back from storage as another type and compare unequal; retiring only "
            "rollouts that are clean, so masked ones pile up."
        ),
        hazards=(
            "The exact pair handed over as equal copies (never the objects a freeze returned, "
            "as a consumer reads them back from a queue), from a fresh source; of a rollout "
            "frozen empty and of one marked incomplete; after hundreds of state changes, so "
            "versions are past the small ints an identity comparison gets right."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="DROP-2",
        family="DROP",
        title="Anything but the exact snapshot is refused",
        promise=(
            "`drop` returns False for another `snapshot_id`, for a version off by any amount in "
            "either direction, for a rollout written but never frozen, and for a rollout that "
            "does not exist. Only a `(snapshot_id, version)` pair that a freeze returned "
            "retires: after a freeze and a later mark or put, a version the rollout reached "
            "but no freeze returned is refused too."
        ),
        why=(
            "Drop destroys evidence. Retiring on a stale or guessed identity throws away "
            "entries no consumer used, and a rollout is lost from training without a trace. A "
            "guessed next version is the worst case: it names a state that exists, with a mark "
            "or an entry no consumer ever saw, so the consumer that guessed it destroys the "
            "very evidence that would have kept the rollout out of training."
        ),
        how_broken=(
            "Checking `version >= stored` instead of equality; dropping by rollout id alone; "
            "raising for unknown rollouts instead of returning False."
        ),
        hazards=(
            "Another `snapshot_id` (extended, empty, case-changed); the version off by 1, 2, "
            "1000 or below zero; a rollout never frozen and one never written; after a freeze "
            "followed by marks and puts, every version up to six past the frozen one, which no "
            "freeze returned."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="DROP-3",
        family="DROP",
        title="A refused drop destroys nothing",
        promise=(
            "A `drop` that returned False changed nothing: the next freeze returns the same "
            "snapshot with the same entries and flags, and the right drop still succeeds."
        ),
        why=(
            "Refusals are routine, for example a retry carrying an old version. If a refused "
            "drop deleted part of the rollout, evidence still waiting to be consumed is gone."
        ),
        how_broken=(
            "Deleting first and comparing afterwards; clearing the frozen state on a mismatch, "
            "so the next freeze mints a new snapshot."
        ),
        hazards=(
            "Refused drops with a wrong version and with a wrong id, then a fresh freeze "
            "compared and the exact drop tried."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="DROP-4",
        family="DROP",
        title="A later change invalidates the old snapshot",
        promise=(
            "If the rollout changed after a snapshot was taken, through a put accepted under a "
            "relaxed fence or through `mark_incomplete`, dropping that snapshot returns False."
        ),
        why=(
            "The consumer's sample reflects the old state. Retiring the new one would delete a "
            "turn no sample contains, or erase a mask that should have kept the rollout out of "
            "training."
        ),
        how_broken=(
            "Versions derived from entry counts, which a mark does not change; the incomplete "
            "flag stored outside the versioned state; versions bumped only by puts."
        ),
        hazards=(
            "A mark after freeze; a conflicting re-put after freeze that changed the rollout; "
            "then the old pair dropped."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="DROP-5",
        family="DROP",
        title="Drop deletes, or the transport declares it cannot",
        promise=(
            "After a successful drop the rollout's records are gone. A transport that cannot "
            "delete may still return True, but it declares so with "
            "`--tokcap-capability=no-delete`, and then the records must still freeze afterwards."
        ),
        why=(
            "A consumer sweeping for work would find undeleted records and train on the same "
            "rollout again. An honest declaration lets the consumer track retirement on its own."
        ),
        how_broken=(
            "Returning True while the records stay readable, without declaring it; append-only "
            "logs with no delete; expiry by TTL that has not fired yet."
        ),
        hazards=("A freeze after a successful drop, with and without `no-delete` declared."),
        checked_by=KIT,
    ),
    Clause(
        id="MASK-1",
        family="MASK",
        title="A mark is durable and shared",
        promise=(
            "Once `mark_incomplete` returns, the next freeze by a newly built instance, in this "
            "process or another, reports `incomplete` True."
        ),
        why=(
            "The mark is how a failed model call keeps its rollout out of training. A mark lost "
            "to buffering or to process memory lets a broken trajectory train as complete."
        ),
        how_broken=(
            "Marks kept in a process-local set; marks queued behind a flush; marks written to a "
            "key the source never reads."
        ),
        hazards=(
            "Marks of a call that has an entry, from a fresh sink here and from a spawned "
            "worker, seen by fresh sources; a worker's mark of a rollout this process froze "
            "before, seen by a fresh source and by the one that froze it; a mark on a rollout "
            "nothing was put into yet."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="MASK-2",
        family="MASK",
        title="Incomplete is sticky",
        promise=(
            "Once incomplete, a rollout stays incomplete: no later put, freeze or mark clears it."
        ),
        why=(
            "A retry that succeeds does not repair the call that failed. Clearing the mask "
            "would admit a trajectory with a gap into the training batch."
        ),
        how_broken=(
            "Storing the flag on the latest write; a successful put resetting it; a freeze that "
            "recomputes it from the entries alone."
        ),
        hazards=("Later puts (new and identical), freezes and re-marks after a mark."),
        checked_by=KIT,
    ),
    Clause(
        id="MASK-3",
        family="MASK",
        title="A mark after freeze moves the version",
        promise=(
            "`mark_incomplete` is accepted after a freeze and changes the version, so the "
            "earlier snapshot can no longer be dropped (DROP-4)."
        ),
        why=(
            "Failures are often noticed late. A mark refused after freeze, or one that leaves "
            "the version alone, lets a consumer retire as clean a rollout that is broken."
        ),
        how_broken=(
            "Fencing marks the way puts are fenced; versions counted from entries; marks "
            "written without touching the version."
        ),
        hazards=("A mark after freeze, frozen from a fresh source."),
        checked_by=KIT,
    ),
    Clause(
        id="MASK-4",
        family="MASK",
        title="A silent conflict masks the rollout",
        promise=(
            "When a conflicting re-put (PUT-4) does not raise, the rollout freezes as incomplete "
            "from then on."
        ),
        why=(
            "The conflict has to surface somewhere. One that neither raises nor masks is "
            "exactly the silent corruption PUT-4 rules out."
        ),
        how_broken=(
            "Catching the conflict and only logging it; keeping the first payload and returning "
            "as if nothing happened; reporting the conflict at one freeze, then compacting it "
            "away."
        ),
        hazards=(
            "A conflicting re-put from a fresh sink that does not raise, and re-puts differing "
            "in one field each; every such rollout is frozen twice, each time through a source "
            "that never read it."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="MASK-5",
        family="MASK",
        title="A masked rollout keeps its evidence",
        promise=(
            "Marking a rollout deletes nothing: every freeze returns the same entries until a "
            "consumer drops or deletes the rollout."
        ),
        why=(
            "A masked rollout is kept out of training, but its tokens are what an investigation "
            "needs to find out why it failed. Discarding them throws that evidence away."
        ),
        how_broken=(
            "Collecting a rollout's entries as garbage when a mark arrives; truncating on mark "
            "to save space."
        ),
        hazards=(
            "A masked rollout frozen from the same and a fresh source, then dropped with its "
            "exact pair (a drop that answers False there is DROP-1's)."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="MASK-6",
        family="MASK",
        title="A mark takes any call id",
        promise=(
            "`mark_incomplete` accepts any `model_call_id`, the empty string (its default) "
            "included, and call ids no entry uses. On a rollout already dropped it may raise or "
            "return; either way no later freeze of that rollout returns a clean snapshot."
        ),
        why=(
            "Failures are often detected before a call id exists or outside any call. A mark "
            "refused because of its call id leaves a broken rollout looking clean."
        ),
        how_broken=(
            "Requiring a non-empty call id; using it as a file name; requiring a stored entry "
            "with that call id; serving a dropped rollout again once it took a mark, so a "
            "second drop leaves it clean."
        ),
        hazards=(
            'Marks with `""`, odd call ids and calls no entry has, on empty rollouts and on '
            "rollouts with entries; a mark after a drop, and a freeze after that masked "
            "snapshot was dropped as well. A mark lost on a rollout with no entry whatever its "
            "call id is MASK-1's."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="CLOSE-1",
        family="CLOSE",
        title="Close is idempotent",
        promise="Closing a sink or a source again does nothing and raises nothing.",
        why=(
            "Shutdown closes from several places at once, a `finally` block and a lifespan hook "
            "among them. An error there hides the real failure and can skip the cleanup after it."
        ),
        how_broken=(
            "A client that raises when closed twice; a `close` that clears attributes and then "
            "uses them on the second call; a `close` that assumes a pool or connection the "
            "first operation opens."
        ),
        hazards=(
            "`close` twice on a sink and on a source, unused and after every operation. A close "
            "that raises while another check tidies up is left to this clause."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="CLOSE-2",
        family="CLOSE",
        title="Close loses nothing",
        promise=(
            "Everything acked before `close`, entries and marks alike, is visible to a newly "
            "built instance afterwards. A `close` that had something to flush shows that "
            "`put` acked too early."
        ),
        why=(
            "Workers are killed as often as they are closed. Anything that needed `close` to "
            "become durable is lost in a crash, and the loss only shows up in training."
        ),
        how_broken=(
            "Buffering until close; flushing only on close; closing the connection before "
            "pending writes finished."
        ),
        hazards=(
            "Puts and a mark, then `close`, then a fresh source's freeze; one sink's put, then "
            "another sink's puts and mark into the same rollout, then the first sink's `close`."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="EXT-BEGIN-1",
        family="EXT",
        title="Call intents mask unfinished calls",
        promise=(
            "A sink that offers `begin_call(rollout_id, model_call_id)` records an intent. An "
            "intent that has no matching entry when the rollout is frozen makes the snapshot "
            "incomplete; an intent whose entry arrived leaves it clean, whatever the call id "
            "string."
        ),
        why=(
            "A call that started and never wrote its entry, a worker crash mid-generation for "
            "instance, leaves a gap in the trajectory. Intents turn that gap into a mask "
            "instead of a quietly shorter episode."
        ),
        how_broken=(
            "Matching intents to entries after normalizing call ids; intents kept in process "
            "memory; counting intents instead of matching them one to one."
        ),
        hazards=(
            "Intents matched by their entries and intents left dangling, for every odd call "
            "id; a dangling intent beside the entry of a call id equal to it only after case "
            "folding, unicode normalization, separator mapping or stripping."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="EXT-RETIRE-1",
        family="EXT",
        title="Retire and delete by id",
        promise=(
            "A source that offers `retire(ids)` removes and fences those rollouts in whatever "
            "state they are, and retiring again is a no-op. One that offers `delete(ids)` "
            "removes the records and the fence, so the ids can be used again."
        ),
        why=(
            "Operators clear rollouts that no snapshot will ever retire, after an aborted run "
            "for example. A retire that leaves records, or lets later writes revive them, "
            "brings abandoned trajectories back into training."
        ),
        how_broken=(
            "Retire raising for unknown or already retired ids; delete leaving the tombstone "
            "behind so a reused id stays refused; retire without a fence."
        ),
        hazards=(
            "`retire` of frozen, written and unknown rollouts, repeated, then a freeze of "
            "each; `delete` of a retired rollout and of a written, marked one never retired, "
            "then each id written again."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="LINEAGE-1",
        family="LINEAGE",
        title="A put is seen by every resolver at once",
        promise=(
            "Once a sink's `put` returned, `resolve` of a lineage resolver over the same store "
            "sees the entry: a resolver built before the put and one built after it, in this "
            "process and, when `is_process_shared()` says True, in every other. "
            "`is_process_shared()` answers a bool, without being awaited, and says True only "
            "where that holds: never over a store declared `process-local`."
        ),
        why=(
            "The harness sends a rollout's next request to whichever worker is free, as soon as "
            "the previous call answered. A resolver that has not seen that call yet answers "
            "unresolved, so the continuation is captured without its parent and the rollout "
            "is masked: under load, a share of good samples is thrown away, intermittently."
        ),
        how_broken=(
            "An index built once per rollout and never refreshed; a resolver that reads a "
            "replica or a cache the put has not reached; a per-process index that only the "
            "worker that wrote it can see; a frozen rollout's rows cached under its snapshot "
            "id; `is_process_shared` declared `async`."
        ),
        hazards=(
            "A resolve the moment each put returns, by a resolver that already answered for the "
            "rollout before the put and by one built after it; plain and 4,096-token entries; "
            "entries put by spawned workers into rollouts this process's resolver read before, "
            "resolved here; later calls of the same rollout; a resolver over a store declared "
            "`process-local`; a put a relaxed fence accepted after a freeze, resolved by a "
            "resolver that read the frozen rollout; a call a spawned worker adds to a rollout "
            "this process wrote and read."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="LINEAGE-2",
        family="LINEAGE",
        title="Roots and proven parents are answered as such",
        promise=(
            "A request with no model-authored item resolves as `root`, with no match. A request "
            "that repeats the recorded context of exactly one committed call and continues its "
            "answer resolves as `resolved`, and the match names that call and carries its "
            "prompt followed by its generation as `cumulative_token_ids`, in every dialect "
            "(chat, Responses, Anthropic), for any call id, in a rollout marked incomplete as "
            "in any other, and for a call stored as a delta of its parent (`prompt_is_delta`), "
            "whose `cumulative_token_ids` are the parent chain's sequence followed by its own "
            "prompt and generation."
        ),
        why=(
            "A resolved parent is how the next call's tokens join the previous ones into one "
            "training sequence. The wrong parent, or the right one with the wrong tokens, makes "
            "a sequence the model never saw; an unresolved answer where a parent was proven "
            "masks a good rollout."
        ),
        how_broken=(
            "Matching on the first or the latest call of the rollout instead of the "
            "fingerprint; returning the parent's prompt without its generation; treating a "
            "request with only user and tool items as a continuation; normalizing call ids."
        ),
        hazards=(
            "Requests of user, system, tool and reasoning items only; chains of three calls in "
            "which each resolves to the one before, not the first; chat, Responses and Anthropic "
            "tool calls and results; odd call ids, and eighteen in one rollout that differ only "
            "by case, separators, composed or decomposed accents, a trailing space, a ligature, "
            "or a character against the escape that spells it (a newline and `\\n`); rollouts "
            "marked incomplete as a whole or for a call that never put; chains of delta records "
            "(a delta of a delta), as NeMo Gym writes them with `delta_records`; model turns "
            "that are a tool call alone in every dialect (a Responses `function_call` with no "
            "assistant message)."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="LINEAGE-3",
        family="LINEAGE",
        title="A resolver never guesses",
        promise=(
            "Unless one parent is proven, `resolve` answers `unresolved`: for a rollout with "
            "nothing committed, a history whose earlier items were rewritten, shortened or had "
            "a tool result changed, two candidate calls with different tokens, a parent "
            "committed to another rollout, an entry stamped by another fingerprint version or "
            "with no recorded context digest, a call whose id was acked with two different "
            "payloads, and a call deleted with its rollout, even once the rollout id and the call "
            "id are used again."
        ),
        why=(
            "Unresolved only masks one rollout. A guessed parent splices tokens from another "
            "conversation, or from a history the harness summarized away, into a training "
            "sequence, and nothing downstream tells it from a real one."
        ),
        how_broken=(
            "Matching the model-authored turns and skipping the context digest, or checking it "
            "only when the request is at least the recorded length; taking the first of several "
            "candidates, or of candidates of one length; looking parents up "
            "across rollouts, one by one or pooled; ignoring the fingerprint version."
        ),
        hazards=(
            "A never-written rollout; a changed system prompt, a changed tool result, a truncated"
            " history, and histories shortened below the recorded context length that keep the "
            "model's turn; two calls that answered alike with different tokens, of different "
            "lengths and of one length; the parent, from a conversation no other rollout had and "
            "under a call id no other rollout used, in a look-alike rollout (case, `.`, `_`, "
            "`-`) and asked in a rollout whose id is a prefix"
            " of the parent's; an entry stamped with version 1; twin calls whose ids differ only "
            "by case, padding, unicode form, a compatibility character, a tab or a separator; an "
            "entry with an empty context digest; a rollout resolved, deleted and written again "
            "under the same call id, and one under another call id; a parent in another rollout "
            "asked in one with calls of its own; a call acked with two payloads (a silent "
            "conflict). Random programs of new, identical and conflicting puts, marks, freezes, "
            "`delete` and `retire` over two rollouts whose ids differ by case, each call asked "
            "about by a long-lived and by fresh resolvers, judged from what the sink acknowledged"
            " (LINEAGE-1 and LINEAGE-2 too)."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="COST-1",
        family="COST",
        title="No call holds the event loop beyond the budget",
        promise=(
            "Under a budget with `loop-hold` (or `loop-hold-max`), no call of the sink or "
            "source holds the event loop it is awaited on longer than that: the p99 over the "
            "calls of a serving-shaped workload (by nearest rank), or the longest of them. "
            "Without such a limit the clause is not claimed."
        ),
        why=(
            "A model server awaits `put` on the loop that answers every other request of the "
            "worker. Blocking disk or network work inside the coroutine stalls every rollout "
            "the worker serves for as long as it lasts, and NeMo Gym's own store promises to "
            "store without blocking the loop."
        ),
        how_broken=(
            "`os.fsync` or a synchronous HTTP client inside `async def put`; a lock taken with "
            "a blocking acquire; serializing a long-context entry on the loop; re-reading "
            "and rewriting the whole rollout's document inside every `put`."
        ),
        hazards=(
            "Eight rollouts served at once, as a serving loop serves them: seven put 14 calls "
            "one after another, small ones and two long-context ones of 8,192 prompt and "
            "1,024 generated tokens at turns that differ by rollout, and two of them are then "
            "marked; the eighth is one growing conversation of 20 calls whose prompts grow by "
            "2,048 tokens a call, so a put that re-reads or rewrites the whole rollout costs "
            "more at every turn. Then each rollout is frozen, frozen again and dropped. A "
            "call's hold is the "
            "longest stretch its own code runs without yielding; a heartbeat due every "
            "millisecond also watches the loop for holds outside any call. Serving stops once "
            "the holds seen already break the budget, whatever the calls not made yet show."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="COST-2",
        family="COST",
        title="Calls answer within the latency budget",
        promise=(
            "Under a budget with `OPERATION-p50`, `-p99` or `-max` for `put`, "
            "`mark_incomplete`, `freeze` or `drop`, that operation's latency over the same "
            "workload is within it. Without such a limit the clause is not claimed."
        ),
        why=(
            "Every `put` is awaited before the model server answers the request, so its "
            "latency is added to the rollout's; a trainer waits on every `freeze`. A store "
            "that waits on a remote acknowledgement per call sets the pace of the whole run."
        ),
        how_broken=(
            "Waiting for a replica or a queue's acknowledgement on every call; a sync per "
            "call where a batch would do; retries with long back-offs on the normal path."
        ),
        hazards=(
            "The COST-1 workload, each call timed from the call to its answer, less the time "
            "other calls then in flight held the loop (their hold, which COST-1 judges). Many "
            "puts are in flight at once, so a store whose calls contend for a lock shows it."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="COST-3",
        family="COST",
        title="Freeze costs at most the budget per MiB",
        promise=(
            "Under a budget with `freeze-mib`, freezing a rollout of long-context entries "
            "costs at most that per MiB of its token payload (the JSON text of its token ids "
            "and log probs), the median of three freezes. Without the limit the clause is "
            "not claimed."
        ),
        why=(
            "The trainer freezes every rollout it trains on; a freeze that grows badly with "
            "the rollout's size throttles the training loop on exactly the long episodes "
            "that matter."
        ),
        how_broken=(
            "Re-reading and re-parsing every record on each freeze; a round trip per entry; "
            "copying the log once per entry."
        ),
        hazards=(
            "One long conversation of 32 calls, each prompt 2,048 tokens longer than the one "
            "before (up to NeMo Gym's 65,536) and each generating 1,024 tokens, about 7 MiB "
            "of token payload, put and then frozen three times by a fresh source."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="CFG-1",
        family="CFG",
        title="Settings and their defaults",
        promise=(
            "`TokenIdCaptureSettings` has `enabled` (False), `dir` (None), `sink` (None), "
            "`sink_kwargs` (empty), `all_agents` (False), `rebuild_response` (True), "
            "`max_mask_fraction` (None) and `mask_fraction_min_samples` (50), and refuses any "
            "key it does not know."
        ),
        why=(
            "A misspelled key that is ignored leaves capture off or pointed elsewhere, and the "
            "run trains without token evidence while everyone believes it has it."
        ),
        how_broken=(
            "Settings models that ignore unknown keys; defaults that differ from NeMo Gym's, "
            "such as capture on by default."
        ),
        checked_by=_CONFIG_TESTS,
    ),
    Clause(
        id="CFG-2",
        family="CFG",
        title="Reading the global config",
        promise=(
            "`TokenIdCaptureConfig` reads a whole global config and ignores top-level keys it "
            "does not own. `resolved_dir()` is `dir`, or `model_call_capture_dir` when `dir` is "
            "unset."
        ),
        why=(
            "The capture block sits inside a large shared config; refusing unrelated keys would "
            "break every run, and the fallback keeps older configs capturing where they did."
        ),
        how_broken=(
            "Forbidding extra top-level keys; preferring `model_call_capture_dir` over `dir`."
        ),
        checked_by=_CONFIG_TESTS,
    ),
    Clause(
        id="CFG-3",
        family="CFG",
        title="What an enabled config requires",
        promise=(
            "With capture disabled nothing else is validated. Enabled with a sink, the config "
            "is valid, with a warning when a directory is set as well. Enabled without a sink, "
            "it needs an absolute directory, unless a sink is installed in this process or "
            "`rebuild_response` is false."
        ),
        why=(
            "A relative directory resolves against each worker's own working directory, so "
            "writers and reader look in different places and the consumer finds no records."
        ),
        how_broken=(
            "Validating the directory while capture is off; accepting relative paths; ignoring "
            "`dir` without a word when a sink is set."
        ),
        checked_by=_CONFIG_TESTS,
    ),
    Clause(
        id="CFG-4",
        family="CFG",
        title="build_sink",
        promise=(
            "`build_sink()` returns None when capture is disabled or no sink is configured; "
            "otherwise each call returns a new, validated instance, or fails with the errors "
            "BUILD-2 describes."
        ),
        why=(
            "Each process has to build its own sink. A cached instance that crosses a process "
            "boundary carries a connection it cannot use there."
        ),
        how_broken=(
            "Memoizing the sink; returning one while capture is disabled; building without "
            "checking the protocol, so the failure shows at the first put."
        ),
        checked_by=_CONFIG_TESTS,
    ),
    Clause(
        id="CFG-5",
        family="CFG",
        title="Which agents capture",
        promise=(
            "`token_id_capture_enabled_for_agent` is False whenever capture is disabled. With "
            "`all_agents` it is True for every agent; otherwise it is True exactly when one of "
            "the agent's `responses_api_agents` entries sets `token_id_capture`."
        ),
        why=(
            "An agent wrongly left out produces rollouts with no token evidence; one wrongly "
            "included pays for capture and writes records nobody consumes."
        ),
        how_broken=(
            "Looking at the agent's own block instead of its `responses_api_agents`; letting "
            "`all_agents` override a disabled block."
        ),
        checked_by=_CONFIG_TESTS,
    ),
    Clause(
        id="CFG-6",
        family="CFG",
        title="The masked-fraction guard",
        promise=(
            "`max_mask_fraction` is None or within [0, 1], and `mask_fraction_min_samples` is "
            "at least 1. The run aborts, once, when at least that many rollouts are finalized "
            "and the fraction of them masked is strictly above the limit."
        ),
        why=(
            "When most rollouts are masked, training sees a biased sample, the episodes that "
            "happened to succeed. Stopping early beats a run that quietly learns from it."
        ),
        how_broken=(
            "Judging before enough samples, so one early failure ends the run; `>=` where `>` "
            "is meant; aborting again on every later rollout; counting rollouts still in flight."
        ),
        checked_by=_CONFIG_TESTS,
    ),
    Clause(
        id="CONS-1",
        family="CONS",
        title="Finalize freezes and never drops",
        promise=(
            "The reference consumer's finalize step freezes the rollout, builds the sample from "
            "exactly that snapshot, and does not drop."
        ),
        why=(
            "Dropping before the sample is safely handed off loses the rollout if the handoff "
            "then fails."
        ),
        how_broken=(
            "Freeze, build and drop as one step; building from a second freeze that may differ "
            "from the first."
        ),
        checked_by=_CONSUMER_TESTS,
    ),
    Clause(
        id="CONS-2",
        family="CONS",
        title="Drop after a durable handoff, by the frozen snapshot",
        promise=(
            "The consumer drops only once the sample is durably handed off, and passes the "
            "`snapshot_id` and `version` it froze."
        ),
        why=(
            "The rollout may change between freeze and drop; dropping by the frozen identity "
            "lets the source refuse, so nothing unconsumed is deleted."
        ),
        how_broken=(
            "Taking the identity from a fresh freeze at drop time; dropping before the "
            "trainer's queue confirmed receipt."
        ),
        checked_by=_CONSUMER_TESTS,
    ),
    Clause(
        id="CONS-3",
        family="CONS",
        title="Failed and masked builds are kept",
        promise=(
            "When building the sample fails, or the snapshot is incomplete, the consumer never "
            "drops the rollout."
        ),
        why=(
            "Those records are the only evidence of what went wrong, and keeping them lets a "
            "fixed builder try again."
        ),
        how_broken=("Dropping in a `finally` block; treating a masked rollout as consumed."),
        checked_by=_CONSUMER_TESTS,
    ),
    Clause(
        id="CONS-4",
        family="CONS",
        title="Without rebuild_response, stop after the write",
        promise=(
            "With `rebuild_response` false the consumer stops once the records are written; the "
            "framework reads them back through its own source."
        ),
        why=(
            "A framework that assembles samples itself would otherwise have its records "
            "consumed and dropped underneath it, losing trajectories before training reads them."
        ),
        how_broken="Rebuilding and dropping whatever the setting says.",
        checked_by=_CONSUMER_TESTS,
    ),
    Clause(
        id="STAGE-1",
        family="STAGE",
        title="Plain methods, well-formed answers",
        promise=(
            "The staging sink has a plain method `stage(record, *, attachments=None)` and the "
            "staging source a plain method `fetch(staging_keys)`; neither is a coroutine "
            "function. `stage` answers a `StageResult`, or an object with its `ok`, "
            "`staging_key` and `error`: `ok` a bool, with a non-empty string key when it is "
            "true and a non-empty error when it is false. A caller that names its classes gets "
            "an instance of its own `StageResult` for every record of those classes it hands "
            "over (NeMo Gym's capture refuses any other class); an answer to anything else is "
            "read by its fields. `fetch` answers a list."
        ),
        why=(
            "Gym calls `stage` from a completion thread while it answers the request and reads "
            "the result at once. A coroutine it never awaits stages nothing, and a result "
            "without a key leaves the trainer nothing to fetch the call by: the turn is lost "
            "from training."
        ),
        how_broken=(
            "An `async def stage` copied from a capture sink; returning a bare key or a dict; "
            "`ok=True` with an empty key; `ok=False` with no error; answering tokcap's (or its "
            "own) result class to Gym's capture, which turns every call into a failed capture."
        ),
        hazards=(
            "Each method inspected on the instance; results of a valid call, of a call the "
            "sink must refuse, and of a re-stage, each read as Gym reads a result. With "
            "`--tokcap-staging-classes=gym` (or a module path) every record the kit stages, in "
            "this process, from threads and in spawned stagers, is of those classes, and every "
            "answer must be an instance of their `StageResult`."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="STAGE-2",
        family="STAGE",
        title="Built from the target and kwargs, anywhere",
        promise=(
            "The sink and the source are built from their `module:Class` target and JSON "
            "kwargs alone: in the process running the kit, and in a freshly spawned "
            "interpreter, with other instances on the same store open at the same time."
        ),
        why=(
            "Gym builds the staging sink inside each inference worker from its config, and the "
            "trainer builds the source in its own process. A store that needs an object passed "
            "in, or state set up by the process that made it, does not exist where the calls "
            "arrive."
        ),
        how_broken=(
            "Constructors taking a live client; a module-level connection made before the "
            "fork; a lock file that a second instance cannot open."
        ),
        hazards=(
            "Several instances in one process; instances built in spawned interpreters from "
            "the same target and kwargs (unless the run declares `process-local`)."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="STAGE-3",
        family="STAGE",
        title="Durable once ok",
        promise=(
            "Once `stage` returned ok, a source built afterwards, in another process, fetches "
            "the call's row under the key it returned. With the `process-local` capability "
            "declared, a source built afterwards in the same process does."
        ),
        why=(
            "Gym records the key in its token-free ledger as soon as `stage` answers, and "
            "verification at the rollout's end fetches by it. A row that was only in the "
            "sink's memory, or in a buffer not yet written, fails verification and the rollout "
            "is dropped from training, or the trainer stalls waiting for it."
        ),
        how_broken=(
            "Answering ok before the write is flushed or acknowledged; writing to a per-process "
            "cache; a source that reads only what its own instance staged."
        ),
        hazards=(
            "Roots and children of several rollouts, long and short deltas, with and without "
            "extras and attachments, fetched by a fresh source in a spawned interpreter."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="STAGE-4",
        family="STAGE",
        title="Report, never raise; a refusal stores nothing",
        promise=(
            "`stage` never raises, whatever it is handed. A record that is not a valid staged "
            "call (its digest not that of its fields, extras that do not match their digest, "
            "not a record at all) "
            "is refused with ok false and an error, as is a call the sink cannot store whole "
            "(attachments it does not take, a storage failure); nothing of a refused call "
            "becomes fetchable: the same ids staged correctly afterwards are ok, and fetch the "
            "correct call."
        ),
        why=(
            "An exception out of `stage` fails Gym's capture of the whole request, not one "
            "staged call. A refused call that leaves a partial row behind is worse: the next, "
            "correct stage of those ids is refused as a conflicting re-stage, or the trainer "
            "fetches the half-written row."
        ),
        how_broken=(
            "Letting a validation or client error propagate; writing the row before checking "
            "it; keeping a reservation for the key after the write failed."
        ),
        hazards=(
            "A record whose digest does not match its fields, one whose extras do not match "
            "their digest, a plain dict of valid fields, `None`; "
            "attachments that are a list, or keyed by ints; each handed over unvalidated and "
            "followed by a correct stage of the same ids, whose extras, where the store declares "
            "`read-back`, must be its own."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="STAGE-5",
        family="STAGE",
        title="Keys stable and distinct",
        promise=(
            "A valid call stages ok whatever its ids hold (`/`, `%` and escape sequences, other "
            "separators, non-ASCII text, case differences, long ids), under a key that is the "
            "same every time the call with those ids is staged, by any instance, and distinct "
            "for distinct `(rollout_id, model_call_id)` pairs."
        ),
        why=(
            "The key is the only way back to a call. Two calls sharing one either overwrite "
            "each other or refuse each other, and a key that changes between a stage and its "
            "re-stage strands the first row: either way a turn's tokens are lost or taken from "
            "another call."
        ),
        how_broken=(
            "Joining the ids with `/` or another separator; escaping `/` but not `%`; hashing a "
            "truncated or case-folded id; a key of the call id alone; a random key per stage."
        ),
        hazards=(
            "Pairs the default `rollout/call` key confuses, pairs a `/`-only escape confuses "
            "(`%2F` written literally), separators `:` `|` `-` `_`, ids differing only in case "
            "or Unicode normalization, ids of hundreds of characters sharing a long prefix; the "
            "same ids staged again by a second instance. Every check's rollouts number their "
            "calls from `call-0`: wherever a valid call is refused, the same call is staged "
            "again under ids nothing else holds, and if that is ok the refusal is this clause's; "
            "wherever a key fetches another pair's call that was answered the same key, so is "
            "that."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="STAGE-6",
        family="STAGE",
        title="Concurrent stages lose and mix nothing",
        promise=(
            "Calls staged at the same time from many threads of one instance, and from spawned "
            "processes, are each kept whole: every ok key fetches exactly the call staged "
            "under it, and no ok stage is lost."
        ),
        why=(
            "Gym stages from several completion threads per worker and many workers per "
            "trainer, never serialized for the sink. A store that loses a racing write, or "
            "mixes two calls' columns, hands the trainer a delta that verification rejects or, "
            "with a matching digest, a turn from the wrong call."
        ),
        how_broken=(
            "A shared buffer or client used without a lock; read-modify-write of one document "
            "holding several calls; an index file rewritten by each process."
        ),
        hazards=(
            "Sixteen threads staging distinct calls of shared rollouts, deltas of 1 to 330 "
            "tokens; three spawned processes staging into shared rollouts of one store at once "
            "(unless the run declares `process-local`)."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="STAGE-7",
        family="STAGE",
        title="Identical re-stage is a no-op; a different one is never swapped in",
        promise=(
            "Staging again the call a key holds (the same digest) is ok with the same key and "
            "changes nothing. A different call with the same ids is never silently swapped in: "
            "it is refused with ok false and the stored call kept, or it is given a key of its "
            "own; an ok key always fetches the call staged under it."
        ),
        why=(
            "Retries re-stage calls, so a re-stage must succeed. A different call under the "
            "same ids means a bug or a replayed request; replacing the stored row changes a "
            "turn the ledger already committed to, and keeping the old row while answering ok "
            "hands the trainer tokens the caller never staged."
        ),
        how_broken=(
            "Overwriting on every stage; answering ok whenever the key exists; comparing "
            "floats with `==` so that `-0.0` and `0.0` look alike; comparing only the token "
            "ids."
        ),
        hazards=(
            "Identical re-stages from the same and a fresh instance; re-stages differing in one "
            "token id, one mask, one log prob (`-0.0` for `0.0`, one float32 step), the weight "
            "version, the extras, the chain hash; log probs equal after float32 rounding, which "
            "digest alike and are the same call; eight threads staging one call at once, and "
            "eight staging rival calls for one key at once."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="STAGE-8",
        family="STAGE",
        title="Fetch answers every key, in order, or raises",
        promise=(
            "`fetch(keys)` returns one row per key, in the order asked, repeats included, and "
            "an empty list for an empty list. If any key holds nothing it raises and returns "
            "nothing: never a shorter list, a `None` or a placeholder."
        ),
        why=(
            "Gym pairs rows with its ledger by position. A row out of order attaches one call's "
            "tokens to another; a short list or a `None` makes verification fail on the wrong "
            "call or, worse, lets a consumer skip the missing one silently."
        ),
        how_broken=(
            "Returning rows in storage order; de-duplicating keys; dropping keys not found; "
            "batching by node and concatenating the batches."
        ),
        hazards=(
            "Keys reversed, shuffled and repeated, across rollouts; batches of hundreds; a "
            "missing key first, in the middle, last, or alone."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="STAGE-9",
        family="STAGE",
        title="A fetched row is the staged call",
        promise=(
            "A fetched row validates as a `StagedCallBaseSnapshot` and carries the staged "
            "call's every field: ids, lengths and token ids exactly (ids up to 2**64 - 1), "
            "masks and log probs to their float32 bits (`-0.0` stays negative, subnormals stay "
            "nonzero), the extras digest and the chain and cumulative hashes as staged, and the "
            "digest, which recomputes from the row. It carries no extras."
        ),
        why=(
            "Verification recomputes the digest from the row, so a field changed on the way "
            "drops the rollout; and where a change survives float32 rounding unnoticed it is "
            "because the digest commits to float32 bits, not to what the store kept. Token ids "
            "parsed through a double lose their low bits above 2**53."
        ),
        how_broken=(
            "JSON through a parser that reads big integers as doubles; `-0.0` written as `0`; "
            "floats rounded to a few digits; Unicode ids normalized or re-encoded; extras left "
            "in the row."
        ),
        hazards=(
            "Token ids 0, 2**53 + 1 and 2**64 - 1; log probs `-0.0`, float32 subnormals, "
            "values differing below float32 precision, deltas of thousands of tokens; non-ASCII "
            "ids; nested extras; a mask holding `-0.0`."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="STAGE-10",
        family="STAGE",
        title="Other versions are refused",
        promise=(
            "A record of another schema version, digest version or extras digest version is "
            "refused with ok false, even when it reaches the sink unvalidated, and nothing of "
            "it is stored."
        ),
        why=(
            "The digest layout is versioned: a row of another version is checked against the "
            "wrong layout at the rollout's end, or passes for a call it is not. Refusing at "
            "stage time turns a producer newer than its sink into a plain failed capture."
        ),
        how_broken=(
            "Trusting the record's type and never reading the versions; accepting any version "
            "at or below its own."
        ),
        hazards=(
            "Schema version 1 and 3, digest version 1 and 3, extras digest version 2, each on "
            "an otherwise valid record handed over unvalidated."
        ),
        checked_by=KIT,
    ),
    Clause(
        id="STAGE-11",
        family="STAGE",
        title="Extras and attachments read back, where offered",
        promise=(
            "A store that declares `read-back` offers `fetch_extras(staging_keys)` and "
            "`fetch_attachments(staging_key)` on its source. `fetch_extras` answers, for each "
            "key in the order asked (repeats included), the extras staged with that call "
            "exactly (`None` for a call staged without); `fetch_attachments` answers the "
            "mapping of every attachment staged with the call, each value exactly as staged, "
            "bytes and text told apart (`{}` for a call staged without). Both raise `KeyError` "
            "for a key that holds no call. Without the declaration the clause is not claimed."
        ),
        why=(
            "Gym commits to a call's extras by digest only, and never reads attachments: the "
            "processed media of a multimodal turn, or routed experts kept as extras, reach the "
            "trainer only through the store. A store that acks them and keeps the record alone "
            "loses them silently, and the trainer rebuilds a turn without its images."
        ),
        how_broken=(
            "Attachments accepted as a keyword and never written; extras left out of the row "
            "and so never stored; a JSON round trip that turns bytes into text or `-0.0` into "
            "`0`; answers sorted or de-duplicated; `None` or `{}` for a key that holds nothing."
        ),
        hazards=(
            "Calls with nested extras (`-0.0`, booleans, unicode), with none, and a child's; "
            "attachments of bytes and text, empty and 200 KB, with names holding `/` and "
            "unicode; read back by a source built afterwards, in shuffled order with repeats; "
            "a key that holds nothing, alone and among staged ones."
        ),
        checked_by=KIT,
    ),
)
"""Every contract clause, in catalog order."""

_BY_ID = {found.id: found for found in CLAUSES}
_POSITION = {found.id: index for index, found in enumerate(CLAUSES)}

KIT_FAMILIES: tuple[str, ...] = tuple(
    family
    for family in FAMILY_TITLES
    if any(found.family == family and found.checked_by == KIT for found in CLAUSES)
)
"""The families with a clause the kit checks, in catalog order: one kit test function each."""


def families_of(contract: str) -> tuple[str, ...]:
    """The families of :data:`KIT_FAMILIES` that belong to ``contract``, in catalog order."""
    return tuple(family for family in KIT_FAMILIES if contract_of(family) == contract)


def position(clause_id: str) -> int:
    """Return where the clause stands in catalog order; an unknown id sorts after every clause."""
    return _POSITION.get(clause_id, len(CLAUSES))


def clause(clause_id: str) -> Clause:
    """Return the clause with this exact id (``PUT-1``); raise KeyError naming an unknown one."""
    try:
        return _BY_ID[clause_id]
    except KeyError:
        close = difflib.get_close_matches(clause_id.upper(), list(_BY_ID), n=3)
        suggestion = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(
            f"no contract clause has the id {clause_id!r}{suggestion} "
            "(python -m conformance.clauses lists every id)"
        ) from None
