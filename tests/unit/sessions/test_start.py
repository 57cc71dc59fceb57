"""Starting a session from a definition's revision: the pin, and what the revision configures
(checked at start, seen by the model at every turn; later edits never change it)."""

from __future__ import annotations

import msgspec
import pytest
from tests.unit.sessions.conftest import REVIEWER, SYSTEM_INSTRUCTIONS, World, lookup, run_turn

import agentkeep as ak
from agentkeep.registry import (
    DefinitionDeletedError,
    InvalidDefinitionError,
    UnknownDefinitionError,
    UnknownRevisionError,
)
from agentkeep.sessions import (
    SessionConfigError,
    SessionRecord,
    UnknownSessionError,
    UnsupportedDriverError,
)


def _tool_keys(model: ak.ScriptedModel) -> set[tuple[str | None, str]]:
    """The (namespace, name) of every tool the model's last opened session was given."""
    return {(t.namespace, t.name) for t in model.model_sessions[-1].options.tools}


def test_a_session_pins_the_current_revision(world: World) -> None:
    system = world.open()
    record = system.registry.create(REVIEWER)
    session = system.sessions.start("reviewer", id="review1", metadata={"ticket": 7})

    assert session.id == "review1"
    assert session.definition_id == "reviewer"
    assert session.revision_id == record.current_revision_id
    assert session.revision_number == 1
    assert session.status == "active"
    assert not session.archived
    assert session.driver_session_id is None
    assert session.metadata == {"ticket": 7}
    assert system.sessions.get("review1") == session
    assert system.metadata("review1") == {"ticket": 7}  # the session is an agent
    fresh = system.sessions.start("reviewer")
    assert fresh.id != session.id
    assert ak.AgentSystem.resolve(system, fresh.id).id == fresh.id


def test_the_revision_configures_what_the_model_sees(world: World) -> None:
    system = world.open()
    system.registry.create(REVIEWER)
    session = system.sessions.start("reviewer")
    world.local.add(ak.script.text("looks fine"))

    run_turn(system, session.id, "review this")

    [request] = world.local.requests
    assert request.context.instructions == REVIEWER["instructions"]
    assert SYSTEM_INSTRUCTIONS not in request.context.instructions
    assert request.selection.model == "gym-2"
    assert request.selection.effort == "high"
    assert request.selection.service_tier == "priority"
    assert world.other.requests == ()  # not the system's default provider
    assert _tool_keys(world.local) == {("git", "status"), (None, "lookup")}  # not "shell"
    assert system.settings(session.id).provider == "local"


def test_edits_never_change_a_session_and_new_sessions_get_them(world: World) -> None:
    system = world.open()
    system.registry.create(REVIEWER)
    old = system.sessions.start("reviewer", id="old1")
    update = system.registry.update(
        "reviewer",
        {
            "instructions": "Only style.",
            "model": {"id": "local/gym-1"},
            "toolbox": {"toolIds": ["shell"]},
        },
    )
    assert update.changed
    assert update.revision.number == 2
    new = system.sessions.start("reviewer", id="new1")
    assert (old.revision_number, new.revision_number) == (1, 2)
    world.local.add(ak.script.text("a"), ak.script.text("b"), ak.script.text("c"))

    run_turn(system, "old1", "first")
    first = world.local.requests[-1]
    assert first.context.instructions == REVIEWER["instructions"]
    assert (first.selection.model, first.selection.effort) == ("gym-2", "high")
    assert _tool_keys(world.local) == {("git", "status"), (None, "lookup")}

    run_turn(system, "new1", "second")
    second = world.local.requests[-1]
    assert second.context.instructions == "Only style."
    assert (second.selection.model, second.selection.effort) == ("gym-1", None)
    assert _tool_keys(world.local) == {(None, "shell")}

    # A restart keeps the pin: the old session still runs on revision 1.
    system.close(timeout_seconds=10)
    system = world.open()
    assert system.sessions.get("old1").revision_number == 1
    run_turn(system, "old1", "third")
    third = world.local.requests[-1]
    assert third.context.instructions == REVIEWER["instructions"]
    assert third.selection.model == "gym-2"
    assert _tool_keys(world.local) == {("git", "status"), (None, "lookup")}


