"""A definition's ``model.id`` is checked when it is written, against the
system's providers: a create or a patch naming an unregistered provider, or a model its
provider does not serve, is refused naming ``model.id`` and what is registered; nothing is
written. A definition written under other providers stays readable and editable."""

from __future__ import annotations

import pytest

import agentkeep as ak
from agentkeep.registry import DefinitionDeletedError, InvalidDefinitionError
from agentkeep.sessions import SessionConfigError

from .conftest import World


def _refusal(call: object) -> InvalidDefinitionError:
    assert callable(call)
    with pytest.raises(InvalidDefinitionError) as raised:
        call()
    return raised.value


def test_a_create_naming_an_unregistered_provider_is_refused(world: World) -> None:
    system = world.open()
    error = _refusal(lambda: system.registry.create({"id": "d", "model": {"id": "nope/m-1"}}))
    assert error.field == "model.id"
    assert 'provider "nope" is not registered in this system (registered: local, other)' in str(
        error
    )
    assert system.registry.list(include_deleted=True) == []  # nothing was written


def test_a_create_naming_a_model_the_provider_does_not_serve_is_refused(world: World) -> None:
    system = world.open()
    error = _refusal(lambda: system.registry.create({"id": "d", "model": {"id": "local/gym-9"}}))
    assert error.field == "model.id"
    assert '"local" does not serve model "gym-9"' in str(error)
    assert "gym-1, gym-2" in str(error)  # what it serves
    assert system.registry.list(include_deleted=True) == []


def test_a_patch_naming_an_unknown_model_is_refused_and_writes_nothing(world: World) -> None:
    system = world.open()
    system.registry.create({"id": "d", "model": {"id": "local/gym-1"}})
    error = _refusal(lambda: system.registry.update("d", {"model": {"id": "other/gym-1"}}))
    assert error.field == "model.id"
    record = system.registry.get("d")
    assert record.current_revision == 1
    assert record.definition.model == ak.registry.ModelRef(id="local/gym-1")
    # A served model, and no model at all, are written.
    assert system.registry.update("d", {"model": {"id": "other/o-1"}}).changed
    assert system.registry.update("d", {"model": None}).changed


def test_a_definition_of_an_injected_driver_names_its_own_models(world: World) -> None:
    # The driver interprets its revision itself (docs/drivers.md): its model is not checked.
    system = world.open()
    record = system.registry.create({"id": "d", "driver": "codex", "model": {"id": "openai/x"}})
    assert record.definition.model is not None
    # Moving it to the native driver is a write the check judges.
    error = _refusal(lambda: system.registry.update("d", {"driver": "agentkeep"}))
    assert error.field == "model.id"


def test_a_definition_whose_provider_went_away_stays_readable_and_editable(world: World) -> None:
    providers = ak.Providers()
    providers.add("gone", ak.ScriptedModel(models=["g-1"]), kind="gym")
    before = ak.AgentSystem.open(world.path, providers=providers)
    try:
        before.registry.create({"id": "d", "model": {"id": "gone/g-1"}})
    finally:
        before.close(timeout_seconds=10)

    system = world.open()  # reopened without "gone"
    assert system.registry.get("d").definition.model == ak.registry.ModelRef(id="gone/g-1")
    # A patch that leaves the model alone is written; one that names it again is judged.
    assert system.registry.update("d", {"name": "Renamed"}).changed
    error = _refusal(lambda: system.registry.update("d", {"model": {"id": "gone/g-1"}}))
    assert "registered: local, other" in str(error)
    # A session of it is refused at start, as before.
    with pytest.raises(SessionConfigError) as refused:
        system.sessions.start("d")
    assert refused.value.field == "model.id"


def test_a_patch_is_judged_before_the_definition_is_read(world: World) -> None:
    # Invalid input is a refusal naming the field whatever the state: a deleted definition
    # (410 otherwise) or an absent one.
    system = world.open()
    system.registry.create({"id": "d"})
    system.registry.delete("d")
    for definition_id in ("d", "absent"):
        for patch, field in (
            ({"name": ""}, "name"),
            ({"id": "X"}, "id"),
            ({"toolbox": {"toolIds": [""]}}, "toolbox.toolIds[0]"),
        ):
            error = _refusal(lambda: system.registry.update(definition_id, patch))  # noqa: B023
            assert error.field == field
    with pytest.raises(DefinitionDeletedError):
        system.registry.update("d", {"name": "ok"})
