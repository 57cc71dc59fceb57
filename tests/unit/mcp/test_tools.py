"""`agentkeep mcp`'s tools, in-process through the SDK's client."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.to_thread
from mcp import Client
from tests.unit.conformance.seed002 import SEED_TOOLS
from tests.unit.mcp.conftest import TIMEOUT, World, call, call_error

from agentkeep.mcp.tools import TOOLS, talk_session_id
from agentkeep.mcp.types import schema_of
from agentkeep.providers import script


def test_list_tools_shows_the_ten_tools_with_their_msgspec_schemas(world: World) -> None:
    async def body(client: Client) -> None:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(listed) == SEED_TOOLS | {"steer_agent", "cancel_turn", "settle_session"}
        for spec in TOOLS:
            tool = listed[spec.name]
            assert tool.input_schema == schema_of(spec.arguments), spec.name
            assert tool.output_schema == schema_of(spec.result), spec.name
            assert tool.input_schema["type"] == "object"
            assert tool.output_schema is not None
            assert tool.output_schema["type"] == "object"
            assert tool.description
        talk = listed["talk_to_agent"].input_schema["properties"]
        legacy = {"agent", "conversation_id", "description", "prompt"}
        new = {"agent_id", "session_id", "message", "run_in_background", "idempotency_key"}
        assert legacy | new <= set(talk)
        assert listed["talk_to_agent"].input_schema["additionalProperties"] is False
        create = listed["agents_create"].input_schema
        assert create["required"] == ["id"]
        assert {"instructions", "model", "toolbox", "authRef"} <= set(create["properties"])
        assert "conversation_id" in listed["talk_to_agent"].output_schema["properties"]
        assert listed["agents_get"].annotations.read_only_hint is True
        assert listed["agents_delete"].annotations.destructive_hint is True

    world.session(body)


def test_agents_create_get_list_update_delete(world: World) -> None:
    async def body(client: Client) -> None:
        created = await call(
            client,
            "agents_create",
            {"id": "reviewer", "instructions": "Find risks.", "toolbox": {"toolIds": []}},
        )
        assert (created["id"], created["currentRevision"]) == ("reviewer", 1)
        assert created["definition"]["instructions"] == "Find risks."
        assert created["definition"]["driver"] == {"id": "agentkeep", "config": {}}
        await call(client, "agents_create", {"id": "writer"})

        got = await call(client, "agents_get", {"agent_id": "reviewer"})
        assert got == created
        listed = await call(client, "agents_list", {})
        assert [a["id"] for a in listed["agents"]] == ["reviewer", "writer"]
        assert listed["next_after"] is None
        page = await call(client, "agents_list", {"limit": 1})
        assert ([a["id"] for a in page["agents"]], page["next_after"]) == (["reviewer"], "reviewer")
        rest = await call(client, "agents_list", {"after": "reviewer", "limit": 1})
        assert [a["id"] for a in rest["agents"]] == ["writer"]

        update = await call(
            client,
            "agents_update",
            {"agent_id": "reviewer", "patch": {"description": "Reviews", "model": None}},
        )
        assert update["changed"] is True
        assert update["revision"]["number"] == 2
        assert update["record"]["definition"]["description"] == "Reviews"
        again = await call(
            client, "agents_update", {"agent_id": "reviewer", "patch": {"description": "Reviews"}}
        )
        assert (again["changed"], again["revision"]["number"]) == (False, 2)

        deleted = await call(client, "agents_delete", {"agent_id": "writer"})
        assert deleted["deletedAt"].endswith("Z")
        listed = await call(client, "agents_list", {})
        assert [a["id"] for a in listed["agents"]] == ["reviewer"]
        everything = await call(client, "agents_list", {"include_deleted": True})
        assert [a["id"] for a in everything["agents"]] == ["reviewer", "writer"]
        tomb = await call(client, "agents_get", {"agent_id": "writer", "include_deleted": True})
        assert tomb["deletedAt"] == deleted["deletedAt"]

    world.session(body)
    # What the tools did is in the registry, not in the server.
    assert world.system.registry.get("reviewer").current_revision == 2


def test_talk_to_agent_starts_a_session_waits_for_the_answer_and_continues_it(
    world: World,
) -> None:
    world.model.add(script.text("hello back"), script.text("second answer"))

    async def body(client: Client) -> None:
        await call(client, "agents_create", {"id": "helper", "instructions": "Be brief."})
        first = await call(client, "talk_to_agent", {"agent_id": "helper", "message": "hello"})
        assert first["started_session"] is True
        assert (first["status"], first["answer"], first["duplicate"]) == (
            "completed",
            "hello back",
            False,
        )
        conversation = first["conversation_id"]
        assert first["turn"]["sessionId"] == conversation  # the durable session id
        assert first["agent_id"] == "helper"

        # The legacy fields continue the same session.
        second = await call(
            client,
            "talk_to_agent",
            {"conversation_id": conversation, "prompt": "and again", "description": "follow-up"},
        )
        assert (second["conversation_id"], second["started_session"]) == (conversation, False)
        assert (second["answer"], second["turn"]["number"]) == ("second answer", 2)

        read = await call(client, "agents_get_conversation", {"conversation_id": conversation})
        assert read["session"]["agentId"] == "helper"
        assert [t["status"] for t in read["turns"]] == ["completed", "completed"]
        assert read["answer"] == "second answer"
        sequences = [e["sequence"] for e in read["events"]]
        assert sequences == list(range(1, len(sequences) + 1))
        accepted = [e for e in read["events"] if e["type"] == "message.accepted"]
        assert accepted[1]["data"]["metadata"] == {"description": "follow-up"}
        page = await call(
            client,
            "agents_get_conversation",
            {"session_id": conversation, "events_after": 2, "events_limit": 2},
        )
        assert [e["sequence"] for e in page["events"]] == [3, 4]
        assert page["next_events_after"] == 4

    world.session(body)
    # The system prompt of the session is the definition's instructions.
    assert "Be brief." in str(world.model.requests[0].context)


def test_a_structured_message_keeps_its_parts_and_timestamps_are_iso(world: World) -> None:
    world.model.add(script.text("read it"))

    async def body(client: Client) -> None:
        await call(client, "agents_create", {"id": "helper"})
        message: dict[str, Any] = {
            "role": "user",
            "parts": [
                {"type": "text", "text": "Review"},
                {"type": "reference", "uri": "file:///a.py", "name": "a.py"},
                {"type": "data", "name": "limits", "data": {"lines": 3}},
            ],
        }
        done = await call(client, "talk_to_agent", {"agent": "helper", "message": message})
        assert done["answer"] == "read it"
        # The parts are kept verbatim (the wire's AgentMessage), not flattened to text.
        message["parts"][1]["mediaType"] = None
        assert done["turn"]["input"] == message
        assert done["turn"]["result"] == {
            "message": {"role": "assistant", "parts": [{"type": "text", "text": "read it"}]}
        }
        # ISO 8601 timestamps, as REST shows them; event data keys in camelCase.
        assert done["turn"]["createdAt"].endswith("Z")
        assert "createdAtMs" not in done["turn"]
        seen = await call(
            client, "agents_get_conversation", {"session_id": done["turn"]["sessionId"]}
        )
        assert seen["session"]["createdAt"].endswith("Z")
        accepted = next(e for e in seen["events"] if e["type"] == "message.accepted")
        assert accepted["data"]["message"] == message
        assert accepted["createdAt"].endswith("Z")
        said = [e["data"] for e in seen["events"] if e["type"] == "message"]
        assert said[-1] == {"role": "assistant", "message": done["turn"]["result"]["message"]}

    world.session(body)


def test_a_keyed_talk_without_a_session_is_retry_safe(world: World) -> None:
    world.model.add(script.text("once"))

    async def body(client: Client) -> None:
        await call(client, "agents_create", {"id": "helper"})
        args = {"agent_id": "helper", "message": "do it", "idempotency_key": "req-1"}
        first = await call(client, "talk_to_agent", args)
        retry = await call(client, "talk_to_agent", args)
        assert first["conversation_id"] == talk_session_id("helper", "req-1")
        assert retry["conversation_id"] == first["conversation_id"]
        assert (retry["duplicate"], retry["started_session"]) == (True, False)
        assert retry["turn"]["id"] == first["turn"]["id"]
        assert retry["answer"] == "once"

    world.session(body)
    assert len(world.model.requests) == 1  # the model answered once


def test_background_talk_then_steer_joins_the_turn_and_cancel_turn_cancels_it(
    world: World,
) -> None:
    world.model.add(script.hang(), script.text("Next done."))

    async def body(client: Client) -> None:
        await call(client, "agents_create", {"id": "helper"})
        started = await call(
            client,
            "talk_to_agent",
            {"agent_id": "helper", "message": "work", "run_in_background": True},
        )
        assert (started["status"], started["answer"]) == ("queued", None)
        conversation = started["conversation_id"]
        assert world.model.wait_for_requests(1, timeout_seconds=TIMEOUT)  # it runs

        steered = await call(
            client, "steer_agent", {"session_id": conversation, "message": "focus on tests"}
        )
        assert steered["turn"]["id"] == started["turn"]["id"]  # joined the running turn
        queued = await call(
            client,
            "talk_to_agent",
            {"session_id": conversation, "message": "next", "run_in_background": True},
        )

        cancelled = await call(client, "cancel_turn", {"conversation_id": conversation})
        assert cancelled["turn"]["id"] == started["turn"]["id"]
        assert cancelled["turn"]["status"] == "cancelled"
        # The steer the turn joined was cancelled with it (it never runs
        # as work of no turn), and the turn queued behind runs normally.
        done = await anyio.to_thread.run_sync(
            lambda: world.system.sessions.wait(
                conversation, queued["turn"]["id"], timeout_seconds=TIMEOUT
            )
        )
        assert done.status == "completed"
        read = await call(client, "agents_get_conversation", {"session_id": conversation})
        assert [t["status"] for t in read["turns"]] == ["cancelled", "completed"]
        assert not any("focus on tests" in str(m) for m in world.system.transcript(conversation))
        assert len(world.model.requests) == 2

    world.session(body)


def test_cancel_turn_reaches_a_turn_that_talk_to_agent_is_waiting_for(world: World) -> None:
    world.model.add(script.hang())
    world.system.registry.create({"id": "helper"})

    async def body(client: Client) -> None:
        talked: dict[str, Any] = {}

        async def talk() -> None:
            talked.update(
                await call(
                    client,
                    "talk_to_agent",
                    {"agent_id": "helper", "message": "slow", "idempotency_key": "t1"},
                )
            )

        async with anyio.create_task_group() as group:
            group.start_soon(talk)
            # The server answers while the talk waits: the model is asked, then the cancel
            # (a second request of the same client) ends the turn the talk is waiting for.
            await anyio.to_thread.run_sync(
                lambda: world.model.wait_for_requests(1, timeout_seconds=TIMEOUT)
            )
            session = talk_session_id("helper", "t1")
            cancelled = await call(client, "cancel_turn", {"session_id": session})
            assert cancelled["turn"]["status"] == "cancelled"
        assert (talked["status"], talked["answer"]) == ("cancelled", None)
        assert talked["turn"]["error"]["code"] == "cancelled"

    world.session(body)


def test_settle_session_ends_a_failed_turns_owed_work(world: World) -> None:
    """Owed work no turn holds, over MCP: cancel_turn names settle_session, which gets out."""
    world.model.add(script.error("internal_error", "the vendor is down"))

    async def body(client: Client) -> None:
        await call(client, "agents_create", {"id": "helper"})
        talked = await call(client, "talk_to_agent", {"agent_id": "helper", "message": "q"})
        assert talked["status"] == "failed"
        session = talked["conversation_id"]
        await anyio.to_thread.run_sync(
            lambda: world.system.wait_for_idle(session, timeout_seconds=TIMEOUT)
        )
        read = await call(client, "agents_get_conversation", {"session_id": session})
        assert "the vendor is down" in read["session"]["owes"]["reason"]
        refused = await call_error(client, "cancel_turn", {"session_id": session})
        assert "turn_state" in refused
        assert "settle" in refused
        settled = await call(
            client, "settle_session", {"conversation_id": session, "note": "not needed"}
        )
        assert settled["session"]["owes"] is None
        assert world.system.sessions.archive(session).status == "archived"

    world.session(body)
