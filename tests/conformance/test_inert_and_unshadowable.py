"""Installing tokcap changes nothing for a suite that does not use it, and a project's own
``conformance`` or ``reference`` module is refused clearly rather than confused with the kit's."""

from __future__ import annotations

import pytest

OWN_TEST = "def test_own():\n    assert True\n"


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


class TestProjectsOfTheSameNames:
    def test_own_conformance_package_runs_its_suite(self, pytester: pytest.Pytester) -> None:
        """A project with a top-level ``conformance`` package runs its tests unaffected."""
        pytester.mkpydir("conformance")
        pytester.path.joinpath("conformance", "rules.py").write_text("LIMIT = 3\n")
        pytester.makepyfile(
            test_rules="from conformance.rules import LIMIT\n\ndef test_limit():\n"
            "    assert LIMIT == 3\n"
        )
        result = run(pytester)
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        result.assert_outcomes(passed=1)

    def test_own_tests_conformance_package_runs_its_suite(self, pytester: pytest.Pytester) -> None:
        """A project whose tests live in a ``tests/conformance`` package runs them unaffected."""
        pytester.mkpydir("tests")
        package = pytester.mkpydir("tests/conformance")
        package.joinpath("test_user_api.py").write_text(OWN_TEST)
        result = run(pytester)
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        result.assert_outcomes(passed=1)

    def test_own_reference_module_runs_its_suite(self, pytester: pytest.Pytester) -> None:
        """A project with its own ``reference.py`` runs its tests unaffected."""
        pytester.makepyfile(reference="VALUE = 'ours'\n")
        pytester.makepyfile(
            test_ref="import reference\n\ndef test_ours():\n    assert reference.VALUE == 'ours'\n"
        )
        result = run(pytester)
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        result.assert_outcomes(passed=1)


class TestShadowedKit:
    def test_kit_refuses_a_shadowing_conformance_package(self, pytester: pytest.Pytester) -> None:
        """Used where ``conformance`` is someone else's, the kit names both paths and the fix."""
        ours = pytester.mkpydir("conformance")
        result = run(pytester, "--tokcap-sink=reference.memory_store:MemoryTokenStore")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        text = result.stderr.str()
        assert f"resolves to {ours / '__init__.py'}" in text
        assert "not to tokcap's" in text
        assert "Rename yours" in text
        assert "test_contract.py" not in result.stdout.str()

    def test_kit_refuses_a_shadowing_reference_module(self, pytester: pytest.Pytester) -> None:
        """A target in ``reference`` that resolves to the project's own module is refused."""
        ours = pytester.makepyfile(reference="VALUE = 'ours'\n")
        result = run(pytester, "--tokcap-sink=reference:FileTokenStore")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert f"'reference' resolves to {ours}" in result.stderr.str()

    def test_own_reference_does_not_matter_for_another_target(
        self, pytester: pytest.Pytester
    ) -> None:
        """A project's ``reference.py`` is no obstacle when the target lives elsewhere."""
        pytester.makepyfile(reference="VALUE = 'ours'\n")
        result = run(
            pytester,
            "--tokcap-sink=elsewhere:Store",
            "--collect-only",
            "-q",
        )
        assert result.ret == pytest.ExitCode.OK, result.stderr.str()
