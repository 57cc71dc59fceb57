"""Ids as clients make them: agent, session and message ids follow the
id rule (docs/decisions.md), 1-128 of ``[a-z0-9._-]`` and not ``.`` or ``..``; a refusal is an
``InvalidIdError`` saying which id and naming the field. Generated ids keep their shape."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

import agentkeep as ak
from agentkeep.types import is_valid_id, new_id

TIMEOUT = 30.0
ACCEPTED = [
    "review-2024",
    "order-123",
    "0b5e3c5e-7a33-4c5e-9f1e-5d1e2b9c4a10",
    "txn-mail",
    "a",
    "v1.2_rc-3",
    "x" * 128,
]
REFUSED = ["Review-2024", "x" * 129, "..", ".", "", "order 123", "a/b", "tab\t", "line\n"]


class Note(msgspec.Struct, frozen=True):
    """What to mail."""

    text: str


class Mailer:
    """A tool that sends a message to another agent under a client-made id."""

    def __init__(self) -> None:
        self.target = ""
        self.message_id = "txn-mail"
        self.outcomes: list[object] = []
        self.done = threading.Event()

        @ak.tool(durable=True)
        def mail(ctx: ak.ToolContext, args: Note) -> str:
            """Mail a note to the other agent."""
            try:
                delivery = ctx.system.send(self.target, ak.user(args.text), id=self.message_id)
                self.outcomes.append(delivery.id)
                return f"sent {delivery.id}"
            except ak.AgentkeepError as error:
                self.outcomes.append(error)
                raise
            finally:
                self.done.set()

        self.tool = mail


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[ak.AgentSystem, ak.ScriptedModel, Mailer]]:
    model = ak.ScriptedModel()
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    mailer = Mailer()
    with ak.AgentSystem.open(
        tmp_path / "state",
        providers=providers,
        provider="local",
        model="gym-1",
        tools=[mailer.tool],
    ) as system:
        yield system, model, mailer


def test_the_rule_accepts_seed_002_ids_and_generated_ones() -> None:
    assert all(is_valid_id(each) for each in ACCEPTED)
    assert not any(is_valid_id(each) for each in REFUSED)
    made = [new_id() for _ in range(200)]
    assert all(len(each) == 24 and each[0].isalpha() and is_valid_id(each) for each in made)


@pytest.mark.parametrize("agent_id", ACCEPTED)
def test_agent_and_session_ids_as_clients_make_them(
    world: tuple[ak.AgentSystem, ak.ScriptedModel, Mailer], agent_id: str
) -> None:
    system, model, _ = world
    assert system.create(id=agent_id).id == agent_id
    system.registry.create({"id": "reviewer"})
    session = system.sessions.start("reviewer", id=f"s.{agent_id}"[:128])
    assert system.sessions.get(session.id).id == session.id
    model.add(ak.script.text("ok"))
    handle = system.sessions.send(session.id, "hi", message_id=f"m-{agent_id}"[:128])
    assert system.sessions.wait(session.id, handle.turn.id, timeout_seconds=TIMEOUT).terminal


@pytest.mark.parametrize("bad", REFUSED)
def test_a_bad_id_is_refused_saying_which_and_naming_the_field(
    world: tuple[ak.AgentSystem, ak.ScriptedModel, Mailer], bad: str
) -> None:
    system, _, _ = world
    system.registry.create({"id": "reviewer"})
    system.sessions.start("reviewer", id="ok-session")
    session = "ok-session"
    cases = [
        (lambda: system.create(id=bad), "agent id", "id"),
        (lambda: system.sessions.start("reviewer", id=bad), "session id", "sessionId"),
        (lambda: system.sessions.send(session, "x", message_id=bad), "message id", "messageId"),
        (lambda: system.send(session, ak.user("x"), id=bad), "message id", "id"),
    ]
    for attempt, what, field in cases:
        with pytest.raises(ak.InvalidIdError) as refused:
            attempt()
        assert str(refused.value).startswith(f"{what} {bad!r} is invalid"), refused.value
        assert (refused.value.what, refused.value.field, refused.value.code) == (
            what,
            field,
            "invalid_id",
        )
        # What a caller caught before still catches it.
        assert isinstance(refused.value, ak.InvalidConfigError | ak.InvalidMessageError)
    assert [a.id for a in system.agents()] == ["ok-session"]  # nothing was written


def test_a_tools_send_with_a_client_made_message_id_succeeds(
    world: tuple[ak.AgentSystem, ak.ScriptedModel, Mailer],
) -> None:
    system, model, mailer = world
    sender, target = system.create(id="order-123"), system.create(id="review-2024")
    mailer.target = target.id
    model.add(
        ak.script.tool_call("mail", {"text": "your order shipped"}),
        ak.script.text("done"),  # the sender's answer and the target's, in either order
        ak.script.text("thanks"),
    )

    system.send(sender.id, ak.user("mail them"))
    assert mailer.done.wait(TIMEOUT)
    assert sender.wait_for_idle(timeout_seconds=TIMEOUT)
    assert mailer.outcomes == ["txn-mail"]
    assert target.wait_for_idle(timeout_seconds=TIMEOUT)
    accepted = [e for e in system.events(target.id, limit=100) if e.type == "message.accepted"]
    assert [e.data["message_id"] for e in accepted] == ["txn-mail"]
