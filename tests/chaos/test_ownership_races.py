"""Ownership races (seed table, invariant I28): two systems or two processes on one store.

The kernel lock decides who owns a store; the loser is told who holds it, and can take over
once the winner closed or died. Across the handover every accepted message is answered exactly
once (ids make re-offering idempotent), checked on the durable transcript. Lifecycle calls
(``close``, ``delete``) racing senders either refuse a message or answer it exactly once.
The two-process tests run a small child interpreter (``python -c``) that holds the store.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.chaos import CallArgs, default_providers, ledger_tools, seeds_from_env
from agentkeep.providers import script

OPEN_TIMEOUT = 10.0


def _open(home: Path, providers: ak.Providers | None = None, **options: Any) -> ak.AgentSystem:
    return ak.AgentSystem.open(
        home,
        providers=providers or default_providers(0),
        provider="local",
        model="gym-1",
        tools=ledger_tools(),
        **options,
    )


def _user_texts(messages: list[ak.Message]) -> list[str]:
    return [
        "".join(b.text for b in m.content if isinstance(b, ak.TextBlock))
        for m in messages
        if isinstance(m, ak.UserMessage)
    ]


def _final_text(messages: list[ak.Message]) -> str | None:
    last = messages[-1] if messages else None
    if isinstance(last, ak.AssistantMessage) and isinstance(last.content[-1], ak.TextBlock):
        return last.content[-1].text
    return None


def _assert_each_answered_once(system: ak.AgentSystem, agent_id: str, texts: list[str]) -> None:
    transcript = system.transcript(agent_id)
    assert _user_texts(transcript) == texts, transcript
    assert _final_text(transcript) == f"answer-{len(texts)}", transcript
    calls = [
        b.call_id
        for m in transcript
        if isinstance(m, ak.AssistantMessage)
        for b in m.content
        if isinstance(b, ak.ToolCallBlock)
    ]
    results = [m.call_id for m in transcript if isinstance(m, ak.ToolResultMessage)]
    assert len(calls) == len(set(calls)) == len(texts), transcript
    assert Counter(results) == Counter(calls), transcript
    assert system.internals.store.read(lambda tx: tx.facts.read_owed(agent_id)) is None


# -- one process -----------------------------------------------------------------------------


def _contend(
    home: Path,
    start: threading.Barrier,
    won: list[ak.AgentSystem],
    lost: list[ak.StoreLockedError],
) -> None:
    start.wait()
    try:
        won.append(_open(home))
    except ak.StoreLockedError as error:
        lost.append(error)


def _create(
    system: ak.AgentSystem, agent_id: str, start: threading.Barrier, outcomes: list[object]
) -> None:
    start.wait()
    try:
        outcomes.append(system.create(id=agent_id))
    except ak.AgentExistsError as error:
        outcomes.append(error)


def test_two_systems_racing_to_open_one_store_exactly_one_wins(tmp_path: Path) -> None:
    for round_ in range(5):
        home = tmp_path / f"race{round_}"
        start = threading.Barrier(2, timeout=OPEN_TIMEOUT)
        won: list[ak.AgentSystem] = []
        lost: list[ak.StoreLockedError] = []
        threads = [
            threading.Thread(target=_contend, args=(home, start, won, lost)) for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(OPEN_TIMEOUT)
        try:
            assert (len(won), len(lost)) == (1, 1), (won, lost)
            assert lost[0].holder_pid in (os.getpid(), None)
        finally:
            for system in won:
                system.close(timeout_seconds=10)


def test_the_loser_takes_over_after_the_winner_closes_and_answers_nothing_twice(
    tmp_path: Path,
) -> None:
    home = tmp_path / "state"
    winner = _open(home)
    agent = winner.create(id="owned")
    agent.send(ak.user("m1"), id="m1")
    with pytest.raises(ak.StoreLockedError, match=f"process {os.getpid()}") as refused:
        _open(home)
    assert refused.value.holder_pid == os.getpid()
    winner.close(timeout_seconds=10)

    with _open(home) as loser:
        again = loser.resolve("owned")
        assert again.send(ak.user("m1"), id="m1").created is False  # re-offer: idempotent
        assert again.send(ak.user("m2"), id="m2").created is True
        assert again.wait_for_idle(timeout_seconds=10)
        _assert_each_answered_once(loser, "owned", ["m1", "m2"])


def test_two_creators_racing_one_agent_id_exactly_one_wins(tmp_path: Path) -> None:
    with _open(tmp_path / "state") as system:
        for round_ in range(10):
            agent_id = f"racer{round_}"
            start = threading.Barrier(2, timeout=OPEN_TIMEOUT)
            outcomes: list[object] = []
            threads = [
                threading.Thread(target=_create, args=(system, agent_id, start, outcomes))
                for _ in range(2)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(OPEN_TIMEOUT)
            kinds = sorted(type(o).__name__ for o in outcomes)
            assert kinds == ["Agent", "AgentExistsError"], outcomes
            assert [a.id for a in system.agents()].count(agent_id) == 1


def test_sends_racing_close_are_either_refused_or_answered_exactly_once(tmp_path: Path) -> None:
    home = tmp_path / "state"
    system = _open(home)
    system.create(id="closing")
    accepted: list[str] = []
    refused: list[str] = []
    enough = threading.Event()
    lock = threading.Lock()

    def sender(name: str) -> None:
        for n in range(200):
            message_id = f"{name}x{n}"
            try:
                system.internals.accept("closing", "send", ak.user(message_id), id=message_id)
            except ak.AgentClosedError:
                with lock:
                    refused.append(message_id)
                return
            with lock:
                accepted.append(message_id)
                if len(accepted) >= 6:
                    enough.set()

    threads = [threading.Thread(target=sender, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    assert enough.wait(OPEN_TIMEOUT)
    system.close(timeout_seconds=30)
    for thread in threads:
        thread.join(OPEN_TIMEOUT)
    assert refused, "every sender must have been refused once the system closed"

    with _open(home) as reopened:  # resumes whatever close left owed
        assert reopened.wait_for_idle("closing", timeout_seconds=30)
        users = _user_texts(reopened.transcript("closing"))
        assert sorted(users) == sorted(accepted), (users, accepted)
        for name in ("a", "b"):  # per-sender order is queue order
            mine = [u for u in users if u.startswith(name)]
            assert mine == [a for a in accepted if a.startswith(name)]
        _assert_each_answered_once(reopened, "closing", users)


def test_sends_racing_delete_either_land_before_it_or_are_refused(tmp_path: Path) -> None:
    with _open(tmp_path / "state") as system:
        system.create(id="doomed")
        accepted: list[str] = []
        failures: list[BaseException] = []
        started = threading.Event()

        def sender() -> None:
            for n in range(60):  # bounded: delete waits for a steady sender (see below)
                try:
                    system.internals.accept("doomed", "send", ak.user(f"d{n}"), id=f"d{n}")
                except (ak.UnknownAgentError, ak.AgentClosedError):
                    return  # refused: deleted, or being deleted (delete admits nothing new)
                except BaseException as error:  # anything else is a bug
                    failures.append(error)
                    return
                accepted.append(f"d{n}")
                started.set()

        thread = threading.Thread(target=sender)
        thread.start()
        assert started.wait(OPEN_TIMEOUT)
        system.delete("doomed", timeout_seconds=30)
        thread.join(30)
        assert not thread.is_alive()
        assert failures == []
        with pytest.raises(ak.UnknownAgentError):
            system.resolve("doomed")
        # The id is free again and its next life starts clean.
        fresh = system.create(id="doomed")
        assert fresh.transcript() == []
        assert system.internals.store.read(lambda tx: tx.queue.messages("doomed")) == []


def test_a_send_after_delete_began_is_refused(tmp_path: Path) -> None:
    gate = threading.Event()
    entered = threading.Event()

    @ak.tool
    def hold(ctx: ak.ToolContext, args: CallArgs) -> str:
        """Block until the test releases it."""
        entered.set()
        assert gate.wait(30)
        return "held"

    model = ak.ScriptedModel([script.tool_call("hold", {"call": "x"}), script.text("a")])
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    system = ak.AgentSystem.open(
        tmp_path / "state", providers=providers, provider="local", model="gym-1", tools=[hold]
    )
    deleting = threading.Event()
    original = system.internals.agents.remove

    def remove(agent_id: str, *, timeout_seconds: float | None) -> None:
        deleting.set()
        original(agent_id, timeout_seconds=timeout_seconds)

    system.internals.agents.remove = remove  # type: ignore[method-assign]
    try:
        agent = system.create(id="doomed")
        agent.send(ak.user("busy"))
        assert entered.wait(10)
        deleter = threading.Thread(target=system.delete, args=("doomed",))
        deleter.start()
        assert deleting.wait(10)  # delete is now waiting for the agent's admitted work
        with pytest.raises((ak.AgentClosedError, ak.UnknownAgentError)):
            agent.send(ak.user("late"), id="late")
    finally:
        gate.set()
        deleter.join(30)
        system.close(timeout_seconds=10)


# -- a seeded handover campaign --------------------------------------------------------------

HANDOVER_OFFERS = tuple(f"h{n}" for n in range(5))


class _Runs:
    """Counts every tool execution by call id (the side-effect ledger of this campaign)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fragile: Counter[str] = Counter()

    def tools(self) -> list[ak.Tool[Any, Any]]:
        runs = self

        @ak.tool(durable=True)
        def durable_tool(ctx: ak.ToolContext, args: CallArgs) -> str:
            """May re-run after a restart."""
            return f"durable {args.call}"

        @ak.tool
        def fragile_tool(ctx: ak.ToolContext, args: CallArgs) -> str:
            """Must never run twice."""
            with runs.lock:
                runs.fragile[args.call] += 1
            return f"fragile {args.call}"

        return [durable_tool, fragile_tool]


