"""A message id minted for the message being accepted cannot be durable yet, so the first
run of its acceptance claims it without waiting for the claim's answer (one round trip
fewer on PostgreSQL); any later run of the same acceptance asks, as for a client's id, so
it finds the id taken and reports the message as already accepted, not as an error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import agentkeep as ak
from agentkeep.delivery import prepare_acceptance
from agentkeep.persistence import Store

from .conftest import World


def _accepting(world: World) -> tuple[Store, Callable[[], Any]]:
    """A store with one agent, and a maker of acceptances of "hello" to it, their ids
    minted (``message_id=None``)."""
    system = world.open()
    agent = system.create()

    def acceptance() -> Any:
        return prepare_acceptance(
            ak.Providers(),
            agent.id,
            "send",
            ak.user("hello"),
            message_id=None,
            metadata=None,
            options=None,
        )

    return system.internals.store, acceptance


def test_a_second_run_of_a_minted_ids_acceptance_finds_it_accepted(world: World) -> None:
    store, acceptance = _accepting(world)
    accept = acceptance()
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
    store, acceptance = _accepting(world)
    ids = []
    for _ in range(2):
        delivery, _queued = store.transact(acceptance())
        assert delivery.created
        ids.append(delivery.id)
    assert ids[0] != ids[1]
