"""The conversations the LINEAGE checks capture and continue, and how a resolver's answer is read.

A :class:`Conversation` is one dialect's way of asking, answering with a tool call, and passing
the tool's result back (chat, Responses, Anthropic). :func:`captured` builds the entry of one
call stamped as a serving process stamps it (:func:`tokcap_spec.fingerprint.continuation_stamp`),
so what the checks expect follows from the fingerprint layout, not from any resolver.
:func:`read_answer` reads a resolution of any class, Gym's included.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance._kit import Endpoint, Kit, unexpected_error
from conformance._reading import entry_view
from conformance._violation import ExtensionMissing
from tokcap_spec.fingerprint import continuation_stamp, token_digest

__all__ = [
    "DIALECTS",
    "TOOL_ONLY",
    "Answer",
    "Call",
    "Conversation",
    "captured",
    "captured_delta",
    "no_room_for_the_stamp",
    "process_shared",
    "read_answer",
    "resolve",
]

Items = list[dict[str, Any]]


@dataclass(frozen=True)
class Conversation:
    """How one dialect writes a question, a model turn with a tool call, and a tool result."""

    name: str
    ask: Callable[[str], Items]
    answer: Callable[[str, str], Items]
    """The model's turn: some text and a call of the tool ``weather`` with this call id."""
    result: Callable[[str, str], Items]
    """The tool's output for that call id, as the harness sends it back."""
    echo: Callable[[Items], Items] = field(default=lambda items: items)
    """The model's turn as the harness echoes it in the next request."""


def _chat_answer(text: str, tool_id: str) -> Items:
    call = {"name": "weather", "arguments": json.dumps({"city": "Oslo", "day": text[:8]})}
    return [
        {
            "role": "assistant",
            "content": text,
            "tool_calls": [{"id": tool_id, "type": "function", "function": call}],
        }
    ]


def _reserialized(items: Items) -> Items:
    """Chat turns with their tool arguments written again, as many harnesses do."""
    echoed: Items = json.loads(json.dumps(items))
    for item in echoed:
        for call in item.get("tool_calls") or ():
            arguments = json.loads(call["function"]["arguments"])
            call["function"]["arguments"] = json.dumps(arguments, indent=1, sort_keys=True)
    return echoed


DIALECTS = (
    Conversation(
        "chat",
        lambda text: [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": text},
        ],
        _chat_answer,
        lambda tool_id, output: [{"role": "tool", "tool_call_id": tool_id, "content": output}],
        _reserialized,
    ),
    Conversation(
        "responses",
        lambda text: [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        ],
        lambda text, tool_id: [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "look it up"}]},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            },
            {
                "type": "function_call",
                "call_id": tool_id,
                "name": "weather",
                "arguments": json.dumps({"city": "Oslo"}),
            },
        ],
        lambda tool_id, output: [
            {"type": "function_call_output", "call_id": tool_id, "output": output}
        ],
    ),
    Conversation(
        "anthropic",
        lambda text: [{"role": "user", "content": [{"type": "text", "text": text}]}],
        lambda text, tool_id: [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": text},
                    {"type": "tool_use", "id": tool_id, "name": "weather", "input": {"c": 1}},
                ],
            }
        ],
        lambda tool_id, output: [
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": output}],
            }
        ],
    ),
)
"""The three request shapes a serving process meets."""

TOOL_ONLY = (
    Conversation(
        "chat-tool-only",
        DIALECTS[0].ask,
        lambda text, tool_id: [{**_chat_answer(text, tool_id)[0], "content": None}],
        DIALECTS[0].result,
        _reserialized,
    ),
    Conversation(
        "responses-tool-only",
        DIALECTS[1].ask,
        lambda text, tool_id: DIALECTS[1].answer(text, tool_id)[-1:],
        DIALECTS[1].result,
    ),
    Conversation(
        "anthropic-tool-only",
        DIALECTS[2].ask,
        lambda text, tool_id: [
            {"role": "assistant", "content": DIALECTS[2].answer(text, tool_id)[0]["content"][1:]}
        ],
        DIALECTS[2].result,
    ),
)
"""The same dialects with model turns that are a tool call alone: no text, no assistant message
in Responses, no text block in Anthropic."""


@dataclass(frozen=True)
class Call:
    """One captured call: the entry put, the request it answered and its own answer."""

    entry: Any
    request: Items
    answer: Items
    whole: tuple[int, ...] | None = None
    """The call's whole sequence when its entry stores a delta prompt; ``None`` otherwise."""

    @property
    def call_id(self) -> str:
        return entry_view(self.entry).model_call_id

    @property
    def cumulative(self) -> tuple[int, ...]:
        """The parent tokens a continuation of this call starts with: prompt, then generation
        (a delta entry's parent sequence first)."""
        if self.whole is not None:
            return self.whole
        fields = entry_view(self.entry).fields
        return (*fields["prompt_token_ids"], *fields["generation_token_ids"])


