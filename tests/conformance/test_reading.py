"""The kit reads an implementation's objects through the contract's names alone."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from conformance._reading import (
    RECORD_FIELDS,
    Unreadable,
    canonical,
    entry_view,
    read_snapshot,
    record_fields,
)
from tokcap_spec.records import TokenEntry

FIELDS: dict[str, Any] = {
    "schema_version": 1,
    "rollout_id": "r-1",
    "model_call_id": "call-1",
    "model": "policy",
    "prompt_token_ids": [1, 2, 3],
    "generation_token_ids": [4, 5],
    "generation_log_probs": [float("-inf"), -0.0],
    "routed_experts": None,
    "output_items": [{"type": "message", "content": "ü"}],
    "token_item_index": 0,
    "created_at": 1.5,
}


class OwnModel(BaseModel):
    """A record model of another framework, extras kept."""

    model_config = ConfigDict(extra="allow")
    schema_version: int
    rollout_id: str
    model_call_id: str
    model: str
    prompt_token_ids: list[int]
    generation_token_ids: list[int]
    generation_log_probs: list[float]
    routed_experts: list[Any] | None
    output_items: list[dict[str, Any]]
    token_item_index: int | None
    created_at: float


@dataclasses.dataclass(frozen=True)
class OwnDataclass:
    """A record dataclass with tuples where tokcap has lists."""

    schema_version: int
    rollout_id: str
    model_call_id: str
    model: str
    prompt_token_ids: tuple[int, ...]
    generation_token_ids: tuple[int, ...]
    generation_log_probs: tuple[float, ...]
    routed_experts: Any
    output_items: tuple[dict[str, Any], ...]
    token_item_index: int | None
    created_at: float


def _as_dataclass(fields: dict[str, Any]) -> OwnDataclass:
    tuples = ("prompt_token_ids", "generation_token_ids", "generation_log_probs", "output_items")
    return OwnDataclass(**{k: tuple(v) if k in tuples else v for k, v in fields.items()})


SHAPES = {
    "tokcap": lambda f: TokenEntry(**f),
    "pydantic": lambda f: OwnModel(**f),
    "dataclass": _as_dataclass,
    "mapping": dict,
    "attributes": lambda f: SimpleNamespace(**f),
}


class TestRecordFields:
    @pytest.mark.parametrize("shape", sorted(SHAPES))
    def test_every_shape_reads_to_the_same_canonical_form(self, shape: str) -> None:
        """A record read from any shape the contract allows has tokcap's canonical form."""
        assert entry_view(SHAPES[shape](FIELDS)).payload == entry_view(TokenEntry(**FIELDS)).payload

    @pytest.mark.parametrize("shape", ["tokcap", "pydantic", "mapping", "attributes"])
    def test_extra_fields_are_read_when_exposed(self, shape: str) -> None:
        """Unknown extra fields are part of what is compared."""
        read = record_fields(SHAPES[shape]({**FIELDS, "x_extra": {"n": 1}}))
        assert read["x_extra"] == {"n": 1}

    def test_an_object_without_ids_is_unreadable(self) -> None:
        """An entry with no model_call_id is refused, naming its type, as a SHAPE-1 problem."""
        with pytest.raises(Unreadable, match="SimpleNamespace has no model_call_id") as caught:
            record_fields(SimpleNamespace(rollout_id="r"))
        assert caught.value.clause == "SHAPE-1"

    def test_the_field_list_is_the_records(self) -> None:
        """The fields read are REC-1's, in order."""
        assert RECORD_FIELDS[:3] == ("schema_version", "rollout_id", "model_call_id")
        assert len(RECORD_FIELDS) == 11


class TestCanonical:
    def test_floats_compare_bit_for_bit(self) -> None:
        """-0.0 and 0.0, -inf and a huge negative, 1 and 1.0 all differ."""
        assert canonical({"v": -0.0}) != canonical({"v": 0.0})
        assert canonical({"v": -math.inf}) != canonical({"v": -3.4e38})
        assert canonical({"v": 1}) != canonical({"v": 1.0})
        assert canonical({"v": 0.1 + 0.2}) != canonical({"v": 0.3})

    def test_tuples_read_as_lists_and_keys_are_sorted(self) -> None:
        """Container types and key order carry no meaning."""
        assert canonical({"b": (1, 2), "a": 1}) == canonical({"a": 1, "b": [1, 2]})


@dataclasses.dataclass
class Snap:
    rollout_id: Any = "r-1"
    entries: Any = ()
    incomplete: Any = False
    snapshot_id: Any = "s"
    version: Any = 1


class TestReadSnapshot:
    def test_a_foreign_snapshot_with_dict_entries_reads(self) -> None:
        """Any object with the five attributes reads, whatever its entries' shape."""
        view = read_snapshot(Snap(entries=[dict(FIELDS)]))
        assert [entry.model_call_id for entry in view.entries] == ["call-1"]
        assert view.version == 1

    @pytest.mark.parametrize(
        ("snapshot", "clause", "names"),
        [
            (SimpleNamespace(entries=()), "SHAPE-1", "without 'rollout_id'"),
            (Snap(entries=None), "SHAPE-1", "entries is NoneType"),
            (Snap(entries="abc"), "SHAPE-1", "entries is str"),
            (Snap(version="3"), "FREEZE-1", "version is str '3'"),
            (Snap(version=True), "FREEZE-1", "version is bool"),
            (Snap(snapshot_id=""), "FREEZE-1", "snapshot_id is ''"),
            (Snap(incomplete="no"), "FREEZE-1", "incomplete is str"),
        ],
    )
    def test_a_wrong_shape_names_what_came_back(
        self, snapshot: object, clause: str, names: str
    ) -> None:
        """A snapshot of the wrong shape is refused under its clause, saying what it held."""
        with pytest.raises(Unreadable) as caught:
            read_snapshot(snapshot)
        assert caught.value.clause == clause
        assert names in str(caught.value)
