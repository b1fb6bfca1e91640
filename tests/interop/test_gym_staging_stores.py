"""NeMo Gym 0.7.0's own staging code accepts what the reference staging stores stage and fetch.

Gym's worker-side capture (``RolloutTokenCapture``, installed with ``install_capture``) stages
two calls of a rollout, root and child, through each store (the Redis one on a real server) and
returns its commit coordinates; the coordinates become Gym's manifest rows and receipt. The
rows fetched back through the store are then judged by Gym alone: each is validated as Gym's
``StagedCallBaseSnapshot`` (which recomputes the digest with Gym's ``compute_staging_digest``),
and ``verify_and_linearize`` checks them against the receipt (fields, digests, the chain and
cumulative hashes, the mask order) and rebuilds the training row, whose floats must be the
ones generated, bit for bit.

There is no glue: each store is handed to ``install_capture`` as it is. Built with
``classes="gym"`` it answers Gym's ``StageResult`` and fetches Gym's ``StagedCallBaseSnapshot``
rows, which ``verify_and_linearize`` takes as they come; built without, it still answers Gym's
``StageResult`` to Gym's records, so Gym's capture stages through it.
"""

from __future__ import annotations

import importlib
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from spec.staged_calls import FLOAT32_MAX, FLOAT32_TINIEST

from reference import FileStagingStore, MemoryStagingStore, RedisStagingStore
from tokcap_spec.staging import (
    StagedCallRecord,
    StageResult,
    distinct_staging_key,
    extras_digest,
)

Store = MemoryStagingStore | FileStagingStore | RedisStagingStore
WEIGHT_VERSION = 7


@pytest.fixture(scope="module")
def gym(gym_root: Path) -> SimpleNamespace:
    """The released staging modules: ``capture``, ``rebuild``, ``records`` and ``protocols``."""
    return SimpleNamespace(
        **{
            name: importlib.import_module(f"nemo_gym.token_id_capture.staging.{name}")
            for name in ("capture", "rebuild", "records", "protocols", "digest")
        }
    )


@pytest.fixture(params=["memory", "file", "redis", "redis-cluster"])
def store(request: pytest.FixtureRequest, tmp_path: Path, gym: SimpleNamespace) -> Iterator[Store]:
    """Each reference staging store in turn, empty and built for Gym (``classes="gym"``): in
    memory, in a directory, on one Redis node and on a Redis Cluster."""
    if request.param == "memory":
        yield MemoryStagingStore(classes="gym")
    elif request.param == "file":
        yield FileStagingStore(tmp_path / "staging", classes="gym")
    else:
        server = request.getfixturevalue(
            "redis_cluster" if request.param == "redis-cluster" else "redis_server"
        )
        redis = RedisStagingStore(server.url, namespace=f"s-{uuid.uuid4().hex}", classes="gym")
        yield redis
        redis.close()


def bits(values: list[float]) -> list[str]:
    return [struct.pack(">d", value).hex() for value in values]


def capture(gym: SimpleNamespace, store: Store) -> Any:
    """Gym's worker capture, installed on Gym's minimal serving layer over ``store``."""
    return gym.capture.install_capture(
        gym.capture.CaptureHost(),
        sink=store,
        weight_version_fn=lambda: WEIGHT_VERSION,
    )


def manifest_row(gym: SimpleNamespace, coords: Any, mode: str) -> Any:
    """Gym's manifest row of a staged call, from Gym's commit coordinates."""
    assert coords.disposition == "staged"
    fields = coords.model_dump(exclude={"rollout_id", "disposition"})
    return gym.records.CallRecord(**fields, mode=mode, response_id=f"resp-{coords.model_call_id}")


ROOT_PROMPT = [1, 2, 3]
ROOT_GENERATED, ROOT_LOG_PROBS = [10, 11], [-0.0, -FLOAT32_TINIEST]
CHILD_TURN = [20, 21]
CHILD_GENERATED, CHILD_LOG_PROBS = [30, 31, 32], [-1e-40, -0.5, -FLOAT32_MAX]
ROOT_ATTACHMENTS = {"image": bytes(range(256)), "caption": "a cat/🙂"}


def stage_rollout(gym: SimpleNamespace, store: Store, rollout_id: str, root_id: str) -> Any:
    """Stage a root and its child through Gym's capture; return Gym's receipt of them."""
    worker = capture(gym, store)
    root = worker.begin_call(
        gym.records.CaptureAdmission(rollout_id=rollout_id, model_call_id=root_id, mode="text")
    )
    root_coords = worker.complete_call(
        root,
        prompt_token_ids=ROOT_PROMPT,
        generated_token_ids=ROOT_GENERATED,
        generated_logprobs=ROOT_LOG_PROBS,
        extras={"experts": [[1, 2], [3, 4]], "z": -0.0},
        attachments=ROOT_ATTACHMENTS,
    )
    prefix = ROOT_PROMPT + ROOT_GENERATED
    child = worker.begin_call(
        gym.records.CaptureAdmission(
            rollout_id=rollout_id,
            model_call_id=f"{root_id}/child",
            parent_call_id=root_id,
            prev_len=len(prefix),
            mode="token_in",
            required_prefix_token_ids=prefix,
            parent_chain_hash=root_coords.chain_hash,
        )
    )
    child_coords = worker.complete_call(
        child,
        prompt_token_ids=prefix + CHILD_TURN,
        generated_token_ids=CHILD_GENERATED,
        generated_logprobs=CHILD_LOG_PROBS,
    )
    return gym.records.RolloutReceipt(
        rollout_id=rollout_id,
        terminal_model_call_id=child_coords.model_call_id,
        manifest=[
            manifest_row(gym, root_coords, "text"),
            manifest_row(gym, child_coords, "token_in"),
        ],
        terminal_selection="declared",
    )


