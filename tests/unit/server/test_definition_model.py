"""``POST``/``PATCH /v1/agents`` check ``model.id`` against the daemon's providers:
an unregistered provider or an unserved model is a 422 naming ``model.id`` and
what is registered, and nothing is written; a session start keeps its own check."""

from __future__ import annotations

from pathlib import Path

import httpx

import agentkeep as ak

from .conftest import Served, serve


def _refused(response: httpx.Response) -> dict[str, object]:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_definition"
    assert error["details"] == {"field": "model.id"}
    return error


def test_a_create_naming_an_unregistered_provider_is_a_422(client: httpx.Client) -> None:
    error = _refused(client.post("/v1/agents", json={"id": "d", "model": {"id": "nope/m-1"}}))
    assert error["message"] == (
        'model.id: provider "nope" is not registered in this system (registered: local)'
    )
    assert client.get("/v1/agents/d").status_code == 404  # nothing was written


def test_a_create_naming_an_unserved_model_is_a_422(client: httpx.Client) -> None:
    error = _refused(client.post("/v1/agents", json={"id": "d", "model": {"id": "local/gym-9"}}))
    assert '"local" does not serve model "gym-9"' in str(error["message"])
    assert "gym-1" in str(error["message"])
    error = _refused(client.post("/v1/agents", json={"id": "d", "model": {"id": "gym-1"}}))
    assert "registered providers: local" in str(error["message"])
    assert client.get("/v1/agents/d").status_code == 404


def test_a_patch_naming_an_unknown_model_is_a_422(client: httpx.Client) -> None:
    created = client.post("/v1/agents", json={"id": "d", "model": {"id": "local/gym-1"}})
    assert created.status_code == 201, created.text
    _refused(client.patch("/v1/agents/d", json={"model": {"id": "elsewhere/gym-1"}}))
    current = client.get("/v1/agents/d").json()
    assert (current["currentRevision"], current["definition"]["model"]["id"]) == (
        1,
        "local/gym-1",
    )
    renamed = client.patch("/v1/agents/d", json={"name": "Renamed"})
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["currentRevision"] == 2


def test_a_definition_written_under_other_providers_stays_readable(tmp_path: Path) -> None:
    home = tmp_path / "state"
    providers = ak.Providers()
    providers.add("gone", ak.ScriptedModel(models=["g-1"]), kind="gym")
    with ak.AgentSystem.open(home, providers=providers) as before:
        before.registry.create({"id": "old", "model": {"id": "gone/g-1"}})
    running: Served = serve(home)  # the daemon restarted with other providers
    try:
        with running.client() as client:
            shown = client.get("/v1/agents/old")
            assert shown.status_code == 200, shown.text
            assert shown.json()["definition"]["model"]["id"] == "gone/g-1"
            started = client.post("/v1/sessions", json={"agentId": "old"})
            error = started.json()["error"]
            assert (started.status_code, error["code"]) == (422, "invalid_session_config")
            assert error["details"]["field"] == "model.id"
            assert client.patch("/v1/agents/old", json={"name": "Kept"}).status_code == 200
    finally:
        running.stop()
