"""The clause catalog: complete, in contract order, and in step with the registered checks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conformance import revision
from conformance._registry import FAMILIES, all_checks
from conformance._registry import family_of as registry_family_of
from conformance.catalog import CLAUSES, FAMILY_TITLES, KIT, clause, family_of
from tokcap_spec import SPEC_REVISION

CONTRACT_ORDER = [each for each, _ in revision.read()[SPEC_REVISION]]
"""The clause ids of the contract revision the kit implements, as the lock records them."""


class TestClauses:
    def test_lists_every_contract_clause_in_contract_order(self) -> None:
        """The catalog holds each contract clause id once, in the contract's order."""
        assert [found.id for found in CLAUSES] == CONTRACT_ORDER, revision.advice()

    def test_every_text_is_written(self) -> None:
        """Every clause has a title and a promise, why and how-broken text of whole sentences."""
        for found in CLAUSES:
            assert found.title, found.id
            assert not found.title.endswith("."), found.id
            for text in (found.promise, found.why, found.how_broken):
                assert text.endswith("."), (found.id, text)
                assert "  " not in text, (found.id, text)

    def test_every_kit_clause_states_its_hazard_space(self) -> None:
        """A clause the kit judges says what the kit varies; a clause it does not, nothing."""
        for found in CLAUSES:
            if found.checked_by == KIT:
                assert found.hazards.endswith("."), found.id
                assert "  " not in found.hazards, found.id
            else:
                assert not found.hazards, found.id

    def test_families_follow_the_family_order(self) -> None:
        """Clauses come family by family, in the order of FAMILY_TITLES."""
        seen = [found.family for found in CLAUSES]
        contiguous = [family for index, family in enumerate(seen) if seen.index(family) == index]
        assert contiguous == list(FAMILY_TITLES)

    def test_checked_by_is_the_kit_or_a_test_module(self) -> None:
        """Record, config and consumer clauses name the project test module; the rest the kit."""
        owners = {
            "REC": "tests/spec/test_records.py",
            "CFG": "tests/spec/test_config.py",
            "CONS": "tests/reference/test_consumer.py",
        }
        for found in CLAUSES:
            assert found.checked_by == owners.get(found.family, KIT), found.id

    def test_refuses_a_family_that_does_not_match_the_id(self) -> None:
        """A clause filed under another family than its id names is refused."""
        with pytest.raises(ValueError, match="PUT-1"):
            replace(clause("PUT-1"), family="DROP")

    def test_refuses_checked_by_outside_the_tests(self) -> None:
        """checked_by must be the kit or a module under tests/."""
        with pytest.raises(ValueError, match="checked_by"):
            replace(clause("PUT-1"), checked_by="somewhere")


class TestClauseLookup:
    def test_returns_the_clause_with_that_id(self) -> None:
        """clause() returns the catalog entry carrying the id."""
        assert clause("EXT-BEGIN-1") is CLAUSES[CONTRACT_ORDER.index("EXT-BEGIN-1")]

    def test_unknown_id_names_the_id(self) -> None:
        """An unknown id raises KeyError whose message names that id."""
        with pytest.raises(KeyError, match="PUT-99"):
            clause("PUT-99")

    def test_lower_case_id_suggests_the_real_one(self) -> None:
        """A lower-case id is not found, and the error suggests the upper-case id."""
        with pytest.raises(KeyError, match="did you mean PUT-1"):
            clause("put-1")


class TestAgreementWithTheRegistry:
    def test_every_checked_clause_is_in_the_catalog(self) -> None:
        """Every clause a registered check names or covers is a catalog clause."""
        ids = {found.id for found in CLAUSES}
        for registered in all_checks():
            assert set(registered.judges) <= ids, registered.id

    def test_only_kit_clauses_have_checks(self) -> None:
        """No registered check targets a clause the catalog says the project's tests prove."""
        for registered in all_checks():
            for judged in registered.judges:
                assert clause(judged).checked_by == KIT, registered.id

    def test_every_kit_clause_has_a_check(self) -> None:
        """Each kit clause, apart from those awaiting the concurrency checks, has a check."""
        checked = {registered.clause for registered in all_checks()}
        unchecked = [
            found.id for found in CLAUSES if found.checked_by == KIT and found.id not in checked
        ]
        assert unchecked == []

    def test_registry_families_are_the_kit_families(self) -> None:
        """The registry's families are the catalog's kit families, in the same order."""
        kit_families = [
            family
            for family in FAMILY_TITLES
            if any(found.checked_by == KIT for found in CLAUSES if found.family == family)
        ]
        assert kit_families == list(FAMILIES)

    def test_registry_family_of_is_the_catalogs(self) -> None:
        """The registry's family_of is the catalog's, which files EXT-BEGIN-1 under EXT."""
        assert registry_family_of is family_of
        assert family_of("EXT-BEGIN-1") == "EXT"
        assert family_of("PUT-3") == "PUT"
