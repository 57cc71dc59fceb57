"""Profiles: every message selects an opaque nullable profile; it is durable control
data, never sent to the provider; different profiles split an "all" batch; changing the
profile in effect resets the private model history (kept readable) and starts a fresh provider
session, with ``model_changed`` handling the handoff."""

from __future__ import annotations

import msgspec
import pytest

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.runtime.kv_areas import HISTORY_AREA, area_prefix

from .conftest import World, roles, text_of


class Handoff(ak.Feature):
    name = "handoff"

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.changes: list[ak.ModelChange] = []
        self.ctx_profiles: list[str | None] = []

    def model_changed(self, ctx: ak.HookContext, change: ak.ModelChange) -> ak.SystemMessage | None:
        self.changes.append(change)
        self.ctx_profiles.append(ctx.profile)
        if self.fail:
            raise RuntimeError("no handoff")
        return ak.system(f"Now working as {change.profile}.")


def _texts(messages: object) -> list[str]:
    return [text_of(m) for m in messages]  # type: ignore[attr-defined]


def _provider_saw(world: World, needle: str) -> bool:
    """Whether ``needle`` appears anywhere the provider was shown: sessions and requests."""
    shown = [*world.model.model_sessions, *world.model.requests, *world.model.compactions]
    return any(needle in msgspec.json.encode(each).decode() for each in shown)


def test_a_profile_is_durable_across_reopen_and_never_reaches_the_provider(
    world: World,
) -> None:
    world.model.add(script.text("a1"))
    system = world.open()
    agent = system.create()
    # Queued durably without starting the agent: the profile must survive the process.
    system.internals.accept(
        agent.id,
        "send",
        ak.user("q1"),
        options=ak.MessageOptions(profile="secret-profile-7"),
        start=False,
    )
    system.close(timeout_seconds=10)

    reopened = world.open()  # resumes the owed message
    again = reopened.resolve(agent.id)
    again.wait_for_idle(timeout_seconds=10)

    assert again.settings.profile == "secret-profile-7"
    assert again.history()[-1].profile == "secret-profile-7"
    assert _texts(again.transcript()) == ["q1", "a1"]
    consumed = [
        e for e in reopened.events(agent.id) if e.type == "message" and e.data["role"] == "user"
    ]
    assert [e.data.get("profile") for e in consumed] == ["secret-profile-7"]
    assert len(world.model.requests) == 1
    assert not _provider_saw(world, "secret-profile-7")


def test_a_profile_change_resets_the_history_and_starts_a_fresh_session(world: World) -> None:
    handoff = Handoff()
    world.model.add(script.text("a1"), script.text("a2"))
    system = world.open(features=[handoff])
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"), profile="reviewer")
    agent.wait_for_idle(timeout_seconds=10)

    # The new profile's request sees only the handoff and its own message.
    assert roles(list(world.model.requests[1].context.messages)) == ["system", "user"]
    assert roles(agent.transcript()) == ["system", "user", "assistant"]
    assert _texts(agent.transcript()) == ["Now working as reviewer.", "q2", "a2"]
    assert len(world.model.model_sessions) == 2  # a fresh model session for the new profile
    assert world.model.closed_model_sessions  # the old one was closed
    assert agent.settings.profile == "reviewer"
    # The hook saw the old and the new profile, on a reset, with the new one on its context.
    [change] = handoff.changes
    assert (change.previous_profile, change.profile) == (None, "reviewer")
    assert change.was_reset
    assert change.profile_changed
    assert handoff.ctx_profiles == ["reviewer"]
    # The old profile's history stays readable.
    old, current = agent.history()
    assert old.archived
    assert old.reason == "model_switch"
    assert old.profile is None
    assert _texts(old.messages) == ["q1", "a1"]
    assert current.profile == "reviewer"
    [switch] = [e for e in system.events(agent.id) if e.type == "model.switch"]
    assert switch.data["reset"] is True
    assert switch.data["previous"]["profile"] is None
    assert switch.data["current"]["profile"] == "reviewer"


