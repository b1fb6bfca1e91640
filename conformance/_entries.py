"""The entries the kit puts: plain ones for most checks, hazardous ones for the checks owning them.

Most checks need entries that look like production traffic (hundreds of token ids, log probs
near zero, routed experts) and whose values every plausible transport keeps: log probs exact in
float32, whole-second timestamps, ASCII text, no extra fields, plain call ids. A store that
mangles one of the values transports get wrong (``-inf``, ``-0.0``, unicode, extra fields, odd
call ids) then fails only the clause that owns that value (PUT-2, PUT-6), not every check that
puts. Entries are built with the run's entry class (``--tokcap-entry-class``) by keyword from
the record's fields. The same seed gives the same entries, so a failure replays.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

from conformance._hazards import line_break_text
from conformance._reading import record_fields
from conformance._targets import Unresolved, resolve

__all__ = [
    "ODD_CALL_IDS",
    "EntryClassError",
    "EntryFactory",
    "load_entry_class",
]

ODD_CALL_IDS = (
    "call with spaces",
    "multi\nline\ncall",
    "slashes/and\\backslashes",
    "ünïcødé-呼び出し-🚀",
    "\"quoted\" 'call'",
    "tab\tand\rcarriage",
    "../../etc/passwd",
    "x" * 300,
)
"""``model_call_id`` strings a transport must keep exactly (PUT-6, EXT-BEGIN-1)."""

PATH_LIKE_CALL_IDS = (".hidden", ".", "..", "-dash", "~tilde", "*", "?", "[x]", "$HOME", "CON")
"""``model_call_id`` strings that mean something to a shell glob or a file system: a store
keeping an entry per file must still find them all (a listing that skips dot files, say)."""

LOOKALIKE_CALL_IDS = (
    "a/b",
    "a_b",
    "a-b",
    "a.b",
    "A/B",
    "\u00e9",
    "e\u0301",
    "x",
    "x ",
    "X",
    "\ufb01le",
    "file",
    "a\nb",
    "a\\nb",
    "a\tb",
    "a\\tb",
    "a%2Fb",
    "a%252Fb",
    "a\u2028b",
    "a\u2029b",
    "a\x85b",
    "a\rb",
    "a\r\nb",
)
"""Call ids a sanitizing, case-folding, normalizing or escaping key scheme would merge (PUT-6,
LINEAGE-2): separators, case, composed and decomposed accents, a trailing space, a ligature, and
characters an escaping writes as the very text another id holds (a newline and a backslash
followed by ``n``, ``/`` and ``%2F``) when it leaves its escape character unescaped, and the
line breaks a line reader splits at that a JSON writer leaves raw (U+2028, U+2029, U+0085)."""


class EntryClassError(ValueError):
    """The ``--tokcap-entry-class`` target cannot build the record's entries."""


def load_entry_class(target: str) -> type[Any]:
    """Import ``module.path:ClassName`` and prove it builds an entry from the record's fields."""
    try:
        found = resolve(target)
    except Unresolved as unresolved:
        if unresolved.cause is not None:
            raise EntryClassError(
                f"module {unresolved.module!r} cannot be imported "
                f"({type(unresolved.cause).__name__}); install it or fix the module path"
            ) from None
        found = None
    if not isinstance(found, type):
        module_name, _, name = target.partition(":")
        raise EntryClassError(f"module {module_name!r} has no class {name!r}")
    sample = _PROBE_FIELDS
    try:
        record_fields(found(**sample))
    except Exception as exc:
        raise EntryClassError(
            f"{target} cannot be built by keyword from the record's fields "
            f"({', '.join(sample)}): {type(exc).__name__}; pass a class whose constructor takes "
            "them, or leave the option out to use tokcap_spec.records:TokenEntry"
        ) from None
    return found


_PROBE_FIELDS: dict[str, Any] = {
    "rollout_id": "probe",
    "model_call_id": "probe-call",
    "model": "policy",
    "prompt_token_ids": [1, 2],
    "generation_token_ids": [3],
    "generation_log_probs": [-0.5],
    "routed_experts": None,
    "output_items": [{"type": "message", "role": "assistant", "content": "ok"}],
    "token_item_index": 0,
    "created_at": 1.7e9,
}