def test_a_given_revision_is_pinned_instead_of_the_current_one(world: World) -> None:
    system = world.open()
    first = system.registry.create(REVIEWER)
    system.registry.update("reviewer", {"instructions": "Only style."})
    session = system.sessions.start("reviewer", revision_id=first.current_revision_id)
    assert session.revision_number == 1
    world.local.add(ak.script.text("ok"))
    run_turn(system, session.id, "go")
    assert world.local.requests[-1].context.instructions == REVIEWER["instructions"]


def test_a_definition_without_a_model_runs_on_the_systems_default(world: World) -> None:
    system = world.open()
    system.registry.create({"id": "plain", "instructions": "Be brief."})
    session = system.sessions.start("plain")
    world.other.add(ak.script.text("ok"))
    run_turn(system, session.id, "go")
    [request] = world.other.requests
    assert request.selection.model == "o-1"
    assert request.context.instructions == "Be brief."
    # An empty toolbox offers every tool the system offers (docs/sessions.md).
    assert _tool_keys(world.other) == {("git", "status"), (None, "lookup"), (None, "shell")}


def test_a_definition_whose_text_holds_a_nul_runs_its_sessions(world: World) -> None:
    # Any text a definition holds may carry a NUL, as on SQLite: PostgreSQL's jsonb refused
    # the definition's document when a turn read its driver (a 500 at every message).
    system = world.open()
    system.registry.create({"id": "nul", "description": "a\x00b", "instructions": "Be\x00 brief."})
    session = system.sessions.start("nul")
    world.other.add(ak.script.text("ok"))
    run_turn(system, session.id, "go")
    [request] = world.other.requests
    assert request.context.instructions == "Be\x00 brief."


def test_an_agent_made_without_a_definition_keeps_the_systems_configuration(
    world: World,
) -> None:
    system = world.open()
    agent = system.create()
    world.other.add(ak.script.text("ok"))
    run_turn(system, agent.id, "go")
    assert world.other.requests[-1].context.instructions == SYSTEM_INSTRUCTIONS
    assert _tool_keys(world.other) == {("git", "status"), (None, "lookup"), (None, "shell")}


# -- refusals: each at start, nothing written -----------------------------------------------
def _written_under_other_providers(world: World, definition: dict[str, object]) -> None:
    """Write ``definition`` as a system with other providers did (``providers.toml`` edited,
    a daemon restarted since): its ``model.id`` was checked then, against those."""
    providers = ak.Providers()
    providers.add("nowhere", ak.ScriptedModel(models=["m"]), kind="gym")
    providers.add("local", ak.ScriptedModel(models=["gym-9"]), kind="gym")
    system = ak.AgentSystem.open(world.path, providers=providers)
    try:
        system.registry.create(definition)
    finally:
        system.close(timeout_seconds=10)


def _refused(
    world: World,
    definition: dict[str, object],
    error: type[Exception],
    *,
    written_elsewhere: bool = False,
) -> Exception:
    if written_elsewhere:
        _written_under_other_providers(world, definition)
    system = world.open()
    if not written_elsewhere:
        system.registry.create(definition)
    with pytest.raises(error) as raised:
        system.sessions.start(str(definition["id"]), id="refused1")
    with pytest.raises(UnknownSessionError):
        system.sessions.get("refused1")
    assert system.sessions.list(include_archived=True) == []
    return raised.value


def test_an_unknown_tool_id_is_refused_at_start(world: World) -> None:
    error = _refused(
        world, {"id": "d", "toolbox": {"toolIds": ["lookup", "deploy"]}}, SessionConfigError
    )
    assert isinstance(error, SessionConfigError)
    assert error.field == "toolbox.toolIds[1]"
    assert '"deploy"' in str(error)


def test_a_driver_other_than_agentkeep_is_refused_naming_it(world: World) -> None:
    error = _refused(world, {"id": "d", "driver": "claude-code"}, UnsupportedDriverError)
    assert "claude-code" in str(error)


def test_an_unregistered_provider_is_refused(world: World) -> None:
    # Written while "nowhere" was registered: readable now, but no session starts.
    definition = {"id": "d", "model": {"id": "nowhere/m"}}
    error = _refused(world, definition, SessionConfigError, written_elsewhere=True)
    assert isinstance(error, SessionConfigError)
    assert error.field == "model.id"
    assert '"nowhere"' in str(error)


def test_a_model_the_provider_does_not_serve_is_refused(world: World) -> None:
    definition = {"id": "d", "model": {"id": "local/gym-9"}}
    _refused(world, definition, ak.ModelNotServedError, written_elsewhere=True)


