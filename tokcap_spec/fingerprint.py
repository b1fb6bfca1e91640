"""Request fingerprints: which captured call a continuation extends, and whether it verifies.

A serving process stamps each entry with three facts about the request that produced it
(:func:`continuation_stamp`), and a lineage resolver matches a later request against them. The
values are byte for byte those of NeMo Gym 0.7.0 (fingerprint version 2), so an entry stamped by
either resolves in the other:

- Every field is hashed as a one-byte tag, the length of its UTF-8 bytes as eight big-endian
  bytes, and the bytes, into a SHA-256 that starts with a domain string.
- The continuation fingerprint (:func:`assistant_fingerprint`) covers the model-authored items
  only (role ``assistant``, or a Responses ``function_call`` item): their content parts and
  their tool calls. It is ``""`` for a request with no such item, which is a root.
- The context digest (:func:`context_digest`) covers every item: its role or type, its content
  parts, its tool calls and its tool results. A resolver compares it over the items the parent's
  request had, so a rewritten or summarized history never verifies.
- The chat, Responses and Anthropic shapes of one turn hash alike. Content that is not text,
  tool arguments and tool output are compared as compact JSON with sorted keys
  (:func:`canonical_json`); arguments given as a JSON string are parsed first.

Request items are JSON values; anything else raises :class:`ValueError`, as does an item that is
not an object or content of a shape no dialect uses.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

__all__ = [
    "FINGERPRINT_VERSION",
    "TOKEN_DIGEST_VERSION",
    "assistant_fingerprint",
    "canonical_json",
    "canonical_tool_arguments",
    "context_digest",
    "continuation_stamp",
    "token_digest",
]

FINGERPRINT_VERSION: Final = 2
"""The fingerprint layout computed here; a resolver ignores entries stamped with another."""

TOKEN_DIGEST_VERSION: Final = 1
"""The layout of :func:`token_digest`."""

_CONTINUATION: Final = b"nemo-gym-lineage"
_CONTEXT: Final = b"nemo-gym-lineage-context"
_TOKENS: Final = b"nemo-gym-tokens"
_TEXT_BLOCKS: Final = frozenset({"", "text", "input_text", "output_text"})
_TOOL_BLOCKS: Final = frozenset({"tool_use", "tool_result"})
_INT_RANGE: Final = range(-(2**63), 2**64)


class _Fields:
    """A SHA-256 of tagged, length-delimited UTF-8 fields after a domain string."""

    def __init__(self, domain: bytes) -> None:
        self._hash = hashlib.sha256(domain)

    def add(self, tag: int, *texts: str) -> None:
        """Add each of ``texts`` under the tags ``tag``, ``tag + 1``, ... in turn."""
        for offset, text in enumerate(texts):
            data = text.encode("utf-8")
            self._hash.update(bytes((tag + offset,)) + len(data).to_bytes(8, "big") + data)

    def add_turn(self, tag: int, item: Mapping[str, Any]) -> None:
        """Add an item's content parts from ``tag`` on, then its tool calls after them."""
        for part in _content_parts(item.get("content")):
            self.add(tag, *part)
        for call in _tool_calls(item):
            self.add(tag + 2, *call)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def _objects(items: Iterable[object] | None) -> Iterable[Mapping[str, Any]]:
    for item in items or ():
        if not isinstance(item, Mapping):
            raise ValueError(f"request item is not an object: {type(item).__name__}")
        yield item


def _model_authored(item: Mapping[str, Any]) -> bool:
    # Reasoning items are left out on purpose: harnesses differ in whether they echo them.
    return item.get("role") == "assistant" or item.get("type") == "function_call"


def _text(value: object) -> str:
    """A field as text: absent, None, empty and False all read as ``""``."""
    return str(value) if value else ""


def assistant_fingerprint(items: Sequence[object] | None) -> str:
    """The continuation fingerprint of ``items``: ``""`` when none is model-authored."""
    fields = _Fields(_CONTINUATION)
    authored = 0
    for item in _objects(items):
        if not _model_authored(item):
            continue
        authored += 1
        fields.add_turn(0, item)
    return fields.hexdigest() if authored else ""


def context_digest(items: Sequence[object] | None) -> str:
    """The digest of every item of ``items``, model-authored or not, tool results included."""
    fields = _Fields(_CONTEXT)
    for item in _objects(items):
        fields.add(0, _text(item.get("role")) or _text(item.get("type")))
        fields.add_turn(1, item)
        for result in _tool_results(item):
            fields.add(6, *result)
    return fields.hexdigest()


def continuation_stamp(
    request_items: Sequence[object], output_items: Sequence[object]
) -> dict[str, Any]:
    """The lineage fields an entry carries once its call answered ``request_items``.

    ``output_items`` are the items of the call's own answer. The keys are the entry fields a
    resolver reads: ``continuation_fingerprint``, ``continuation_context_len``,
    ``continuation_context_digest`` and ``fingerprint_version``.
    """
    return {
        "continuation_fingerprint": assistant_fingerprint([*request_items, *output_items]),
        "continuation_context_len": len(request_items),
        "continuation_context_digest": context_digest(request_items),
        "fingerprint_version": FINGERPRINT_VERSION,
    }


