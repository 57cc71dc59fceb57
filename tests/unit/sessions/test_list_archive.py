"""Listing sessions (every agent is one), archiving (refused while a turn is active), the
session's metadata, and what survives a restart."""

from __future__ import annotations

import pytest
from tests.unit.sessions.conftest import REVIEWER, TIMEOUT, World, run_turn

import agentkeep as ak
from agentkeep.sessions import SessionBusyError, SessionRecord, UnknownSessionError


def _ids(sessions: list[SessionRecord]) -> list[str]:
    return [s.id for s in sessions]


def test_agents_made_without_a_definition_are_sessions_too(world: World) -> None:
    system = world.open()
    system.registry.create(REVIEWER)
    plain = system.create(id="plain1", config=ak.AgentConfig(metadata={"k": 1}))
    pinned = system.sessions.start("reviewer", id="pinned1")

    listed = system.sessions.list()
    assert _ids(listed) == ["pinned1", "plain1"]
    [record] = [s for s in listed if s.id == plain.id]
    assert record.definition_id is None
    assert record.revision_id is None
    assert record.revision_number is None
    assert record.status == "active"
    assert record.metadata == {"k": 1}
    assert record.updated_at_ms == record.created_at_ms
    assert system.sessions.get("pinned1") == pinned
    system.delete("plain1")  # a deleted agent is no session
    assert _ids(system.sessions.list()) == ["pinned1"]
    with pytest.raises(UnknownSessionError):
        system.sessions.get("plain1")


def test_list_filters_by_definition_and_pages_by_id(world: World) -> None:
    system = world.open()
    system.registry.create(REVIEWER)
    system.registry.create({"id": "writer"})
    for name in ("ra", "rb", "rc"):
        system.sessions.start("reviewer", id=name)
    system.sessions.start("writer", id="wa")
    system.create(id="xa")

    assert _ids(system.sessions.list(definition_id="reviewer")) == ["ra", "rb", "rc"]
    assert _ids(system.sessions.list(definition_id="writer")) == ["wa"]
    assert system.sessions.list(definition_id="nobody") == []
    assert _ids(system.sessions.list(limit=2)) == ["ra", "rb"]
    assert _ids(system.sessions.list(after="rb", limit=2)) == ["rc", "wa"]
    assert _ids(system.sessions.list(after="wa")) == ["xa"]
    assert _ids(system.sessions.list(definition_id="reviewer", after="ra", limit=1)) == ["rb"]
    # Any string pages in byte order, a NUL included (PostgreSQL's text cannot hold one).
    assert _ids(system.sessions.list(after="rb\x00x")) == ["rc", "wa", "xa"]
    assert system.sessions.list(definition_id="review\x00er") == []
    with pytest.raises(ValueError, match="limit"):
        system.sessions.list(limit=0)


def test_archive_hides_a_session_from_the_default_list_and_is_idempotent(
    world: World,
) -> None:
    system = world.open()
    system.registry.create(REVIEWER)
    session = system.sessions.start("reviewer", id="done1")
    system.create(id="plain1")

    archived = system.sessions.archive("done1")
    assert archived.status == "archived"
    assert archived.archived_at_ms is not None
    assert archived.updated_at_ms == archived.archived_at_ms
    assert archived.revision_id == session.revision_id  # the pin is kept
    assert system.sessions.archive("done1") == archived  # again: unchanged
    assert _ids(system.sessions.list()) == ["plain1"]
    assert _ids(system.sessions.list(include_archived=True)) == ["done1", "plain1"]
    assert system.sessions.get("done1") == archived

    plain = system.sessions.archive("plain1")  # an agent without a definition, too
    assert plain.status == "archived"
    assert plain.definition_id is None
    assert system.sessions.list() == []
    with pytest.raises(UnknownSessionError) as raised:
        system.sessions.archive("nobody1")
    assert isinstance(raised.value, ak.UnknownAgentError)


def test_archive_is_refused_while_a_turn_runs(world: World) -> None:
    system = world.open()
    system.registry.create(REVIEWER)
    session = system.sessions.start("reviewer", id="busy1")
    world.local.add(ak.script.hang())
    system.send(session.id, ak.user("think hard"))
    assert world.local.wait_for_requests(1, timeout_seconds=TIMEOUT)

    with pytest.raises(SessionBusyError, match="busy1"):
        system.sessions.archive("busy1")
    assert system.sessions.get("busy1").status == "active"

    system.abort("busy1", wait=True, timeout_seconds=TIMEOUT)
    assert system.state("busy1") == "idle"
    assert system.sessions.archive("busy1").status == "archived"


def test_archive_is_refused_while_the_session_owes_work(world: World) -> None:
    system = world.open()
    system.create(id="owes1")
    # Accepted but not started: no actor runs it, yet the turn is owed durably.
    system.internals.accept("owes1", "send", ak.user("later"), start=False)
    assert system.state("owes1") == "owes_work"
    with pytest.raises(SessionBusyError):
        system.sessions.archive("owes1")
    assert system.sessions.get("owes1").status == "active"


def test_session_metadata_is_the_agents(world: World) -> None:
    system = world.open()
    system.registry.create(REVIEWER)
    session = system.sessions.start("reviewer", id="meta1", metadata={"a": 1})
    system.update_metadata(session.id, {"b": 2})
    assert system.sessions.get("meta1").metadata == {"a": 1, "b": 2}
    with pytest.raises(ak.InvalidConfigError):
        system.sessions.start("reviewer", metadata={"bad": object()})  # type: ignore[dict-item]


def test_pins_and_archives_survive_a_restart(world: World) -> None:
    system = world.open()
    system.registry.create(REVIEWER)
    system.sessions.start("reviewer", id="kept1")
    system.sessions.start("reviewer", id="gone1")
    system.sessions.archive("gone1")
    before = system.sessions.list(include_archived=True)
    system.close(timeout_seconds=10)

    system = world.open()
    assert system.sessions.list(include_archived=True) == before
    assert _ids(system.sessions.list()) == ["kept1"]
    world.local.add(ak.script.text("back"))
    run_turn(system, "kept1", "hello again")
    assert world.local.requests[-1].context.instructions == REVIEWER["instructions"]


def test_the_store_refuses_to_move_a_pin(world: World) -> None:
    system = world.open()
    system.registry.create(REVIEWER)
    system.registry.update("reviewer", {"instructions": "v2"})
    system.sessions.start("reviewer", id="fixed1")

    def move(tx: object) -> None:
        tx.sql.execute(  # type: ignore[attr-defined]
            "UPDATE sessions SET revision_number = 1 WHERE agent_id = 'fixed1'"
        )

    with pytest.raises(Exception, match="stays pinned"):
        system.internals.store.transact(move)
    assert system.sessions.get("fixed1").revision_number == 2


def test_the_driver_session_id_is_stored_per_session_and_read_back(world: World) -> None:
    # Drivers set it through agentkeep.sessions.tables; here it is read-only.
    from agentkeep.sessions import tables

    system = world.open()
    system.create(id="plain1")
    system.create(id="other1")
    assert system.sessions.get("plain1").driver_session_id is None
    system.internals.store.transact(
        lambda tx: tables.set_driver_session_id(tx, "plain1", "native-7", 5)
    )
    record = system.sessions.get("plain1")
    assert record.driver_session_id == "native-7"
    assert record.status == "active"
    assert record.definition_id is None
    assert system.sessions.get("other1").driver_session_id is None
    system.close(timeout_seconds=10)
    assert world.open().sessions.get("plain1").driver_session_id == "native-7"