_TEXTS = ("plain answer", "ünïcødé ✓", "emoji 🚀🔥", "多言語テキスト", 'quote " and \\ slash', "")

Build = Callable[..., Any]


class EntryFactory:
    """Builds entries with one entry class from one ``random.Random``."""

    def __init__(self, rng: random.Random, build: Build | None = None) -> None:
        self.rng = rng
        self.build: Build = build if build is not None else _default_class()
        self._calls = 0

    def call_id(self) -> str:
        """Return a new plain call id."""
        self._calls += 1
        return f"call-{self._calls}"

    def plain_fields(
        self,
        rollout_id: str,
        model_call_id: str | None = None,
        *,
        prompt_len: int | None = None,
        generation_len: int | None = None,
    ) -> dict[str, Any]:
        """Return the fields of a realistic entry whose values every transport keeps."""
        rng = self.rng
        prompt_len = rng.randint(16, 512) if prompt_len is None else prompt_len
        generation_len = rng.randint(4, 128) if generation_len is None else generation_len
        return {
            "rollout_id": rollout_id,
            "model_call_id": model_call_id or self.call_id(),
            "model": "policy",
            "prompt_token_ids": [rng.randrange(1, 2**17) for _ in range(prompt_len)],
            "generation_token_ids": [rng.randrange(1, 2**17) for _ in range(generation_len)],
            # Multiples of 1/256 near zero are exact in float32 and in decimal.
            "generation_log_probs": [-rng.randrange(1, 2048) / 256 for _ in range(generation_len)],
            "routed_experts": [
                [rng.randrange(64), rng.randrange(64)] for _ in range(generation_len)
            ],
            "output_items": [{"type": "message", "role": "assistant", "content": "plain answer"}],
            "token_item_index": 0,
            "created_at": float(1_700_000_000 + rng.randrange(1_000_000)),
        }

    def entry(
        self,
        rollout_id: str,
        model_call_id: str | None = None,
        *,
        prompt_len: int | None = None,
        generation_len: int | None = None,
        **overrides: Any,
    ) -> Any:
        """Return a plain, realistic entry; ``overrides`` replace any field."""
        fields = self.plain_fields(
            rollout_id, model_call_id, prompt_len=prompt_len, generation_len=generation_len
        )
        fields.update(overrides)
        return self.build(**fields)

    def hazardous(
        self,
        rollout_id: str,
        model_call_id: str | None = None,
        *,
        prompt_len: int | None = None,
        generation_len: int | None = None,
    ) -> Any:
        """Return an entry carrying what transports get wrong (PUT-2).

        ``-inf`` and ``-0.0`` log probs, full 64-bit floats, the edges of the token id range,
        unicode text, routed experts or None, fractional timestamps and unknown extra fields,
        one holding every line break ``str.splitlines`` knows.
        """
        rng = self.rng
        fields = self.plain_fields(
            rollout_id, model_call_id, prompt_len=prompt_len, generation_len=generation_len
        )
        count = len(fields["generation_token_ids"])
        values = [-rng.expovariate(2.0) for _ in range(count)]
        if count >= 2:
            where = rng.randrange(count)
            values[where], values[(where + 1) % count] = float("-inf"), -0.0
        prompt = fields["prompt_token_ids"]
        if len(prompt) >= 2:
            prompt[0], prompt[-1] = 0, 2**31 - 1
        items: list[dict[str, Any]] = [
            {"type": "message", "role": "assistant", "content": rng.choice(_TEXTS)},
            {"type": "function_call", "name": "tool", "arguments": '{"q": "ü"}'},
        ]
        fields.update(
            model=rng.choice(("policy-🧪", "org/model-7b")),
            generation_log_probs=values,
            routed_experts=fields["routed_experts"] if rng.random() < 0.5 else None,
            output_items=items,
            token_item_index=1,
            created_at=1.7e9 + rng.random() * 1e6,
            x_extra_field={
                "note": rng.choice(_TEXTS),
                "n": rng.randrange(1000),
                "lines": line_break_text(),
            },
        )
        return self.build(**fields)

    def field_variants(self, rollout_ids: Callable[[], str]) -> Iterator[tuple[str, Any, Any]]:
        """Yield ``(what differs, first, second)``: two entries of one call, one field apart.

        Each pair is in a rollout of its own, named by ``rollout_ids()``.

        Every field of the record is varied alone, the token arrays by one element, a log
        prob by its sign of zero, an extra field by its presence (where the entry class keeps
        extras). A store that compares only some fields keeps one of them as clean (PUT-4).
        """
        rng = self.rng
        for name, change in _FIELD_CHANGES:
            fields = self.plain_fields(rollout_ids(), prompt_len=rng.randint(16, 64))
            fields["generation_log_probs"][0] = 0.0
            other = {key: _copied(value) for key, value in fields.items()}
            what = change(other, rng)
            try:
                yield f"{name} ({what})", self.build(**fields), self.build(**other)
            except (TypeError, ValueError):
                continue  # The entry class refuses this field (extras, say): nothing to vary.

    def variant(self, entry: Any) -> Any:
        """Return an entry with the same ids and a different payload (for PUT-4)."""
        data = record_fields(entry)
        data["generation_token_ids"] = [*data["generation_token_ids"], 7]
        data["generation_log_probs"] = [*data["generation_log_probs"], -0.5]
        if data.get("routed_experts") is not None:
            data["routed_experts"] = [*data["routed_experts"], [1, 2]]
        return self.build(**data)


