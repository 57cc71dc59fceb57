"""An AgentSystem on PostgreSQL: a whole turn with the local deterministic model and a
durable tool, its transcript, ledger and turn read back, then read again after a reopen."""

from __future__ import annotations

from pathlib import Path

import msgspec

import agentkeep as ak


class TextArgs(msgspec.Struct):
    text: str


@ak.tool(durable=True)
def word_count(ctx: ak.ToolContext, args: TextArgs) -> int:
    """Count the words of a text."""
    return len(args.text.split())


def _open(tmp_path: Path, url: str) -> ak.AgentSystem:
    providers = ak.Providers()
    providers.add("demo", ak.DemoModel(), kind="gym")
    return ak.AgentSystem.open(
        tmp_path / "state",
        providers=providers,
        provider="demo",
        model="demo-1",
        tools=[word_count],
        database=url,
    )


def test_a_turn_with_a_tool_runs_and_survives_a_reopen_on_postgres(
    tmp_path: Path, pg_url: str
) -> None:
    with _open(tmp_path, pg_url) as system:
        agent = system.create(ak.AgentConfig(metadata={"title": "demo"}))
        agent.send(ak.user('Count the words in "the quick brown fox"'))
        assert agent.wait_for_idle(timeout_seconds=60)
        answer = agent.transcript()[-1].content[0]
        assert isinstance(answer, ak.TextBlock)
        assert answer.text == '"the quick brown fox" has 4 words.'
        events = [event.type for event in system.events(agent.id)]
        agent_id = agent.id
    assert events[:3] == ["turn.queued", "message.accepted", "turn.running"]
    assert "turn.completed" in events
    # Nothing of the store is in the state directory: it is all in the schema.
    assert not (tmp_path / "state" / "agents.db").exists()
    with _open(tmp_path, pg_url) as again:
        reopened = again.resolve(agent_id)
        answer = reopened.transcript()[-1].content[0]
        assert isinstance(answer, ak.TextBlock)
        assert answer.text == '"the quick brown fox" has 4 words.'
        sequences = [event.sequence for event in again.events(agent_id)]
        assert sequences == list(range(1, len(sequences) + 1))  # dense from 1
