"""One ``send``/``steer`` signature on every surface, implemented once.

``Agent`` and ``AgentRef`` take ``(message, *, options)``; ``AgentSystem``, ``AgentSystemRef``
(what a hook's ``ctx.system`` and a tool's ``ctx.system`` are) and ``SystemTransaction`` (what
``system.transaction``'s work is handed) take ``(agent_id, message, *, options)`` with the
same keyword options, which are exactly ``MessageOptions``' fields plus the message's ``id``
and ``metadata``.
"""

from __future__ import annotations

import inspect
import threading
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Unpack

import msgspec
import pytest

import agentkeep as ak
from agentkeep.refs import AgentRef, AgentSystemRef

TIMEOUT = 30.0

SURFACES: list[tuple[str, Callable[..., Any]]] = [
    ("Agent.send", ak.Agent.send),
    ("Agent.steer", ak.Agent.steer),
    ("AgentRef.send", AgentRef.send),
    ("AgentRef.steer", AgentRef.steer),
    ("AgentSystem.send", ak.AgentSystem.send),
    ("AgentSystem.steer", ak.AgentSystem.steer),
    ("AgentSystemRef.send", AgentSystemRef.send),
    ("AgentSystemRef.steer", AgentSystemRef.steer),
    ("SystemTransaction.send", ak.SystemTransaction.send),
    ("SystemTransaction.steer", ak.SystemTransaction.steer),
]


def keyword_options(function: Callable[..., Any]) -> list[inspect.Parameter]:
    """The keyword options, declared one by one or once (``**options: Unpack[SendOptions]``:
    each key a keyword option, defaulting to None if it may be omitted and admits None)."""
    parameters = inspect.signature(function, eval_str=True).parameters.values()
    found = [p for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    for p in parameters:
        if p.kind is inspect.Parameter.VAR_KEYWORD and typing.get_origin(p.annotation) is Unpack:
            (declared,) = typing.get_args(p.annotation)
            for name, hint in typing.get_type_hints(declared).items():
                omittable = name in declared.__optional_keys__ and type(None) in typing.get_args(
                    hint
                )
                default = None if omittable else inspect.Parameter.empty
                found.append(
                    inspect.Parameter(
                        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint
                    )
                )
    return found


def positional(function: Callable[..., Any]) -> list[inspect.Parameter]:
    parameters = inspect.signature(function, eval_str=True).parameters.values()
    keywords = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD)
    return [p for p in parameters if p.kind not in keywords]


def test_every_surface_takes_the_same_keyword_options() -> None:
    expected = keyword_options(ak.AgentSystem.send)
    for name, function in SURFACES:
        assert keyword_options(function) == expected, name


def test_the_keyword_options_are_the_message_options_plus_id_and_metadata() -> None:
    names = [p.name for p in keyword_options(ak.AgentSystem.send)]
    assert names == ["id", "metadata", *ak.MessageOptions.__struct_fields__]
    assert all(p.default is None for p in keyword_options(ak.AgentSystem.send))


def test_the_system_surfaces_take_the_agent_id_first() -> None:
    for owner in (ak.AgentSystem, AgentSystemRef, ak.SystemTransaction):
        for method in (owner.send, owner.steer):
            assert [p.name for p in positional(method)] == ["self", "agent_id", "message"]
    for owner in (ak.Agent, AgentRef):
        for method in (owner.send, owner.steer):
            assert [p.name for p in positional(method)] == ["self", "message"]
    for name, function in SURFACES:
        assert inspect.signature(function, eval_str=True).return_annotation is ak.Delivery, name