def test_a_model_id_without_a_provider_is_refused_when_written(world: World) -> None:
    system = world.open()
    with pytest.raises(InvalidDefinitionError) as raised:
        system.registry.create({"id": "d", "model": {"id": "gym-1"}})
    assert raised.value.field == "model.id"
    assert "registered providers: local, other" in str(raised.value)


def test_an_unknown_model_setting_is_refused(world: World) -> None:
    definition = {"id": "d", "model": {"id": "local/gym-1", "settings": {"temperature": 0.2}}}
    error = _refused(world, definition, SessionConfigError)
    assert isinstance(error, SessionConfigError)
    assert error.field == "model.settings.temperature"


def test_a_bad_setting_value_is_refused(world: World) -> None:
    definition = {"id": "d", "model": {"id": "local/gym-1", "settings": {"effort": "turbo"}}}
    error = _refused(world, definition, SessionConfigError)
    assert "turbo" in str(error)


def test_unknown_definitions_and_revisions_are_refused(world: World) -> None:
    system = world.open()
    system.registry.create(REVIEWER)
    other = system.registry.create({"id": "other"})
    with pytest.raises(UnknownDefinitionError):
        system.sessions.start("nobody")
    with pytest.raises(UnknownRevisionError):
        system.sessions.start("reviewer", revision_id="nosuchrevision")
    with pytest.raises(UnknownRevisionError):  # a revision of another definition
        system.sessions.start("reviewer", revision_id=other.current_revision_id)
    assert system.sessions.list() == []


def test_a_taken_or_invalid_id_is_refused(world: World) -> None:
    system = world.open()
    system.registry.create(REVIEWER)
    system.sessions.start("reviewer", id="taken1")
    with pytest.raises(ak.AgentExistsError):
        system.sessions.start("reviewer", id="taken1")
    with pytest.raises(ak.InvalidConfigError):
        system.sessions.start("reviewer", id="Not Valid")


def test_a_deleted_definitions_sessions_keep_working_but_new_ones_are_refused(
    world: World,
) -> None:
    system = world.open()
    record = system.registry.create(REVIEWER)
    session = system.sessions.start("reviewer")
    system.registry.delete("reviewer")
    with pytest.raises(DefinitionDeletedError):
        system.sessions.start("reviewer")
    with pytest.raises(DefinitionDeletedError):
        system.sessions.start("reviewer", revision_id=record.current_revision_id)
    world.local.add(ak.script.text("still here"))
    run_turn(system, session.id, "go")
    assert world.local.requests[-1].context.instructions == REVIEWER["instructions"]
    assert system.sessions.get(session.id).definition_id == "reviewer"


def test_the_wire_names_are_seed_002s(world: World) -> None:
    system = world.open()
    system.registry.create(REVIEWER)
    session = system.sessions.start("reviewer")
    wire = msgspec.json.decode(msgspec.json.encode(session))
    assert set(wire) == {
        "id",
        "agentId",
        "agentRevisionId",
        "agentRevision",
        "status",
        "driverSessionId",
        "metadata",
        "createdAtMs",
        "updatedAtMs",
        "archivedAtMs",
        "owes",  # agentkeep's: work owed that no live turn holds
    }
    assert msgspec.json.decode(msgspec.json.encode(session), type=SessionRecord) == session


def test_the_permission_mode_setting_becomes_the_sessions(world: World) -> None:
    system = world.open()
    settings = {"permissionMode": "read_only", "effort": None}
    system.registry.create({"id": "d", "model": {"id": "local/gym-1", "settings": settings}})
    session = system.sessions.start("d")
    chosen = system.settings(session.id)
    assert (chosen.provider, chosen.model) == ("local", "gym-1")
    assert chosen.permission_mode == "read_only"
    assert chosen.effort is None


def test_a_pinned_tool_the_reopened_system_lacks_is_not_offered(world: World) -> None:
    system = world.open()
    system.registry.create({"id": "d", "toolbox": {"toolIds": ["shell", "lookup"]}})
    session = system.sessions.start("d")
    system.close(timeout_seconds=10)

    system = world.open(tools=[lookup])  # "shell" is gone
    world.other.add(ak.script.text("ok"))
    run_turn(system, session.id, "go")
    assert _tool_keys(world.other) == {(None, "lookup")}
