"""A passivation timer that fires between a send's directory lookup and its hand-over must not
leave the new actor counted in an entry the directory already dropped: ``wait_for_idle`` would
then consult a fresh entry that knows nothing of the running turn and return at once."""

from __future__ import annotations

from typing import Any

from tests.unit.loop.conftest import World

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import AssistantMessage, TextBlock


def test_a_send_racing_passivation_is_still_waited_for(world: World) -> None:
    world.model.add(
        script.text("first"), script.tool_call("wait", {"text": "g"}), script.text("ok")
    )
    system = world.open()
    agent = system.create()
    agent.send(ak.user("one"))
    assert agent.wait_for_idle(timeout_seconds=10)

    registry: Any = system.internals.agents
    directory = registry._directory
    real_get_or_make = directory.get_or_make
    fired = []

    def get_or_make_then_passivate(agent_id: str) -> Any:
        known = real_get_or_make(agent_id)
        if not fired:  # the idle-grace timer fires right here, once
            fired.append(agent_id)
            registry._passivate(agent_id)
        return known

    directory.get_or_make = get_or_make_then_passivate
    try:
        agent.send(ak.user("two"))
    finally:
        directory.get_or_make = real_get_or_make
    assert fired == [agent.id]

    gate = world.gate("g")
    assert gate.entered.wait(10)  # the second turn is running its tool, held by the gate
    # Busy: the wait must time out, not return at once on a forgotten entry.
    assert not agent.wait_for_idle(timeout_seconds=0.3)
    gate.release.set()
    assert agent.wait_for_idle(timeout_seconds=10)
    last = agent.transcript()[-1]
    assert isinstance(last, AssistantMessage)
    assert last.content == (TextBlock(text="ok"),)