class Relay(ak.Feature):
    """Relays the first message the ``source`` agent accepts to the ``target`` agent through
    ``ctx.system``, with options: once from the transactional hook (a steer that joins the
    consumption's transaction), once after it committed (a send)."""

    name = "relay"

    def __init__(self) -> None:
        self.source = ""
        self.target = ""
        self.errors: list[BaseException] = []
        self.relayed = threading.Event()

    def message_accepted_transact(self, ctx: ak.HookContext, accepted: ak.MessageAccepted) -> None:
        if ctx.agent_id == self.source:
            ctx.system.steer(
                self.target, ak.user("steered"), id="steered", metadata={"via": "tx"}, effort="low"
            )

    def message_accepted(self, ctx: ak.HookContext, accepted: ak.MessageAccepted) -> None:
        if ctx.agent_id != self.source:
            return
        try:
            ctx.system.send(
                self.target,
                ak.user("relayed"),
                id="relayed",
                model="gym-1",
                effort="high",
                permission_mode="read_only",
            )
        except BaseException as error:  # the hook's failures are only logged: keep them
            self.errors.append(error)
        finally:
            self.relayed.set()


@pytest.fixture
def relay_system(tmp_path: Path) -> Iterator[tuple[ak.AgentSystem, Relay, ak.ScriptedModel]]:
    model = ak.ScriptedModel()
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    relay = Relay()
    with ak.AgentSystem.open(
        tmp_path / "state", providers=providers, provider="local", model="gym-1", features=[relay]
    ) as system:
        yield system, relay, model


def test_a_hooks_system_sends_with_message_options(
    relay_system: tuple[ak.AgentSystem, Relay, ak.ScriptedModel],
) -> None:
    system, relay, model = relay_system
    model.add(*(ak.script.text(f"answer {n}") for n in range(4)))
    source, target = system.create(), system.create()
    relay.source, relay.target = source.id, target.id

    system.send(source.id, ak.user("start"))
    assert relay.relayed.wait(TIMEOUT)
    assert relay.errors == []
    assert source.wait_for_idle(timeout_seconds=TIMEOUT)
    assert target.wait_for_idle(timeout_seconds=TIMEOUT)

    users = [m for m in target.transcript() if isinstance(m, ak.UserMessage)]
    texts = {b.text for m in users for b in m.content if isinstance(b, ak.TextBlock)}
    assert texts == {"steered", "relayed"}
    # The options of the message consumed last took effect: the send's.
    assert target.settings.effort == "high"
    assert target.settings.permission_mode == "read_only"
    assert target.settings.model == "gym-1"


def test_the_system_steers_and_sends_by_agent_id(tmp_path: Path) -> None:
    model = ak.ScriptedModel([ak.script.text("one"), ak.script.text("two")])
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    with ak.AgentSystem.open(
        tmp_path / "state", providers=providers, provider="local", model="gym-1"
    ) as system:
        agent = system.create()
        first = system.send(agent.id, ak.user("hi"), id="first", effort="medium")
        again = system.send(agent.id, ak.user("hi"), id="first")
        steered = system.steer(agent.id, ak.user("brief"), metadata={"k": 1})
        assert (first.delivery, first.created, again.created) == ("send", True, False)
        assert steered.delivery == "steer"
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
        assert agent.settings.effort == "medium"
        with pytest.raises(ak.UnknownAgentError):
            system.send("nosuchagent", ak.user("hello"))
        with pytest.raises(ak.UnknownAgentError):
            system.steer("nosuchagent", ak.user("hello"))


class ForwardArgs(msgspec.Struct):
    target: str


def test_a_tools_system_is_typed_and_sends_with_options(tmp_path: Path) -> None:
    @ak.tool
    def forward(ctx: ak.ToolContext, args: ForwardArgs) -> str:
        """Forward to another agent."""
        delivery = ctx.system.send(args.target, ak.user("from a tool"), effort="minimal")
        return delivery.id

    model = ak.ScriptedModel()
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    with ak.AgentSystem.open(
        tmp_path / "state", providers=providers, provider="local", model="gym-1", tools=[forward]
    ) as system:
        caller, target = system.create(), system.create()
        model.add(
            ak.script.tool_call("forward", {"target": target.id}),
            ak.script.text("forwarded"),
            ak.script.text("got it"),
        )
        caller.send(ak.user("go"))
        assert caller.wait_for_idle(timeout_seconds=TIMEOUT)
        assert target.wait_for_idle(timeout_seconds=TIMEOUT)
        results = [m for m in caller.transcript() if isinstance(m, ak.ToolResultMessage)]
        assert len(results) == 1
        assert not results[0].is_error
        assert target.settings.effort == "minimal"