def _content_parts(content: object) -> list[tuple[str, str]]:
    """``(kind, payload)`` for each content part; tool blocks are read by the two below."""
    if content is None:
        return []
    if isinstance(content, str):
        return [("text", content)] if content else []
    if not isinstance(content, list):
        raise ValueError(f"unsupported message content: {type(content).__name__}")
    parts = []
    for block in content:
        if isinstance(block, str):
            if block:
                parts.append(("text", block))
        elif not isinstance(block, Mapping):
            raise ValueError(f"unsupported content block: {type(block).__name__}")
        else:
            kind = _text(block.get("type"))
            text = block.get("text")
            if kind in _TOOL_BLOCKS:
                continue
            if kind in _TEXT_BLOCKS and isinstance(text, str):
                if text:
                    parts.append(("text", text))
            elif not kind:
                raise ValueError("content block has no supported type")
            else:
                parts.append((kind, canonical_json(block)))
    return parts


def _tool_calls(item: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(call id, name, canonical arguments)`` for each tool call, in every dialect."""
    calls = []
    if item.get("type") == "function_call":  # a Responses item is itself the call
        name = str(item.get("name", ""))
        if item.get("namespace"):
            name = f"{item['namespace']}__{name}"
        call_id = _text(item.get("call_id")) or _text(item.get("id"))
        calls.append((call_id, name, canonical_tool_arguments(item.get("arguments"))))
    content = item.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "tool_use":
                arguments = canonical_tool_arguments(block.get("input"))
                calls.append((_text(block.get("id")), str(block.get("name", "")), arguments))
    for call in item.get("tool_calls") or ():
        call = call or {}
        function = call.get("function") or {}
        arguments = canonical_tool_arguments(function.get("arguments"))
        calls.append((_text(call.get("id")), str(function.get("name", "")), arguments))
    return calls


def _tool_results(item: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(call id, output)`` for each tool result, in every dialect."""
    results = []
    if item.get("type") == "function_call_output":
        call_id = _text(item.get("call_id")) or _text(item.get("id"))
        results.append((call_id, _as_text(item.get("output"))))
    elif item.get("role") == "tool":
        results.append((_text(item.get("tool_call_id")), _as_text(item.get("content"))))
    content = item.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                call_id = _text(block.get("tool_use_id")) or _text(block.get("id"))
                results.append((call_id, _as_text(block.get("content"))))
    return results


def _as_text(value: object) -> str:
    return value if isinstance(value, str) else canonical_json(value)


def canonical_tool_arguments(value: object) -> str:
    """Tool-call arguments as compared: a JSON string parsed and re-encoded, else as is.

    ``None`` is ``""``; a string that is not JSON is compared with its ends stripped.
    """
    if value is None:
        return ""
    if not isinstance(value, str):
        return canonical_json(value)
    try:
        parsed = json.loads(value)
    except ValueError:
        return value.strip()
    return canonical_json(parsed)


def canonical_json(value: object) -> str:
    """``value`` as compact JSON with sorted keys, unescaped non-ASCII, NaN and infinities null.

    Integers outside the 64-bit range, keys that are not strings, strings that are not valid
    UTF-8 and values JSON has no form for raise :class:`ValueError`.
    """
    out: list[str] = []
    _encode(value, out)
    return "".join(out)


_STRING: Final = json.JSONEncoder(ensure_ascii=False)


def _encode(value: object, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True or value is False:
        out.append("true" if value else "false")
    elif isinstance(value, str):
        _check_utf8(value)
        out.append(_STRING.encode(value))
    elif isinstance(value, int):
        if value not in _INT_RANGE:
            raise ValueError("unsupported prompt content: an integer beyond 64 bits")
        out.append(str(int(value)))
    elif isinstance(value, float):
        out.append(_float(value))
    elif isinstance(value, Mapping):
        keys = list(value)
        if not all(isinstance(key, str) for key in keys):
            raise ValueError("unsupported prompt content: an object key that is not a string")
        out.append("{")
        for number, key in enumerate(sorted(keys)):
            out.append("," if number else "")
            _encode(key, out)
            out.append(":")
            _encode(value[key], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for number, each in enumerate(value):
            out.append("," if number else "")
            _encode(each, out)
        out.append("]")
    else:
        raise ValueError(f"unsupported prompt content: {type(value).__name__}")


def _check_utf8(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("unsupported prompt content: a string that is not valid UTF-8") from None


def _float(value: float) -> str:
    """The shortest digits that read back as ``value``, written fixed from 1e-5 to below 1e16."""
    if not math.isfinite(value):
        return "null"
    text = repr(value)
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    power = int(exponent)
    if power == -5:  # repr turns to exponents one power of ten sooner than this layout does
        sign, digits = ("-", mantissa[1:]) if mantissa.startswith("-") else ("", mantissa)
        return f"{sign}0.0000{digits.replace('.', '')}"
    return f"{mantissa}e{'+' if power > 0 else '-'}{abs(power)}"


def token_digest(token_ids: Sequence[int]) -> str:
    """The digest of an exact token sequence, as an entry's ``digest`` field holds it.

    SHA-256 of a domain string, a version byte, the count as eight big-endian bytes and each id
    as eight big-endian bytes; an empty sequence hashes the domain alone. An id outside 0 to
    ``2**64 - 1`` raises :class:`ValueError`.
    """
    if not token_ids:
        return hashlib.sha256(_TOKENS).hexdigest()
    try:
        body = struct.pack(
            f">BQ{len(token_ids)}Q", TOKEN_DIGEST_VERSION, len(token_ids), *token_ids
        )
    except struct.error:
        raise ValueError("token ids must be whole numbers from 0 to 2**64 - 1") from None
    return hashlib.sha256(_TOKENS + body).hexdigest()
