"""The ledger alone tells the whole conversation (UIs derive
messages from it). The native loop appends a ``message`` event holding the assistant's
``AgentMessage`` when a response completes, so reading only ``message`` events shows both
sides, in order, in the wire's shape."""

from __future__ import annotations

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.sessions import SessionEvent

from .conftest import LedgerWorld, all_events


def _said(event: SessionEvent) -> tuple[str, str]:
    message = event.data["message"]
    assert set(message) == {"role", "parts"}  # the wire's AgentMessage, nothing else
    assert message["role"] == event.data["role"]
    return message["role"], "".join(p["text"] for p in message["parts"] if p["type"] == "text")


def test_message_events_alone_show_both_sides_of_the_conversation(world: LedgerWorld) -> None:
    world.model.add(
        script.tool_call("echo", {"text": "hi"}, call_id="c1", text="Let me check."),
        script.reasoning("thinking", answer="It says hi."),
        script.text("Bye."),
    )
    system = world.open()
    agent = system.create()
    agent.send(ak.user("What does echo say?"), id="m1")
    agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("Thanks."), id="m2")
    agent.wait_for_idle(timeout_seconds=10)

    events = all_events(system, agent.id)
    said = [_said(e) for e in events if e.type == "message"]
    assert said == [
        ("user", "What does echo say?"),
        ("assistant", "Let me check."),  # the response that called the tool said this
        ("assistant", "It says hi."),  # reasoning is in assistant.block, not in the message
        ("user", "Thanks."),
        ("assistant", "Bye."),
    ]
    # Each assistant message belongs to the turn its response answered or worked for, and
    # the turn's result is that same AgentMessage.
    turns = system.sessions.turns(agent.id)
    answers = [e for e in events if e.type == "message" and e.data["role"] == "assistant"]
    assert [e.turn_id for e in answers] == [turns[0].id, turns[0].id, turns[1].id]
    assert turns[0].result == {"message": answers[1].data["message"]}
    assert turns[1].result == {"message": answers[2].data["message"]}


def test_a_response_with_nothing_to_say_appends_no_message(world: LedgerWorld) -> None:
    world.model.add(script.tool_call("echo", {"text": "x"}, call_id="c1"), script.text("ok"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"), id="m1")
    agent.wait_for_idle(timeout_seconds=10)
    roles = [e.data["role"] for e in all_events(system, agent.id) if e.type == "message"]
    assert roles == ["user", "assistant"]  # the tool-only response said nothing
