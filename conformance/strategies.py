"""Hypothesis strategies for token-capture values, public so frameworks can reuse them."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tokcap_spec.records import MAX_TOKEN_ID, TokenEntry

__all__ = [
    "json_values",
    "log_probs",
    "model_call_ids",
    "token_entries",
    "token_entry_fields",
    "token_ids",
]

token_ids = st.integers(min_value=0, max_value=MAX_TOKEN_ID)
"""Valid token ids, edges included."""

log_probs = st.one_of(
    st.just(float("-inf")),
    st.just(-0.0),
    st.just(0.0),
    st.floats(max_value=0.0, allow_nan=False, allow_infinity=False, width=64),
    st.floats(min_value=-1e-300, max_value=-1e-320, allow_subnormal=True),
)
"""Log probs as models emit them, and the values stores mangle: -inf, -0.0, subnormals."""

model_call_ids = st.one_of(
    st.text(min_size=1, max_size=40),
    st.sampled_from(["a\nb", "a/b", "a\\b", " ", "🚀", "\x00nul", "x" * 500]),
)
"""Any non-empty string (PUT-6)."""

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)


def json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """JSON-compatible values: scalars, lists and string-keyed objects."""
    return st.recursive(
        json_scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
        ),
        max_leaves=max_leaves,
    )


@st.composite
def token_entry_fields(
    draw: st.DrawFn, rollout_id: str, model_call_id: st.SearchStrategy[str] | None = None
) -> dict[str, Any]:
    """The fields of valid entries of one rollout, large arrays and adversarial floats included."""
    generation = draw(st.lists(token_ids, max_size=64))
    prompt_size = draw(st.sampled_from([0, 1, 16, 2048]))
    items = draw(
        st.lists(st.dictionaries(st.text(max_size=8), json_values(4), max_size=3), max_size=3)
    )
    extras = draw(
        st.dictionaries(
            st.text(min_size=1, max_size=12).map(lambda key: f"x_{key}"), json_values(4), max_size=2
        )
    )
    return {
        "rollout_id": rollout_id,
        "model_call_id": draw(model_call_id if model_call_id is not None else model_call_ids),
        "model": draw(st.text(max_size=10)),
        "prompt_token_ids": [draw(token_ids) for _ in range(prompt_size)]
        if prompt_size < 64
        else list(range(prompt_size)),
        "generation_token_ids": generation,
        "generation_log_probs": draw(
            st.lists(log_probs, min_size=len(generation), max_size=len(generation))
        ),
        "routed_experts": draw(
            st.none() | st.lists(st.lists(st.integers(0, 255), max_size=4), max_size=8)
        ),
        "output_items": items,
        "token_item_index": draw(st.none() | st.integers(0, len(items) - 1)) if items else None,
        "created_at": draw(st.floats(min_value=0, max_value=4e9)),
        **extras,
    }


def token_entries(
    rollout_id: str, model_call_id: st.SearchStrategy[str] | None = None
) -> st.SearchStrategy[TokenEntry]:
    """Valid :class:`TokenEntry` values of one rollout (see :func:`token_entry_fields`)."""
    return token_entry_fields(rollout_id, model_call_id).map(lambda fields: TokenEntry(**fields))
