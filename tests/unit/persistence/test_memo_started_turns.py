"""The writer's remembered started turns (persistence/turns.py): through any mix of turns
opened, started in any order, asked to cancel and finished, within and across transactions,
``started_turns``, ``running_turn_id`` and ``live_turns`` answer what SQL holds — though a
step's answer no longer walks the session's queued turns to find them."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkeep.persistence import Store, Transaction
from agentkeep.types.turns import TRANSITIONS, TurnStatus

A = "a"
LIVE = "('queued', 'running', 'cancelling')"

# One step: open a turn, or move the k-th live turn (modulo their number) to the k2-th of the
# moves its status allows (modulo their number).
Step = tuple[str, int, int]
STEPS = st.lists(
    st.tuples(st.sampled_from(["open", "move"]), st.integers(0, 30), st.integers(0, 3)),
    max_size=30,
)


def _ids(tx: Transaction, statuses: str) -> list[str]:
    rows = tx.sql.query(  # type: ignore[attr-defined]
        f"SELECT id FROM turns WHERE agent_id = ? AND status IN {statuses} ORDER BY number", (A,)
    )
    return [row[0] for row in rows]


def _check(tx: Transaction) -> None:
    started = _ids(tx, "('running', 'cancelling')")
    assert [turn.id for turn in tx.turns.started(A)] == started
    assert tx.turns.running_id(A) == (started[-1] if started else None)
    assert [turn.id for turn in tx.turns.live(A)] == _ids(tx, LIVE)
    for turn in tx.turns.started(A):
        assert turn.status in ("running", "cancelling")


def _play(tx: Transaction, steps: list[Step], *, warm: bool) -> None:
    if warm:  # remembered from here on: every step below changes the remembered turns
        tx.turns.started(A)
        tx.turns.live(A)
    for action, k, k2 in steps:
        if action == "open":
            tx.turns.open(A, key=None, driver="native", delivery="send", input={}, message_id=None)
        else:
            live = _ids(tx, LIVE)
            if live:
                turn = tx.turns.read(A, live[k % len(live)])
                assert turn is not None
                moves: tuple[TurnStatus, ...] = TRANSITIONS[turn.status]
                tx.turns.move(A, turn.id, moves[k2 % len(moves)])
        _check(tx)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(first=STEPS, second=STEPS, warm=st.booleans())
def test_the_remembered_started_turns_are_the_running_and_cancelling_turns(
    store: Store, first: list[Step], second: list[Step], warm: bool
) -> None:
    store.transact(lambda tx: _play(tx, first, warm=warm))
    # A later transaction starts from what the first one left remembered (the committed layer).
    store.transact(lambda tx: _play(tx, second, warm=warm))
    store.read(_check)


def test_a_turn_started_out_of_order_takes_its_place_by_number(store: Store) -> None:
    def scenario(tx: Transaction) -> list[str]:
        ids = [
            tx.turns.open(A, key=None, driver="native", delivery="send", input={}, message_id=None)[
                0
            ].id
            for _ in range(3)
        ]
        tx.turns.started(A)  # remembered: empty
        tx.turns.move(A, ids[2], "running")
        tx.turns.move(A, ids[0], "running")  # an older turn starts later (a steer outranks)
        return ids

    ids = store.transact(scenario)

    assert store.transact(lambda tx: [t.id for t in tx.turns.started(A)]) == [ids[0], ids[2]]
    assert store.transact(lambda tx: tx.turns.running_id(A)) == ids[2]
