"""The steps checks and basics share, each on behalf of the clause it serves.

Import it qualified (``from conformance import _steps as step``), so that a reader of a check
sees which lines are the contract's operations: ``step.put(kit, sink, entry)``.
"""

from conformance._steps.elsewhere import construct, freeze_elsewhere, visible_after
from conformance._steps.operations import (
    call_of,
    close,
    describe,
    drop,
    expect,
    expect_bool,
    expect_drop_shape,
    expect_equal_snapshots,
    expect_masked,
    freeze,
    late_put_moves_version,
    mark,
    payloads,
    put,
    put_held,
    raises,
    reread,
    round_trips,
    run_property,
    sent,
    state,
    unreadable,
)
from conformance._steps.spawned import (
    expect_in_spawned_worker,
    expect_same_in_spawned_worker,
    expect_spawned_freezes_agree,
)

__all__ = [
    "call_of",
    "close",
    "construct",
    "describe",
    "drop",
    "expect",
    "expect_bool",
    "expect_masked",
    "expect_drop_shape",
    "expect_equal_snapshots",
    "expect_in_spawned_worker",
    "expect_same_in_spawned_worker",
    "expect_spawned_freezes_agree",
    "freeze",
    "late_put_moves_version",
    "freeze_elsewhere",
    "mark",
    "payloads",
    "put",
    "put_held",
    "raises",
    "reread",
    "round_trips",
    "run_property",
    "sent",
    "state",
    "unreadable",
    "visible_after",
]
