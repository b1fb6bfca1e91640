"""Every reference sink takes any record object with the contract's fields, as Gym's own."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import pytest
from conftest import Open
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tokcap_spec.errors import InvalidEntryError
from tokcap_spec.protocols import TokenCaptureSnapshot
from tokcap_spec.records import TokenEntry, as_token_entry


class gym:  # lower case, so the class path reads like the module path of Gym's record
    class TokenEntry(BaseModel):
        """A record class of its own with the REC-1 fields, as NeMo Gym's capture path has."""

        model_config = ConfigDict(extra="allow")

        schema_version: int = 1
        rollout_id: str
        model_call_id: str
        model: str = ""
        prompt_token_ids: list[int] = Field(default_factory=list)
        generation_token_ids: list[int] = Field(default_factory=list)
        generation_log_probs: list[float] = Field(default_factory=list)
        routed_experts: Any | None = None
        output_items: list[dict[str, Any]] = Field(default_factory=list)
        token_item_index: int | None = None
        created_at: float = 0.0


@dataclasses.dataclass(frozen=True)
class DataclassEntry:
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
    tenant: str


class PlainEntry:
    def __init__(self, fields: dict[str, Any]) -> None:
        self.__dict__.update(fields)
        self._cache = "private state is not a field"


FIELDS: dict[str, Any] = {
    "rollout_id": "r",
    "model": "mödel",
    "prompt_token_ids": [1, 2**31 - 1],
    "generation_token_ids": [3, 4],
    "generation_log_probs": [float("-inf"), -0.0],
    "routed_experts": [[0, 1], [2, 3]],
    "output_items": [{"text": "ünï 🚀"}],
    "token_item_index": 0,
    "created_at": 1.25,
    "tenant": "team-a",
}

KINDS: dict[str, Callable[[dict[str, Any]], object]] = {
    "gym-model": lambda fields: gym.TokenEntry(**fields),
    "dataclass": lambda fields: DataclassEntry(**fields),
    "mapping": dict,
    "attributes": PlainEntry,
}


def fields_of(call: str) -> dict[str, Any]:
    return {**FIELDS, "model_call_id": call}


@asynccontextmanager
async def opened(open_store: Open) -> AsyncIterator[Any]:
    store = open_store()
    try:
        yield store
    finally:
        await store.close()


def put_and_freeze(open_store: Open, *records: object) -> TokenCaptureSnapshot:
    async def main() -> TokenCaptureSnapshot:
        async with opened(open_store) as sink:
            for record in records:
                await sink.put(record)
        async with opened(open_store) as source:
            return cast(TokenCaptureSnapshot, await source.freeze("r"))

    return asyncio.run(main())


class TestStoresTakeForeignRecords:
    @pytest.mark.parametrize("kind", sorted(KINDS))
    def test_a_foreign_record_round_trips_field_for_field(
        self, open_store: Open, kind: str
    ) -> None:
        """Each kind of record freezes back as tokcap's TokenEntry with the native bytes."""
        native = TokenEntry(**fields_of("c"))
        (back,) = put_and_freeze(open_store, KINDS[kind](fields_of("c"))).entries
        assert type(back) is TokenEntry
        assert back == native
        assert back.to_json_bytes() == native.to_json_bytes()
        assert math.isinf(back.generation_log_probs[0])
        assert struct.pack(">d", back.generation_log_probs[1]) == struct.pack(">d", -0.0)
        assert back.model_extra == {"tenant": "team-a"}

    @pytest.mark.parametrize("kind", sorted(KINDS))
    def test_a_native_reput_of_a_foreign_record_is_a_no_op(
        self, open_store: Open, kind: str
    ) -> None:
        """A native entry re-put after the same foreign record leaves one clean entry."""
        snapshot = put_and_freeze(
            open_store, KINDS[kind](fields_of("c")), TokenEntry(**fields_of("c"))
        )
        assert len(snapshot.entries) == 1
        assert not snapshot.incomplete
        assert snapshot.version == 1

    def test_a_record_without_the_fields_is_refused_by_class_path(self, open_store: Open) -> None:
        """A put of an object lacking required fields names its class path and those fields."""

        async def main() -> None:
            async with opened(open_store) as sink:
                with pytest.raises(
                    TypeError, match=rf"{__name__}\.PlainEntry\) without model_call_id"
                ):
                    await sink.put(PlainEntry({"rollout_id": "r"}))

        asyncio.run(main())

    def test_a_foreign_record_breaking_the_rules_is_refused_as_a_native_one(
        self, open_store: Open
    ) -> None:
        """A Gym record with a NaN log prob is refused as a native one, its cause attached."""
        bad = gym.TokenEntry(**{**fields_of("c"), "generation_log_probs": [0.0, math.nan]})

        async def main() -> None:
            async with opened(open_store) as sink:
                with pytest.raises(InvalidEntryError, match="log prob 1 is NaN") as caught:
                    await sink.put(bad)
                assert isinstance(caught.value.__cause__, ValidationError)

        asyncio.run(main())
        assert put_and_freeze(open_store).entries == ()


class TestAsTokenEntry:
    def test_a_token_entry_passes_through(self) -> None:
        """A native entry is returned as the same object."""
        native = TokenEntry(**fields_of("c"))
        assert as_token_entry(native) is native

    def test_missing_fields_are_all_named(self) -> None:
        """Every required field the record lacks is named, with the record's full class path."""
        with pytest.raises(
            TypeError, match=r"got object \(builtins\.object\) without rollout_id, model_call_id"
        ):
            as_token_entry(object())

    def test_a_nested_class_is_named_by_its_qualified_name(self) -> None:
        """A record class nested in another is named module.Outer.Inner."""
        with pytest.raises(TypeError, match=rf"\({__name__}\.gym\.TokenEntry\) without"):
            as_token_entry(gym.TokenEntry.model_construct(rollout_id="r"))

    def test_defaults_fill_fields_the_record_does_not_have(self) -> None:
        """A mapping with only the required fields gets the record's defaults."""
        entry = as_token_entry({"rollout_id": "r", "model_call_id": "c"})
        assert (entry.schema_version, entry.model, entry.generation_log_probs) == (1, "", [])

    def test_a_newer_schema_is_refused_as_for_a_native_record(self) -> None:
        """A foreign record of a newer schema is refused naming both versions."""
        with pytest.raises(ValidationError, match=r"schema_version 2 is newer.*schema_version 1"):
            as_token_entry({"rollout_id": "r", "model_call_id": "c", "schema_version": 2})

    def test_private_attributes_are_not_fields(self) -> None:
        """An object's underscore attributes are not taken as extra fields."""
        entry = as_token_entry(PlainEntry(fields_of("c")))
        assert "_cache" not in (entry.model_extra or {})
