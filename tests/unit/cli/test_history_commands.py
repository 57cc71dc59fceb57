"""A typo'd ``--model`` is refused and loses nothing; ``transcript --all`` shows what a
model switch archived; ``purge ID --archived`` is the one command that deletes it."""

from __future__ import annotations

import json
from typing import Any

from click.testing import Result

from agentkeep.cli.output import EXIT_BAD_INPUT


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _texts(messages: list[dict[str, Any]]) -> list[str]:
    return [
        block["text"]
        for message in messages
        for block in message.get("content", [])
        if block.get("type") == "text"
    ]


def _agent_with_a_conversation(invoke: Any) -> None:
    assert invoke("session", "start", "--id", "alpha").exit_code == 0
    sent = invoke(
        "session", "send", "alpha", "hello", "--provider", "local", "--model", "gym-1", "--wait"
    )
    assert sent.exit_code == 0, sent.stderr


def test_a_typod_model_is_refused_and_the_conversation_is_untouched(invoke: Any) -> None:
    _agent_with_a_conversation(invoke)
    before = as_json(invoke("session", "transcript", "alpha", json_mode=True))

    refused = invoke("session", "send", "alpha", "oops", "--model", "gym-2", "--wait")

    assert refused.exit_code == EXIT_BAD_INPUT
    assert 'does not serve model "gym-2"' in refused.stderr
    assert "gym-1" in refused.stderr  # it names what the provider serves
    assert "Traceback" not in refused.stderr
    assert as_json(invoke("session", "transcript", "alpha", json_mode=True)) == before
    everything = as_json(invoke("session", "transcript", "alpha", "--all", json_mode=True))
    assert [e["archived"] for e in everything["epochs"]] == [False]  # nothing was archived
    shown = as_json(invoke("session", "show", "alpha", json_mode=True))["runtime"]
    assert shown["queued"] == []
    assert shown["settings"]["model"] == "gym-1"


def test_transcript_all_shows_the_archived_epoch_and_purge_deletes_only_it(
    invoke: Any,
) -> None:
    _agent_with_a_conversation(invoke)
    switched = invoke(
        "session", "send", "alpha", "what is 2 * 3", "--provider", "demo", "--model", "demo-1"
    )
    assert switched.exit_code == 0, switched.stderr
    assert invoke("resume").exit_code == 0

    current = as_json(invoke("session", "transcript", "alpha", json_mode=True))
    assert "hello" not in _texts(current["messages"])  # the provider's view restarted

    epochs = as_json(invoke("session", "transcript", "alpha", "--all", json_mode=True))["epochs"]
    assert [(e["number"], e["archived"], e["reason"]) for e in epochs] == [
        (1, True, "model_switch"),
        (2, False, None),
    ]
    assert (epochs[0]["provider"], epochs[0]["model"]) == ("local", "gym-1")
    assert "hello" in _texts(epochs[0]["messages"])
    assert epochs[1]["messages"] == current["messages"]
    readable = invoke("session", "transcript", "alpha", "--all")
    assert readable.exit_code == 0
    assert "epoch 1 (ARCHIVED by a model switch; was local / gym-1)" in readable.stdout
    assert "user: hello" in readable.stdout
    assert "epoch 2 (current; demo / demo-1)" in readable.stdout

    unasked = invoke("purge", "alpha")
    assert unasked.exit_code == EXIT_BAD_INPUT
    assert "--archived" in unasked.stderr
    purged = as_json(invoke("purge", "alpha", "--archived", json_mode=True))
    assert purged == {"id": "alpha", "purged_epochs": 1, "purged_records": 4}

    after = as_json(invoke("session", "transcript", "alpha", "--all", json_mode=True))["epochs"]
    assert [(e["number"], e["archived"]) for e in after] == [(2, False)]
    assert as_json(invoke("session", "transcript", "alpha", json_mode=True)) == current
    again = as_json(invoke("purge", "alpha", "--archived", json_mode=True))
    assert (again["purged_epochs"], again["purged_records"]) == (0, 0)


def test_purge_and_transcript_all_refuse_an_unknown_agent(invoke: Any) -> None:
    assert invoke("session", "start", "--id", "alpha").exit_code == 0
    assert invoke("purge", "nosuch", "--archived").exit_code == 4
    assert invoke("session", "transcript", "nosuch", "--all").exit_code == 4
