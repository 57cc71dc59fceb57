"""A world for behaviour tests: a fresh store per test, a scripted model, blocking tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

import agentkeep as ak
from agentkeep.persistence.readonly import ReadOnlyStore
from agentkeep.types import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from agentkeep.types.records import BlockRecord, OwedWork


@contextmanager
def python_child(source: str, home: Path) -> Iterator[subprocess.Popen[str]]:
    """A Python process running ``source`` with ``home`` as its ``sys.argv[1]`` (never this
    process's ``AGENTKEEP_HOME``), its stdout a text pipe, its stderr dropped. It is killed
    (SIGKILL) and reaped on the way out, whatever the test did."""
    env = {k: v for k, v in os.environ.items() if k != "AGENTKEEP_HOME"}
    child = subprocess.Popen(
        [sys.executable, "-c", source, str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        yield child
    finally:
        child.kill()
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()


#: Far above the held-block bound (50 ms): how long a loaded machine may take to show a
#: child's finished block.
DURABLE_BLOCK_SECONDS = 20.0


def wait_for_durable_block(
    home: Path, what: str = "the finished block"
) -> tuple[list[object], OwedWork | None, list[str]]:
    """Poll a child's store read-only (no lock) until agent ``a1`` has a block record, or
    fail at :data:`DURABLE_BLOCK_SECONDS` naming ``what`` never landed. Returns the records,
    the owed fact and the ledger's event types then."""
    deadline = time.monotonic() + DURABLE_BLOCK_SECONDS
    while True:
        try:
            store = ReadOnlyStore.open(home)
        except Exception:  # the child has not created the store yet
            store = None
        if store is not None:
            try:
                records, owed, events = store.read(
                    lambda tx: (
                        tx.records.load("a1"),
                        tx.facts.read_owed("a1"),
                        [e.type for e in tx.ledger.events("a1", 0, 1000)],
                    )
                )
            except Exception:  # the agent's row is not there yet
                records, owed, events = [], None, []
            finally:
                store.close()
            if any(isinstance(r, BlockRecord) for r in records):
                return list(records), owed, events
        assert time.monotonic() < deadline, f"{what} never landed"
        time.sleep(0.02)


def printed(child: subprocess.Popen[str]) -> Iterator[list[Any]]:
    """The JSON lists ``child`` prints, in order (its log lines, which are not, skipped)."""
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("["):
            yield json.loads(line)


class Gate:
    """A latch a tool waits on, so a test decides exactly when a call finishes."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def wait(self, timeout_seconds: float = 30) -> None:
        self.entered.set()
        assert self.release.wait(timeout_seconds), "the test never released the gate"


class EchoArgs(msgspec.Struct):
    text: str = ""


def text_of(message: Message) -> str:
    blocks = getattr(message, "content", ())
    return "".join(b.text for b in blocks if isinstance(b, TextBlock))


def roles(messages: list[Message]) -> list[str]:
    names = {
        UserMessage: "user",
        SystemMessage: "system",
        AssistantMessage: "assistant",
        ToolResultMessage: "tool",
    }
    return [names.get(type(m), type(m).__name__) for m in messages]


def tool_calls(messages: list[Message]) -> list[ToolCallBlock]:
    return [
        b
        for m in messages
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, ToolCallBlock)
    ]


def counting_tool(runs: list[str], *, durable: bool = True) -> ak.Tool[Any, Any]:
    """A ``count`` tool that records each run in ``runs`` (durable: may re-run after a crash)."""

    @ak.tool(durable=durable)
    def count(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Count a run."""
        runs.append(args.text)
        return f"counted {args.text}"

    return count


class World:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.model = ak.ScriptedModel()
        self.tool_runs: list[str] = []
        self.gates: dict[str, Gate] = {}
        self.systems: list[ak.AgentSystem] = []

    def gate(self, name: str) -> Gate:
        return self.gates.setdefault(name, Gate())

    def tools(self) -> list[ak.Tool[Any, Any]]:
        world = self

        @ak.tool
        def echo(ctx: ak.ToolContext, args: EchoArgs) -> str:
            """Echo the text back."""
            world.tool_runs.append(f"echo:{args.text}")
            return f"echo {args.text}"

        @ak.tool
        def wait(ctx: ak.ToolContext, args: EchoArgs) -> str:
            """Wait on the gate named by text."""
            world.tool_runs.append(f"wait:{args.text}")
            world.gate(args.text).wait()
            return f"waited {args.text}"

        @ak.tool
        def boom(ctx: ak.ToolContext, args: EchoArgs) -> str:
            """Raise."""
            raise RuntimeError("the tool broke")

        return [echo, wait, boom]

    def open(self, **options: Any) -> ak.AgentSystem:
        providers = options.pop("providers", None)
        if providers is None:
            providers = ak.Providers()
            providers.add("local", self.model, kind="gym")
        system = ak.AgentSystem.open(
            self.home,
            providers=providers,
            provider=options.pop("provider", "local"),
            model=options.pop("model", "gym-1"),
            tools=options.pop("tools", self.tools()),
            **options,
        )
        self.systems.append(system)
        return system


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path / "state")
    yield w
    for gate in w.gates.values():
        gate.release.set()
    for system in w.systems:
        system.close(timeout_seconds=10)


Opener = Callable[..., ak.AgentSystem]
