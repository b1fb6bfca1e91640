"""--tokcap-entry-class: the kit builds its entries with the class a framework insists on."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from conformance._entries import EntryClassError, EntryFactory, load_entry_class
from conformance._reading import entry_view


@dataclasses.dataclass(frozen=True)
class FrameworkRecord:
    """A framework's own record class, built by keyword from the record's fields."""

    rollout_id: str
    model_call_id: str
    model: str
    prompt_token_ids: list[int]
    generation_token_ids: list[int]
    generation_log_probs: list[float]
    routed_experts: Any
    output_items: list[dict[str, Any]]
    token_item_index: int | None
    created_at: float
    x_extra_field: Any = None


class TestLoadEntryClass:
    def test_a_class_built_from_the_fields_loads(self) -> None:
        """A class whose constructor takes the record's fields is accepted."""
        assert load_entry_class(f"{__name__}:FrameworkRecord") is FrameworkRecord

    @pytest.mark.parametrize(
        ("target", "names"),
        [
            ("no_such_module_here:Record", "cannot be imported"),
            (f"{__name__}:Missing", "has no class 'Missing'"),
            ("builtins:int", "cannot be built by keyword"),
        ],
    )
    def test_an_unusable_class_is_refused_saying_why(self, target: str, names: str) -> None:
        """An import failure, a missing name or a class refusing the fields is refused clearly."""
        with pytest.raises(EntryClassError, match=names):
            load_entry_class(target)


class TestFactory:
    def test_entries_are_built_with_the_class(self) -> None:
        """Plain and hazardous entries are instances of the class, read back by their fields."""
        factory = EntryFactory(random.Random(1), FrameworkRecord)
        plain = factory.entry("r-1", "c-1")
        hazardous = factory.hazardous("r-1", "c-2", prompt_len=4, generation_len=4)
        assert type(plain) is FrameworkRecord
        assert type(hazardous) is FrameworkRecord
        assert entry_view(plain).model_call_id == "c-1"
        assert float("-inf") in hazardous.generation_log_probs

    def test_plain_entries_carry_no_hazard(self) -> None:
        """Plain entries hold only values every transport keeps."""
        entry = EntryFactory(random.Random(2)).entry("r-1")
        fields = entry_view(entry).fields
        probs = fields["generation_log_probs"]
        assert all(p < 0 and (p * 256).is_integer() for p in probs)
        assert float(fields["created_at"]).is_integer()
        assert fields["model_call_id"].isascii()
        assert set(fields) <= set(type(entry).model_fields)


class TestOption:
    def test_a_bad_entry_class_is_a_usage_error(self, pytester: pytest.Pytester) -> None:
        """An entry class that cannot be loaded stops the run before any check, exit code 4."""
        result = pytester.runpytest_subprocess(
            "-p",
            "no:cacheprovider",
            "--tokcap-sink=reference.memory_store:MemoryTokenStore",
            "--tokcap-entry-class=builtins:int",
        )
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*--tokcap-entry-class='builtins:int'*cannot be built*"])

    def test_the_environment_names_it_too(
        self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """TOKCAP_ENTRY_CLASS is read like every option, and its source is named on error."""
        monkeypatch.setenv("TOKCAP_ENTRY_CLASS", "no_such_module_here:Record")
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "--tokcap-sink=reference.memory_store:MemoryTokenStore"
        )
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*environment variable TOKCAP_ENTRY_CLASS*"])


FIXED_FIELDS = """
import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class FixedRecord:
    rollout_id: str
    model_call_id: str
    model: str
    prompt_token_ids: list
    generation_token_ids: list
    generation_log_probs: list
    routed_experts: Any
    output_items: list
    token_item_index: Any
    created_at: float
"""


def test_a_class_with_no_room_for_the_lineage_stamp_skips_lineage_saying_why(
    pytester: pytest.Pytester,
) -> None:
    """A record class with fixed fields cannot carry the stamp: LINEAGE is skipped, not failed."""
    pytester.makepyfile(records=FIXED_FIELDS)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--tokcap-sink=reference.memory_store:MemoryTokenStore",
        "--tokcap-capability=process-local",
        "--tokcap-lineage=reference.lineage:MemoryLineageResolver",
        "--tokcap-entry-class=records:FixedRecord",
        "-k",
        "LINEAGE",
        "-rs",
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines(
        ["*entry class records:FixedRecord cannot carry the lineage stamp*"]
    )
