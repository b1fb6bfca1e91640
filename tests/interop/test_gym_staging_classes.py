"""The kit judges staging stores on NeMo Gym 0.7.0's own classes (``--tokcap-staging-classes=gym``).

A store typed against Gym's classes keeps every STAGE promise on them, nothing blocked; one that
answers a result class of its own fails STAGE-1 alone there, and passes where results are read
by their fields; the reference staging stores pass on Gym's classes with and without being built
for them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

MUTANTS = Path(__file__).resolve().parents[1] / "mutants"
if str(MUTANTS) not in sys.path:
    sys.path.insert(0, str(MUTANTS))

from zoo import JudgedStore, KitRun, run_kit  # noqa: E402

GYM_CLASSES = "--tokcap-staging-classes=gym"
STAGING = "staging-v2"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("gym_pythonpath")]


def _messages(run: KitRun) -> str:
    shown = [
        f"{c}: {e['message'][:600]}" for c, e in run.clauses.items() if e["outcome"] != "passed"
    ]
    return "\n".join(shown) or run.problem or run.output[-2000:]


def _judged(name: str, target: str, *flags: str, kwargs: str | None = None) -> KitRun:
    store = JudgedStore(name, target, flags, contract=STAGING)
    if kwargs is not None:
        store = JudgedStore(name, target, flags, kwargs, contract=STAGING)
    return run_kit(store)


def test_a_store_typed_against_gyms_classes_passes_on_them() -> None:
    """Every STAGE clause passes and none is blocked; the report names the classes."""
    run = _judged("GymTypedStore", "gym_typed_staging:GymTypedStore", GYM_CLASSES)
    assert run.exit_code == 0, _messages(run)
    assert run.failed == (), _messages(run)
    assert run.blocked == (), _messages(run)
    assert run.judged["staging_classes"] == "gym"


def test_a_store_answering_its_own_result_class_fails_stage_1_on_gyms_classes() -> None:
    """Its answers are refused as Gym's capture refuses them, and nothing else fails."""
    run = _judged("OwnResultClass", "gym_typed_staging:OwnResultClass", GYM_CLASSES)
    assert run.failed == ("STAGE-1",), _messages(run)
    message = run.clauses["STAGE-1"]["message"]
    assert "nemo_gym.token_id_capture.staging.records.StageResult" in message
    assert "gym_typed_staging.Outcome" in message
    assert set(run.blocked) <= {f"STAGE-{n}" for n in range(2, 12)}, _messages(run)


def test_without_the_option_a_gym_typed_store_refuses_the_kits_records() -> None:
    """Without the option the kit stages tokcap_spec's records, which a store typed against
    Gym's classes refuses: the report says which class it was handed, so the author knows to
    pass ``--tokcap-staging-classes=gym``."""
    run = _judged("OwnResultClass", "gym_typed_staging:OwnResultClass")
    assert run.exit_code == 1
    assert "STAGE-3" in run.failed, _messages(run)
    assert "expected a Gym StagedCallRecord, got StagedCallRecord" in _messages(run)


@pytest.mark.parametrize(
    ("name", "target", "kwargs", "flags"),
    [
        (
            "FileStagingStore",
            "reference.staging_file:FileStagingStore",
            '{"root": "{tmp_path}"}',
            (),
        ),
        (
            "FileStagingStoreBuiltForGym",
            "reference.staging_file:FileStagingStore",
            '{"root": "{tmp_path}", "classes": "gym"}',
            (),
        ),
        (
            "MemoryStagingStoreBuiltForGym",
            "reference.staging_memory:MemoryStagingStore",
            '{"namespace": "kit", "classes": "gym"}',
            ("--tokcap-capability=process-local",),
        ),
    ],
)
def test_the_reference_staging_stores_pass_on_gyms_classes(
    name: str, target: str, kwargs: str, flags: tuple[str, ...]
) -> None:
    """With their extras and attachments read back, built for Gym or not."""
    run = _judged(name, target, GYM_CLASSES, "--tokcap-capability=read-back", *flags, kwargs=kwargs)
    assert run.exit_code == 0, _messages(run)
    assert run.failed == (), _messages(run)
    assert run.blocked == (), _messages(run)