def _copied(value: Any) -> Any:
    if isinstance(value, list):
        return [_copied(each) for each in value]
    if isinstance(value, dict):
        return {key: _copied(each) for key, each in value.items()}
    return value


def _nudge_int(values: list[int], rng: random.Random) -> str:
    where = rng.randrange(len(values))
    values[where] = values[where] + 1 if values[where] < 2**17 else values[where] - 1
    return f"one id at {where}"


def _change_prompt(fields: dict[str, Any], rng: random.Random) -> str:
    return _nudge_int(fields["prompt_token_ids"], rng)


def _change_generation(fields: dict[str, Any], rng: random.Random) -> str:
    return _nudge_int(fields["generation_token_ids"], rng)


def _change_log_prob(fields: dict[str, Any], rng: random.Random) -> str:
    values = fields["generation_log_probs"]
    where = rng.randrange(1, len(values)) if len(values) > 1 else 0
    values[where] -= 1 / 256
    return f"one log prob at {where}"


def _change_zero_sign(fields: dict[str, Any], rng: random.Random) -> str:
    fields["generation_log_probs"][0] = -0.0
    return "0.0 against -0.0"


def _change_experts(fields: dict[str, Any], rng: random.Random) -> str:
    experts = fields["routed_experts"]
    where = rng.randrange(len(experts))
    experts[where] = [experts[where][0], (experts[where][1] + 1) % 64]
    return f"one expert at {where}"


def _change_items(fields: dict[str, Any], rng: random.Random) -> str:
    fields["output_items"][0]["content"] = "another answer"
    return "the message text"


def _change_item_index(fields: dict[str, Any], rng: random.Random) -> str:
    fields["token_item_index"] = None
    return "0 against None"


def _change_model(fields: dict[str, Any], rng: random.Random) -> str:
    fields["model"] = "policy-next"
    return "another model name"


def _change_created(fields: dict[str, Any], rng: random.Random) -> str:
    fields["created_at"] += 1.0
    return "one second later"


def _change_extra(fields: dict[str, Any], rng: random.Random) -> str:
    fields["x_trace"] = {"attempt": 2}
    return "an extra field added"


_FIELD_CHANGES: tuple[tuple[str, Callable[[dict[str, Any], random.Random], str]], ...] = (
    ("prompt_token_ids", _change_prompt),
    ("generation_token_ids", _change_generation),
    ("generation_log_probs", _change_log_prob),
    ("generation_log_probs", _change_zero_sign),
    ("routed_experts", _change_experts),
    ("output_items", _change_items),
    ("token_item_index", _change_item_index),
    ("model", _change_model),
    ("created_at", _change_created),
    ("extra fields", _change_extra),
)
"""Each way two entries of one call can differ in a single field (PUT-4)."""


def _default_class() -> Build:
    from tokcap_spec.records import TokenEntry

    return TokenEntry