def verified(gym: SimpleNamespace, store: Store, receipt: Any) -> Any:
    """Fetch the receipt's rows through ``store`` and have Gym validate and verify them."""
    rows = store.fetch([row.staging_key for row in receipt.manifest])
    assert all(isinstance(row, gym.records.StagedCallBaseSnapshot) for row in rows)
    return gym.rebuild.verify_and_linearize(receipt, rows)


def test_the_stores_satisfy_gyms_staging_protocols(gym: SimpleNamespace, store: Store) -> None:
    assert isinstance(store, gym.protocols.StagingSink)
    assert isinstance(store, gym.protocols.StagingSource)


@pytest.mark.parametrize(
    ("rollout_id", "root_id"), [("rollout-1", "call-0"), ("roll/out", "call/0%2F")]
)
def test_gyms_capture_stages_through_the_store_and_gym_verifies_the_fetched_rows(
    gym: SimpleNamespace, store: Store, rollout_id: str, root_id: str
) -> None:
    receipt = stage_rollout(gym, store, rollout_id, root_id)
    assert [row.staging_key for row in receipt.manifest] == [
        distinct_staging_key(rollout_id, root_id),
        distinct_staging_key(rollout_id, f"{root_id}/child"),
    ]
    row = verified(gym, store, receipt)
    assert row.token_ids == ROOT_PROMPT + ROOT_GENERATED + CHILD_TURN + CHILD_GENERATED
    assert bits(row.logprobs) == bits([0.0] * 3 + ROOT_LOG_PROBS + [0.0] * 2 + CHILD_LOG_PROBS)
    assert row.token_mask == [0.0] * 3 + [1.0] * 2 + [0.0] * 2 + [1.0] * 3
    assert row.prompt_len == len(ROOT_PROMPT)
    assert row.weight_versions == [WEIGHT_VERSION, WEIGHT_VERSION]

    # The extras and attachments come back too, and match what Gym committed to.
    root_key, child_key = (manifest.staging_key for manifest in receipt.manifest)
    extras = store.fetch_extras([root_key, child_key])
    commitments = [commitment.extras_digest for commitment in row.extras_commitments]
    assert commitments == [gym.digest.compute_extras_digest(value) for value in extras]
    assert commitments == [extras_digest(value) for value in extras]
    assert extras[0] == {"experts": [[1, 2], [3, 4]], "z": -0.0}
    assert bits([extras[0]["z"]]) == bits([-0.0])  # type: ignore[index]
    assert store.fetch_attachments(root_key) == ROOT_ATTACHMENTS
    assert store.fetch_attachments(child_key) == {}


def test_rollouts_whose_default_keys_collide_are_both_verified(
    gym: SimpleNamespace, store: Store
) -> None:
    """``("a/b", "c")`` and ``("a", "b/c")`` share Gym's default key; staged through the store,
    each rollout's rows are its own and verify."""
    first = stage_rollout(gym, store, "a/b", "c")
    second = stage_rollout(gym, store, "a", "b/c")
    keys = {row.staging_key for receipt in (first, second) for row in receipt.manifest}
    assert len(keys) == 4
    for receipt in (first, second):
        assert verified(gym, store, receipt).rollout_id == receipt.rollout_id


def test_gym_reads_a_refused_stage_as_a_failed_capture(gym: SimpleNamespace, store: Store) -> None:
    """Another call for a staged key is refused by the store; Gym's capture turns that into
    ``capture_failed`` coordinates, and the stored rows still verify."""
    receipt = stage_rollout(gym, store, "rollout-1", "call-0")
    worker = capture(gym, store)
    again = worker.begin_call(
        gym.records.CaptureAdmission(rollout_id="rollout-1", model_call_id="call-0", mode="text")
    )
    coords = worker.complete_call(
        again, prompt_token_ids=[9], generated_token_ids=[9], generated_logprobs=[-1.0]
    )
    assert coords.disposition == "capture_failed"
    assert coords.staging_key is None
    assert verified(gym, store, receipt).token_ids[: len(ROOT_PROMPT)] == ROOT_PROMPT


def test_gym_rejects_a_row_that_does_not_match_its_receipt(
    gym: SimpleNamespace, store: Store
) -> None:
    """The judge is live: rows fetched in the wrong order fail Gym's verification."""
    receipt = stage_rollout(gym, store, "rollout-1", "call-0")
    rows = store.fetch([row.staging_key for row in reversed(receipt.manifest)])
    with pytest.raises(gym.rebuild.ReceiptVerificationError, match="snapshot_order_mismatch"):
        gym.rebuild.verify_and_linearize(receipt, rows)


def test_a_store_built_without_classes_answers_gyms_result_to_gyms_record(
    gym: SimpleNamespace, staging_store: Store
) -> None:
    """Built with no ``classes`` kwarg, each store (``staging_store`` in ``tests/conftest.py``)
    answers Gym's record with Gym's ``StageResult``, so Gym's capture stages both calls, and
    answers tokcap_spec's record with tokcap_spec's."""
    receipt = stage_rollout(gym, staging_store, "rollout-1", "call-0")
    assert [row.staging_key for row in receipt.manifest] == [
        distinct_staging_key("rollout-1", "call-0"),
        distinct_staging_key("rollout-1", "call-0/child"),
    ]
    child_key = receipt.manifest[1].staging_key
    (row,) = staging_store.fetch([child_key])
    again = staging_store.stage(StagedCallRecord.model_validate(row.model_dump()))
    assert type(again) is StageResult
    assert (again.ok, again.staging_key) == (True, child_key)