def captured(
    kit: Kit,
    rollout_id: str,
    request: Items,
    answer: Items,
    *,
    call_id: str | None = None,
    size: int | None = None,
    **stamp: Any,
) -> Call:
    """The entry of a call that answered ``request`` with ``answer``, stamped for lineage.

    ``stamp`` replaces stamp fields, to make an entry a resolver must not take as a parent.
    """
    fields = {"output_items": answer, **continuation_stamp(request, answer), **stamp}
    try:
        entry = kit.entries.entry(
            rollout_id, call_id, prompt_len=size, generation_len=size, **fields
        )
    except (TypeError, ValueError) as exc:
        raise no_room_for_the_stamp(kit, exc) from None
    return Call(entry, request, answer)


def no_room_for_the_stamp(kit: Kit, exc: Exception) -> ExtensionMissing:
    """Why LINEAGE is not judged: the run's entry class refused the lineage stamp."""
    return ExtensionMissing(
        f"the entry class {kit.settings.entry_class} cannot carry the lineage stamp "
        f"({type(exc).__name__}); judge lineage with a record class that keeps extra "
        "fields, such as tokcap_spec.records:TokenEntry or NeMo Gym's TokenEntry"
    )


def captured_delta(kit: Kit, parent: Call, request: Items, answer: Items) -> Call:
    """A call continuing ``parent``, stored as NeMo Gym stores it under ``delta_records``.

    Its prompt holds only what follows the parent's whole sequence (``prompt_is_delta``), with
    ``parent_call_id``, a resolved ``parent_resolution``, and ``cum_len`` and ``digest`` of the
    whole sequence: a resolver rebuilds that sequence through the parent chain.
    """
    rollout = entry_view(parent.entry).rollout_id
    plain = captured(
        kit,
        rollout,
        request,
        answer,
        prompt_is_delta=True,
        parent_call_id=parent.call_id,
        parent_resolution="resolved",
    )
    fields = dict(entry_view(plain.entry).fields)
    whole = (*parent.cumulative, *fields["prompt_token_ids"], *fields["generation_token_ids"])
    entry = kit.entries.build(**{**fields, "cum_len": len(whole), "digest": token_digest(whole)})
    return Call(entry, request, answer, whole)


@dataclass(frozen=True)
class Answer:
    """A resolution as the kit reads it."""

    status: str
    call_id: str | None = None
    tokens: tuple[int, ...] | None = None
    reason: str = ""
    problem: str = ""
    """Why the answer has no form a caller can read, or ``""``."""

    def describe(self) -> str:
        if self.problem:
            return self.problem
        if self.call_id is None:
            return f"{self.status}" + (f" ({self.reason})" if self.reason else "")
        tokens = "" if self.tokens is None else f" with {len(self.tokens)} tokens"
        return f"{self.status} to call {self.call_id!r}{tokens}"


_STATUSES = ("root", "resolved", "unresolved")


def read_answer(resolution: object) -> Answer:
    """Read a resolution's ``status``, ``match`` and ``reason``, whatever its class."""
    raw = getattr(resolution, "status", None)
    status = getattr(raw, "value", raw)
    if status not in _STATUSES:
        return Answer(
            "?", problem=f"a resolution whose status is {raw!r}, not one of {', '.join(_STATUSES)}"
        )
    reason = str(getattr(resolution, "reason", "") or "")
    match = getattr(resolution, "match", None)
    if match is None:
        if status == "resolved":
            return Answer(status, problem="a resolved answer with no match")
        return Answer(status, reason=reason)
    if status != "resolved":
        return Answer(status, problem=f"a {status} answer that carries a match")
    call_id = getattr(match, "model_call_id", None)
    tokens = getattr(match, "cumulative_token_ids", None)
    try:
        ids = tuple(int(token) for token in tokens)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return Answer(status, problem=f"a match whose cumulative_token_ids are {tokens!r}")
    if not isinstance(call_id, str):
        return Answer(status, problem=f"a match whose model_call_id is {call_id!r}")
    return Answer(status, call_id, ids, reason)


def resolve(kit: Kit, resolver: Endpoint, rollout_id: str, request: Items) -> Answer:
    """Ask ``resolver`` about ``request`` within the deadline; an error is the check's failure."""
    __tracebackhide__ = True
    try:
        resolution = resolver.resolve(rollout_id, json.loads(json.dumps(request)))
    except Exception as exc:
        raise unexpected_error(
            kit.blame(), f"resolve of {rollout_id} ({len(request)} items)", exc, kit
        ) from None
    return read_answer(resolution)


def process_shared(kit: Kit, resolver: Endpoint) -> bool:
    """``is_process_shared()``, which must answer a bool without being awaited (LINEAGE-1)."""
    with kit.watch.call(["is_process_shared"]):
        answer = resolver.raw.is_process_shared()
    if inspect.isawaitable(answer):
        if inspect.iscoroutine(answer):
            answer.close()
        kit.fail(
            clause="LINEAGE-1",
            expected="is_process_shared() to answer a bool",
            observed="it returned an awaitable",
            hint="declare is_process_shared with plain 'def': serving processes call it "
            "without await",
        )
    if not isinstance(answer, bool):
        kit.fail(
            clause="LINEAGE-1",
            expected="is_process_shared() to answer a bool",
            observed=f"it answered {type(answer).__name__}",
            hint="return True when resolvers in other processes see the same entries",
        )
    return answer
