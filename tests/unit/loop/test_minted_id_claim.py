"""A message id minted for the message being accepted cannot be durable yet, so the first
run of its acceptance claims it without waiting for the claim's answer (one round trip
fewer on PostgreSQL); any later run of the same acceptance asks, as for a client's id, so
it finds the id taken and reports the message as already accepted, not as an error."""

from __future__ import annotations

import agentkeep as ak
from agentkeep.delivery import prepare_acceptance

from .conftest import World


def test_a_second_run_of_a_minted_ids_acceptance_finds_it_accepted(world: World) -> None:
    system = world.open()
    agent = system.create()
    store = system.internals.store
    accept = prepare_acceptance(
        ak.Providers(),
        agent.id,
        "send",
        ak.user("hello"),
        message_id=None,
        metadata=None,
        options=None,
    )
    first, queued = store.transact(accept)
    assert first.created
    assert queued is not None
    # The same work again (as if its first COMMIT's outcome had been unknown): it asks.
    again, queued_again = store.transact(accept)
    assert (again.id, again.created, again.turn_id) == (first.id, False, first.turn_id)
    assert queued_again is None
    turns = store.read(
        lambda tx: tx.sql.query("SELECT count(*) FROM turns WHERE message_id = ?", (first.id,))
    )
    assert turns == [(1,)]


def test_a_fresh_acceptance_mints_a_new_id_each_time(world: World) -> None:
    system = world.open()
    agent = system.create()
    store = system.internals.store
    ids = []
    for _ in range(2):
        accept = prepare_acceptance(
            ak.Providers(),
            agent.id,
            "send",
            ak.user("hello"),
            message_id=None,
            metadata=None,
            options=None,
        )
        delivery, _queued = store.transact(accept)
        assert delivery.created
        ids.append(delivery.id)
    assert ids[0] != ids[1]