def _race_open(home: Path, seed: int, runs: _Runs) -> tuple[ak.AgentSystem, ak.StoreLockedError]:
    start = threading.Barrier(2, timeout=OPEN_TIMEOUT)
    won: list[ak.AgentSystem] = []
    lost: list[ak.StoreLockedError] = []

    def contend() -> None:
        start.wait()
        try:
            won.append(
                ak.AgentSystem.open(
                    home,
                    providers=default_providers(seed),
                    provider="local",
                    model="gym-1",
                    tools=runs.tools(),
                )
            )
        except ak.StoreLockedError as error:
            lost.append(error)

    threads = [threading.Thread(target=contend) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(OPEN_TIMEOUT)
    if len(won) != 1:
        for system in won:
            system.close(timeout_seconds=10)
        raise AssertionError(f"exactly one owner must win: won={won} lost={lost}")
    return won[0], lost[0]


@pytest.mark.parametrize("handover_seed", seeds_from_env(6))
def test_owners_handing_a_store_over_answer_every_accepted_message_once(
    tmp_path: Path, handover_seed: int
) -> None:
    """Seeded: 2-4 generations of two contenders racing to open the store; the winner
    re-offers every earlier message by id, offers a few new ones, and ends by close, abort then
    close, or graceful shutdown. A last owner re-offers every message (the earlier ones are
    idempotent repeats) and sends one new message."""
    rng = random.Random(handover_seed)
    home = tmp_path / "state"
    runs = _Runs()
    offered = 0
    endings: list[str] = []
    for generation in range(rng.randint(2, 4)):
        system, refused = _race_open(home, handover_seed, runs)
        assert refused.holder_pid in (os.getpid(), None)
        try:
            if generation == 0:
                system.create(id="handed")
            agent = system.resolve("handed")
            offered = min(len(HANDOVER_OFFERS), offered + rng.randint(1, 2))
            for message_id in HANDOVER_OFFERS[:offered]:
                agent.send(ak.user(message_id), id=message_id)
            ending = rng.choice(["close", "abort", "shutdown"])
            endings.append(ending)
            if ending == "abort":
                agent.abort(wait=True, timeout_seconds=10)
            if ending == "shutdown":
                system.shutdown()
        finally:
            system.close(timeout_seconds=10)

    system, _ = _race_open(home, handover_seed, runs)
    try:
        agent = system.resolve("handed")
        for n, message_id in enumerate(HANDOVER_OFFERS):
            created = agent.send(ak.user(message_id), id=message_id).created
            assert created is (n >= offered)  # earlier ones are durable: idempotent
        # A question an abort left unanswered is not owed (decisions.md); a new message
        # brings it back into the next turn's context.
        agent.send(ak.user("final"), id="final")
        assert agent.wait_for_idle(timeout_seconds=30)
        context = f"seed {handover_seed}, endings {endings}"
        transcript = system.transcript("handed")
        expected = [*HANDOVER_OFFERS, "final"]
        assert _user_texts(transcript) == expected, context
        assert _final_text(transcript) == f"answer-{len(expected)}", (context, transcript)
        calls = [
            b.call_id
            for m in transcript
            if isinstance(m, ak.AssistantMessage)
            for b in m.content
            if isinstance(b, ak.ToolCallBlock)
        ]
        results = [m.call_id for m in transcript if isinstance(m, ak.ToolResultMessage)]
        assert len(calls) == len(set(calls)), (context, calls)
        assert Counter(results) == Counter(calls), (context, transcript)
        assert all(n == 1 for n in runs.fragile.values()), (context, runs.fragile)
        assert system.internals.store.read(lambda tx: tx.facts.read_owed("handed")) is None, context
    finally:
        system.close(timeout_seconds=10)


# -- two processes ---------------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys
    import agentkeep as ak
    from agentkeep.chaos import default_providers, ledger_tools
    from agentkeep.providers import script

    home, mode = sys.argv[1], sys.argv[2]
    if mode == "hang":
        model = ak.ScriptedModel([script.hang()])
        providers = ak.Providers()
        providers.add("local", model, kind="gym")
    else:
        providers = default_providers(0)
    system = ak.AgentSystem.open(
        home, providers=providers, provider="local", model="gym-1", tools=ledger_tools()
    )
    agent = system.create(id="owned")
    agent.send(ak.user("m1"), id="m1")
    if mode == "hang":
        assert model.wait_for_requests(1, timeout_seconds=30)
        agent.send(ak.user("m2"), id="m2")  # accepted while m1's inference hangs
    else:
        assert agent.wait_for_idle(timeout_seconds=30)
    print("READY", flush=True)
    sys.stdin.readline()
    system.close(timeout_seconds=30)
    print("CLOSED", flush=True)
    """
)


def _spawn(home: Path, mode: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(home), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    seen: list[str] = []
    for line in child.stdout:  # the child logs (migrations) before it is ready
        seen.append(line)
        if line.strip() == "READY":
            return child
    child.kill()
    child.communicate(timeout=30)
    raise AssertionError(f"the child exited before it was ready: {seen!r}")


_CONTENDER = textwrap.dedent(
    """
    import sys
    import agentkeep as ak
    from agentkeep.chaos import default_providers

    print("IMPORTED", flush=True)
    sys.stdin.readline()  # go: both processes open at (nearly) the same instant
    try:
        system = ak.AgentSystem.open(sys.argv[1], providers=default_providers(0))
    except ak.StoreLockedError as error:
        print(f"LOCKED {error.holder_pid}", flush=True)
        sys.exit(0)
    print("OWNER", flush=True)
    sys.stdin.readline()
    system.close(timeout_seconds=30)
    print("CLOSED", flush=True)
    """
)


def _line(child: subprocess.Popen[str], *expected: str) -> str:
    """The child's next line that starts with one of ``expected`` (skipping its logs)."""
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith(expected):
            return line.strip()
    raise AssertionError(f"child {child.pid} exited without printing {expected}")


def test_two_processes_racing_to_open_one_store_exactly_one_wins(tmp_path: Path) -> None:
    home = tmp_path / "state"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CONTENDER, str(home)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for child in children:
            assert _line(child, "IMPORTED") == "IMPORTED"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        said = {child.pid: _line(child, "OWNER", "LOCKED") for child in children}
        owners = [pid for pid, line in said.items() if line == "OWNER"]
        assert len(owners) == 1, said
        (owner,) = owners
        (loser_line,) = [line for line in said.values() if line != "OWNER"]
        assert loser_line in (f"LOCKED {owner}", "LOCKED None"), said
        with pytest.raises(ak.StoreLockedError):
            _open(home)  # this process loses too, while the owner lives
        (winner,) = [child for child in children if child.pid == owner]
        out, _ = winner.communicate("\n", timeout=60)
        assert out.splitlines()[-1] == "CLOSED", out
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            child.communicate(timeout=30)
    with _open(home) as after:  # the lock died with its owner's close
        assert after.agents() == []


@pytest.mark.parametrize("ending", ["close", "sigkill"])
def test_another_process_owns_the_store_until_it_closes_or_dies(
    tmp_path: Path, ending: str
) -> None:
    home = tmp_path / "state"
    child = _spawn(home, "hang" if ending == "sigkill" else "answer")
    try:
        with pytest.raises(ak.StoreLockedError, match=f"process {child.pid}") as refused:
            _open(home)
        assert refused.value.holder_pid == child.pid
        if ending == "close":
            out, _ = child.communicate("\n", timeout=60)
            assert out.splitlines()[-1] == "CLOSED", out
            assert child.returncode == 0
            offered = ["m1", "m2"]
        else:
            child.send_signal(signal.SIGKILL)
            child.wait(30)
            assert child.returncode == -signal.SIGKILL
            offered = ["m1", "m2", "m3"]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()

    with _open(home) as taken_over:  # resumes what the dead owner left owed
        agent = taken_over.resolve("owned")
        created = [agent.send(ak.user(m), id=m).created for m in offered]
        durable_before = 1 if ending == "close" else 2
        assert created == [False] * durable_before + [True] * (len(offered) - durable_before)
        assert agent.wait_for_idle(timeout_seconds=30)
        _assert_each_answered_once(taken_over, "owned", offered)


def test_a_model_left_hanging_by_a_dead_owner_is_never_answered_twice(tmp_path: Path) -> None:
    """The in-process twin of the SIGKILL case: the first owner's turn hangs in inference
    while a second message is accepted; the owner is closed with the turn aborted, and the
    next owner answers both exactly once."""
    home = tmp_path / "state"
    model = ak.ScriptedModel([script.hang()])
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    first = _open(home, providers)
    agent = first.create(id="owned")
    agent.send(ak.user("m1"), id="m1")
    assert model.wait_for_requests(1, timeout_seconds=10)
    agent.send(ak.user("m2"), id="m2")
    agent.abort(wait=True, timeout_seconds=10)
    first.close(timeout_seconds=10)

    with _open(home) as second:
        again = second.resolve("owned")
        assert [again.send(ak.user(m), id=m).created for m in ("m1", "m2")] == [False, False]
        second.start()  # the aborted m1 is not owed (decisions.md); m2 is
        assert again.wait_for_idle(timeout_seconds=30)
        users = _user_texts(second.transcript("owned"))
        assert users == ["m1", "m2"]
        assert second.internals.store.read(lambda tx: tx.facts.read_owed("owned")) is None


def _delete_victim(system: ak.AgentSystem, start: threading.Barrier, outcome: list[str]) -> None:
    start.wait()
    try:
        system.delete("victim", timeout_seconds=10)
        outcome.append("deleted")
    except ak.AgentClosedError:
        outcome.append("refused")


def test_close_racing_delete_neither_deadlocks_nor_half_deletes(tmp_path: Path) -> None:
    for round_ in range(4):
        home = tmp_path / f"round{round_}"
        system = _open(home)
        agent = system.create(id="victim")
        agent.send(ak.user("m1"), id="m1")
        start = threading.Barrier(2, timeout=OPEN_TIMEOUT)
        outcome: list[str] = []
        deleter = threading.Thread(target=_delete_victim, args=(system, start, outcome))
        deleter.start()
        start.wait()
        system.close(timeout_seconds=10)
        deleter.join(30)
        assert not deleter.is_alive()

        with _open(home) as after:
            ids = [a.id for a in after.agents()]
            if outcome == ["deleted"]:
                assert ids == []
            else:
                assert outcome == ["refused"]
                assert ids == ["victim"]
                assert after.wait_for_idle("victim", timeout_seconds=10)
                _assert_each_answered_once(after, "victim", ["m1"])