def test_omitting_the_profile_selects_null_and_resets_again(world: World) -> None:
    world.model.add(script.text("a1"), script.text("a2"), script.text("a3"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("q1"), profile="p")
    agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"), profile="p")  # the same profile: the history is shared
    agent.wait_for_idle(timeout_seconds=10)
    assert _texts(agent.transcript()) == ["q1", "a1", "q2", "a2"]

    agent.send(ak.user("q3"))  # no profile: the null profile, a change
    agent.wait_for_idle(timeout_seconds=10)
    assert _texts(agent.transcript()) == ["q3", "a3"]
    assert agent.settings.profile is None
    assert [e.profile for e in agent.history()][-2:] == ["p", None]


def test_a_failing_hook_rejects_the_profile_change_and_keeps_the_history(world: World) -> None:
    handoff = Handoff(fail=True)
    world.model.add(script.text("a1"), script.text("a2"))
    system = world.open(features=[handoff])
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"), profile="reviewer")
    agent.wait_for_idle(timeout_seconds=10)

    assert _texts(agent.transcript()) == ["q1", "a1", "q2", "a2"]
    assert agent.settings.profile is None  # the old profile stays in effect
    assert len(agent.history()) == 1  # nothing archived
    assert len(world.model.model_sessions) == 1
    [switch] = [e for e in system.events(agent.id) if e.type == "model.switch"]
    assert switch.data["rejected"] is True
    assert switch.data["reset"] is False


@pytest.mark.parametrize("mode", ["steering", "send"])
def test_different_profiles_split_an_all_batch(world: World, mode: str) -> None:
    world.model.add(
        script.tool_call("wait", {"text": "g"}),
        *([] if mode == "steering" else [script.text("tool-answer")]),
        script.text("x-answer"),
        script.text("y-answer"),
    )
    system = world.open(steering_mode="all", send_mode="all")
    agent = system.create()
    agent.send(ak.user("start"))
    assert world.gate("g").entered.wait(10)
    offer = agent.steer if mode == "steering" else agent.send
    offer(ak.user("first"), profile="x")
    offer(ak.user("second"), profile="x")
    offer(ak.user("third"), profile="y")
    world.gate("g").release.set()
    agent.wait_for_idle(timeout_seconds=10)

    # Steering joins the tool's result; sends wait until it was answered (one more request).
    assert len(world.model.requests) == (3 if mode == "steering" else 4)
    # Each batch starts its profile's context afresh: x's two messages share one response,
    # y's message gets a response of its own.
    assert _texts(world.model.requests[-2].context.messages) == ["first", "second"]
    assert _texts(world.model.requests[-1].context.messages) == ["third"]
    assert agent.settings.profile == "y"
    assert [e.profile for e in agent.history()] == [None, "x", "y"]


def test_a_profile_must_be_a_string(world: World) -> None:
    system = world.open()
    agent = system.create()
    with pytest.raises(ak.InvalidMessageError, match="profile must be a string"):
        agent.send(ak.user("q"), profile=7)  # type: ignore[arg-type]
    assert agent.transcript() == []


@pytest.mark.parametrize("fail", [False, True])
def test_the_history_store_is_cleared_with_the_reset_and_kept_when_rejected(
    world: World, fail: bool
) -> None:
    """The history KV belongs to the conversation the provider sees: a profile reset clears
    it in the consumption transaction; a rejected change keeps both."""
    world.model.add(script.text("a1"), script.text("a2"))
    system = world.open(features=[Handoff(fail=fail)])
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    key = area_prefix(agent.id, HISTORY_AREA) + "announced"
    system.internals.store.transact(lambda tx: tx.kv.write(key, "q1"))

    agent.send(ak.user("q2"), profile="reviewer")
    agent.wait_for_idle(timeout_seconds=10)

    kept = system.internals.store.read(lambda tx: tx.kv.read(key))
    assert kept == ("q1" if fail else None)
    assert (len(agent.history()) == 1) is fail
