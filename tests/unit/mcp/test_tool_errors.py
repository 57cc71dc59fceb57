"""What a model gets wrong comes back as a tool error naming the problem."""

from __future__ import annotations

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from tests.unit.mcp.conftest import TIMEOUT, World, call, call_error

from agentkeep.providers import script


def test_unknown_agents_and_sessions_are_tool_errors(world: World) -> None:
    async def body(client: Client) -> None:
        text = await call_error(client, "agents_get", {"agent_id": "nobody"})
        assert text == 'unknown_definition: Definition "nobody" does not exist.'
        text = await call_error(client, "talk_to_agent", {"agent_id": "nobody", "message": "hi"})
        assert text.startswith("unknown_definition:")
        text = await call_error(client, "agents_get_conversation", {"conversation_id": "nope"})
        assert text == 'unknown_session: Session "nope" does not exist.'
        text = await call_error(client, "talk_to_agent", {"session_id": "nope", "message": "hi"})
        assert text.startswith("unknown_session:")
        text = await call_error(client, "steer_agent", {"session_id": "nope", "message": "hi"})
        assert text.startswith("unknown_session:")
        text = await call_error(client, "cancel_turn", {"session_id": "nope"})
        assert text.startswith("unknown_session:")
        text = await call_error(client, "agents_delete", {"agent_id": "nobody"})
        assert text.startswith("unknown_definition:")

    world.session(body)


def test_invalid_definitions_name_the_field_and_write_nothing(world: World) -> None:
    async def body(client: Client) -> None:
        text = await call_error(client, "agents_create", {"id": "Bad Id"})
        assert text.startswith("invalid_definition: id:")
        text = await call_error(
            client, "agents_create", {"id": "ok", "toolbox": {"toolIds": ["a", 3]}}
        )
        assert text.startswith("invalid_arguments: agents_create:")
        assert "toolbox.toolIds[1]" in text or "toolIds" in text
        text = await call_error(client, "agents_create", {"id": "ok", "colour": "red"})
        assert "colour" in text
        await call(client, "agents_create", {"id": "ok"})
        text = await call_error(client, "agents_create", {"id": "ok"})
        assert text.startswith("definition_exists:")
        text = await call_error(
            client, "agents_update", {"agent_id": "ok", "patch": {"id": "other"}}
        )
        assert text.startswith("invalid_definition:")
        await call(client, "agents_delete", {"agent_id": "ok"})
        text = await call_error(client, "agents_update", {"agent_id": "ok", "patch": {"name": "x"}})
        assert text.startswith("definition_deleted:")

    world.session(body)
    assert world.system.registry.get("ok", include_deleted=True).current_revision == 1


def test_a_model_the_system_does_not_serve_is_refused_when_written(world: World) -> None:
    # Model.id is checked at create and patch, as over REST and the CLI.
    async def body(client: Client) -> None:
        text = await call_error(client, "agents_create", {"id": "far", "model": {"id": "nope/m-1"}})
        assert text == (
            'invalid_definition: model.id: provider "nope" is not registered in this system '
            "(registered: local)"
        )
        await call(client, "agents_create", {"id": "near", "model": {"id": "local/gym-1"}})
        text = await call_error(
            client, "agents_update", {"agent_id": "near", "patch": {"model": {"id": "local/x"}}}
        )
        assert text.startswith('invalid_definition: model.id: provider "local" does not serve')

    world.session(body)
    assert [r.id for r in world.system.registry.list(include_deleted=True)] == ["near"]
    assert world.system.registry.get("near").current_revision == 1


def test_arguments_are_checked_against_the_schema(world: World) -> None:
    world.system.registry.create({"id": "a"})

    async def body(client: Client) -> None:
        text = await call_error(client, "agents_get", {})
        assert text.startswith("invalid_arguments: agents_get:")
        assert "agent_id" in text
        text = await call_error(client, "agents_get", {"agent_id": 7})
        assert "`$.agent_id`" in text
        text = await call_error(client, "agents_list", {"limit": 0})
        assert "`$.limit`" in text
        text = await call_error(client, "talk_to_agent", {"agent_id": "a", "mesage": "typo"})
        assert "mesage" in text
        text = await call_error(
            client, "talk_to_agent", {"agent_id": "a", "agent": "b", "message": "hi"}
        )
        assert text.startswith('invalid_arguments: agent_id "a" and agent "b" differ')
        text = await call_error(client, "talk_to_agent", {"message": "hi"})
        assert text.startswith("invalid_arguments:")
        assert "agent_id" in text
        text = await call_error(client, "talk_to_agent", {"agent_id": "a"})
        assert text.startswith("invalid_message:")
        text = await call_error(client, "cancel_turn", {})
        assert text.startswith("invalid_arguments: Name the session")
        text = await call_error(
            client, "talk_to_agent", {"agent_id": "a", "message": {"role": "user", "parts": []}}
        )
        assert text.startswith("invalid_message:")

    world.session(body)
    assert world.system.sessions.list() == []  # a refused talk starts no session


def test_an_unknown_tool_is_a_protocol_error(world: World) -> None:
    async def body(client: Client) -> None:
        with pytest.raises(MCPError, match="Unknown tool"):
            await client.call_tool("agents_frobnicate", {})

    world.session(body)


def test_conflicts_archived_sessions_mismatches_and_no_turn_to_cancel(world: World) -> None:
    world.model.add(script.text("one"))
    world.system.registry.create({"id": "helper"})
    world.system.registry.create({"id": "other"})

    async def body(client: Client) -> None:
        done = await call(
            client,
            "talk_to_agent",
            {"agent_id": "helper", "message": "first", "idempotency_key": "k1"},
        )
        conversation = done["conversation_id"]
        text = await call_error(
            client,
            "talk_to_agent",
            {"session_id": conversation, "message": "different", "idempotency_key": "k1"},
        )
        assert text.startswith("idempotency_conflict:")
        text = await call_error(
            client,
            "talk_to_agent",
            {"agent_id": "other", "session_id": conversation, "message": "x"},
        )
        assert text.startswith("session_mismatch:")
        assert '"helper"' in text
        text = await call_error(client, "cancel_turn", {"session_id": conversation})
        assert text.startswith("turn_state:")

        world.system.sessions.archive(conversation)
        text = await call_error(
            client, "talk_to_agent", {"session_id": conversation, "message": "more"}
        )
        assert text.startswith("session_archived:")

    world.session(body)
    assert len(world.model.requests) == 1  # nothing refused reached the model


def test_a_wait_that_times_out_is_a_tool_error_and_the_turn_goes_on(world: World) -> None:
    world.model.add(script.hang())
    world.system.registry.create({"id": "helper"})

    async def body(client: Client) -> None:
        text = await call_error(
            client,
            "talk_to_agent",
            {"agent_id": "helper", "message": "slow", "timeout_seconds": 0.2},
        )
        assert text.startswith("timeout: Turn ")
        assert "still running after 0.2 s" in text
        assert "agents_get_conversation" in text
        (session,) = world.system.sessions.list()
        read = await call(client, "agents_get_conversation", {"session_id": session.id})
        assert [t["status"] for t in read["turns"]] == ["running"]
        cancelled = await call(client, "cancel_turn", {"session_id": session.id})
        assert cancelled["turn"]["status"] == "cancelled"

    world.session(body)
    assert world.model.wait_for_requests(1, timeout_seconds=TIMEOUT)
