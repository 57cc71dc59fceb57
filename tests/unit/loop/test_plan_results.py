"""Plans carry their result types (``loop.plans``): each plan names what its commit returns,
and ``plan.committed(value)`` hands a landed value back as that type — the landing code
needs no ``isinstance`` ladder, and a value paired with the wrong plan is refused."""

from __future__ import annotations

import typing

import pytest

from agentkeep.loop.plans import (
    Appended,
    AppendFailureNote,
    Consumed,
    Plan,
    Settle,
    Settled,
    StageOwed,
)
from agentkeep.types import Settings
from agentkeep.types.records import OwedWork

# What ``runtime.commit_plans.execute`` returns for each plan.
RETURNS = {
    "StageOwed": type(None),
    "LifecycleEdge": type(None),
    "ConsumeQueue": Consumed,
    "ConsumeNotices": Appended,
    "AppendBlock": Appended,
    "FinishResponse": Appended,
    "DispatchBatch": type(None),
    "CommitToolResult": Appended,
    "ClaimToolResults": type(None),
    "AnswerCalls": Appended,
    "AppendFailureNote": Appended,
    "Settle": Settled,
    "ReplaceWithCompaction": type(None),
}


def test_every_plan_names_its_result_type() -> None:
    plans = typing.get_args(Plan)
    assert {plan.__name__: plan.result_type for plan in plans} == RETURNS


def test_a_landed_value_comes_back_typed() -> None:
    settled = Settled(settled=True)
    assert Settle().committed(settled) is settled
    appended = Appended(records=())
    assert AppendFailureNote(message="x").committed(appended) is appended
    assert StageOwed(owed=OwedWork(stage="inference")).committed(None) is None


@pytest.mark.parametrize(
    ("plan", "value"),
    [
        (Settle(), Appended(records=())),
        (Settle(), None),
        (AppendFailureNote(message="x"), Consumed(records=(), settings=Settings(), remaining=())),
        (StageOwed(owed=OwedWork(stage="inference")), Settled(settled=False)),
    ],
)
def test_a_value_paired_with_the_wrong_plan_is_refused(plan: Plan, value: object) -> None:
    with pytest.raises(TypeError, match="commits to"):
        plan.committed(value)  # type: ignore[arg-type]
