"""Realistic and adversarial entries, drawn from a seeded random source.

Most checks need a few entries that look like production traffic (thousands of token ids,
log probs near zero) and carry the values transports get wrong: ``-inf`` and ``-0.0`` log
probs, routed experts, unicode items, unknown extra fields. The same seed gives the same
entries, so a failure replays.
"""

from __future__ import annotations

import importlib
import random
from typing import Any

from tokcap_spec.records import TokenEntry

__all__ = ["ODD_CALL_IDS", "EntryClassError", "EntryFactory", "load_entry_class"]

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
"""``model_call_id`` strings a transport must keep exactly (PUT-6)."""


class EntryClassError(ValueError):
    """The ``--tokcap-entry-class`` target cannot build the record's entries."""


def load_entry_class(target: str) -> type[Any]:
    """Import ``module.path:ClassName`` and prove it builds an entry from the record's fields."""
    module_name, _, name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise EntryClassError(
            f"module {module_name!r} cannot be imported ({type(exc).__name__}); install it or "
            "fix the module path"
        ) from None
    found = getattr(module, name, None)
    if not isinstance(found, type):
        raise EntryClassError(f"module {module_name!r} has no class {name!r}")
    sample = _PROBE_FIELDS
    try:
        found(**sample)
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


class EntryFactory:
    """Builds valid :class:`TokenEntry` values from one ``random.Random``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._calls = 0

    def call_id(self) -> str:
        """Return a new call id, sometimes an odd one."""
        self._calls += 1
        if self.rng.random() < 0.3:
            return f"{self.rng.choice(ODD_CALL_IDS)}#{self._calls}"
        return f"call-{self._calls}"

    def log_probs(self, count: int) -> list[float]:
        """Return ``count`` log probs with ``-inf`` and ``-0.0`` among them when count >= 2."""
        values = [-self.rng.expovariate(2.0) for _ in range(count)]
        if count >= 2:
            values[self.rng.randrange(count)] = float("-inf")
            values[self.rng.randrange(count)] = -0.0
        return values

    def entry(
        self,
        rollout_id: str,
        model_call_id: str | None = None,
        *,
        prompt_len: int | None = None,
        generation_len: int | None = None,
        **overrides: Any,
    ) -> TokenEntry:
        """Return a realistic entry; ``overrides`` replace any field, extra fields included."""
        rng = self.rng
        prompt_len = rng.randint(1, 512) if prompt_len is None else prompt_len
        generation_len = rng.randint(1, 128) if generation_len is None else generation_len
        items: list[dict[str, Any]] = [
            {"type": "message", "role": "assistant", "content": rng.choice(_TEXTS)},
        ]
        if rng.random() < 0.5:
            items.append({"type": "function_call", "name": "tool", "arguments": '{"q": "ü"}'})
        fields: dict[str, Any] = {
            "rollout_id": rollout_id,
            "model_call_id": model_call_id or self.call_id(),
            "model": rng.choice(("policy", "policy-🧪", "org/model-7b")),
            "prompt_token_ids": [rng.randrange(2**31) for _ in range(prompt_len)],
            "generation_token_ids": [rng.randrange(2**31) for _ in range(generation_len)],
            "generation_log_probs": self.log_probs(generation_len),
            "routed_experts": (
                [[rng.randrange(64) for _ in range(2)] for _ in range(generation_len)]
                if rng.random() < 0.5
                else None
            ),
            "output_items": items,
            "token_item_index": 0,
            "created_at": 1.7e9 + rng.random() * 1e6,
            "x_extra_field": {"note": rng.choice(_TEXTS), "n": rng.randrange(1000)},
        }
        fields.update(overrides)
        return TokenEntry(**fields)

    def variant(self, entry: TokenEntry) -> TokenEntry:
        """Return an entry with the same ids and a different payload (for PUT-4)."""
        data = entry.model_dump()
        data["generation_token_ids"] = [*data["generation_token_ids"], 7]
        data["generation_log_probs"] = [*data["generation_log_probs"], -0.5]
        return TokenEntry(**data)
