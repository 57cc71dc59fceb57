"""An acceptance encodes its message once and reuses the bytes; what is stored must
be byte-for-byte what encoding each stored value on its own writes (the canonical, sorted
JSON), for the ``message.accepted`` event, the turn's input and its idempotency hash."""

from __future__ import annotations

import hashlib
from pathlib import Path

import apsw
import msgspec
import pytest

import agentkeep as ak
from agentkeep.persistence.ledger import encode_event_data
from agentkeep.providers import script

# Keys that sort before and after "turn_id" at the top level and nested, non-ASCII text,
# JSON's special characters, floats and nulls: whatever the splice could get wrong.
METADATA = {"zeta": {"y": 1, "b": [1.5, None, True]}, "alpha": 'é ✓ \u2028 "q" \\ /'}


def _sent(tmp_path: Path) -> Path:
    home = tmp_path / "state"
    providers = ak.Providers()
    providers.add("local", ak.ScriptedModel([script.text("ok") for _ in range(3)]), kind="gym")
    with ak.AgentSystem.open(home, providers=providers, provider="local", model="gym-1") as system:
        agent = system.create()
        agent.send(ak.user("plain"))
        agent.wait_for_idle(timeout_seconds=30)
        agent.send(ak.user('héllo ✓ \u2028 "x"'), metadata=METADATA, model="gym-1")
        agent.wait_for_idle(timeout_seconds=30)
        system.sessions.send(agent.id, "keyed", idempotency_key="k 1 / üñí").wait(
            timeout_seconds=30
        )
    return home / "agents.db"


@pytest.mark.sqlite_only("reads the bytes stored in the SQLite file with apsw")
def test_the_accepted_event_and_the_turn_input_are_the_canonical_bytes(tmp_path: Path) -> None:
    connection = apsw.Connection(str(_sent(tmp_path)))
    events = connection.execute(
        "SELECT turn_id, data_json FROM session_events WHERE type = 'message.accepted' "
        "ORDER BY sequence"
    ).fetchall()
    assert len(events) == 3
    for turn_id, data_json in events:
        data = msgspec.json.decode(data_json)
        # The stored text is exactly the canonical encoding of the data it holds ...
        assert data_json == encode_event_data(data)
        assert data["turn_id"] == turn_id
        content = data["message"]
        (input_json,) = connection.execute(
            "SELECT input_json FROM turns WHERE id = ?", (turn_id,)
        ).fetchone()
        # ... and the turn's input is the message as the event carries it, encoded alone.
        assert input_json == encode_event_data(content)
        (digest,) = connection.execute(
            "SELECT input_hash FROM turn_inputs WHERE turn_id = ?", (turn_id,)
        ).fetchone()
        whole = encode_event_data({"delivery": data["delivery"], "input": content})
        assert digest == hashlib.sha256(whole.encode()).hexdigest()
    assert msgspec.json.decode(events[1][1])["metadata"] == METADATA
    connection.close()
