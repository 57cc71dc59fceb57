"""The tools agents get when the CLI runs them: real ones, and what the gym model calls.

* ``calculator`` (durable: pure, safe to run again after a restart),
* ``word_count`` (durable: pure),
* ``save_note`` (not durable: it appends to ``notes.txt`` in the state directory, a side
  effect that must never happen twice, so after a crash it is reported, not retried),
* ``durable_tool`` / ``fragile_tool``: what
  :class:`~agentkeep.providers.RespondingModel` (the ``local`` provider) calls; they only echo.

Every execution is appended to ``tool-runs.jsonl`` in the state directory (tool, call ids,
process id), so anyone can check which side effects ran, and how often, across crashes.

They are offered through :class:`DemoTools`, per agent: an agent on a local model always
gets them; an agent on a vendor only when its provider asks for them (``demo_tools = true``
in providers.toml), so a real model is never handed echo tools it did not ask for. They are
the tools a definition's ``toolbox.toolIds`` may name (its catalog): a session whose
definition names some is offered only those (and only where the rule above offers them).
"""

from __future__ import annotations

import ast
import operator
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import msgspec

from agentkeep.features import Feature, HookContext
from agentkeep.tools import Tool, ToolContext, tool

NOTES_FILE = "notes.txt"
LEDGER_FILE = "tool-runs.jsonl"


class CalculatorArgs(msgspec.Struct, frozen=True):
    """An arithmetic expression: numbers, + - * / // % ** and parentheses."""

    expression: str


class TextArgs(msgspec.Struct, frozen=True):
    text: str


class GymArgs(msgspec.Struct, frozen=True):
    call: str


class ToolRun(msgspec.Struct, frozen=True, kw_only=True):
    """One line of ``tool-runs.jsonl``: a tool execution that happened."""

    tool: str
    agent_id: str
    call_id: str
    provider_call_id: str
    pid: int


class ToolObserver(Protocol):
    """Told when a tool starts and finishes (``talk`` prints it)."""

    def tool_started(self, agent_id: str, name: str, arguments: str) -> None: ...

    def tool_finished(self, agent_id: str, name: str, result: str) -> None: ...


class Ledger:
    """Appends :class:`ToolRun` lines; each line is one ``write`` on an ``O_APPEND`` file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def record(self, name: str, ctx: ToolContext) -> None:
        run = ToolRun(
            tool=name,
            agent_id=ctx.agent_id,
            call_id=ctx.call_id,
            provider_call_id=ctx.provider_call_id,
            pid=os.getpid(),
        )
        with self._lock, self.path.open("ab") as handle:
            handle.write(msgspec.json.encode(run) + b"\n")

    def runs(self) -> list[ToolRun]:
        """Every recorded run, oldest first (an empty list if nothing ran yet)."""
        if not self.path.exists():
            return []
        decoder = msgspec.json.Decoder(ToolRun)
        lines = self.path.read_bytes().splitlines()
        return [decoder.decode(line) for line in lines if line.strip()]


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


def evaluate(expression: str) -> int | float:
    """Evaluate arithmetic safely (no names, no calls; exponents up to 1000).

    Raises:
        ValueError: The expression is not plain arithmetic, or divides by zero.
    """

    def walk(node: ast.AST) -> int | float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            if isinstance(node.value, bool):
                raise ValueError("not a number: a boolean")
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](walk(node.operand))  # type: ignore[no-any-return]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 1000:
                raise ValueError("exponent too large")
            return _BINARY[type(node.op)](left, right)  # type: ignore[no-any-return]
        raise ValueError(f"not plain arithmetic: {ast.dump(node)[:60]}")

    try:
        value = walk(ast.parse(expression, mode="eval"))
    except SyntaxError as error:
        raise ValueError(f"cannot parse {expression!r}") from error
    except ZeroDivisionError as error:
        raise ValueError("division by zero") from error
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclass(frozen=True, kw_only=True)
class ToolEnvironment:
    """What the CLI's tools need: the state directory, the ledger, who to tell.

    Attributes:
        home: The state directory (``notes.txt`` and ``tool-runs.jsonl`` live there).
        observer: Told about every call (``talk`` prints them), or None.
        after_note: Runs right after ``save_note`` wrote its note and recorded it (the demo
            uses it to have its child process killed in the middle of a tool batch).
    """

    home: Path
    observer: ToolObserver | None = None
    after_note: Callable[[ToolContext], None] | None = None

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.home / LEDGER_FILE)


def build_tools(env: ToolEnvironment) -> list[Tool[Any, Any]]:
    """The CLI's tools, bound to ``env``."""
    ledger = env.ledger

    def observed(name: str, ctx: ToolContext, arguments: Any, run: Callable[[], Any]) -> Any:
        if env.observer is not None:
            env.observer.tool_started(ctx.agent_id, name, msgspec.json.encode(arguments).decode())
        value = run()
        if env.observer is not None:
            env.observer.tool_finished(ctx.agent_id, name, str(value))
        return value

    @tool(durable=True)
    def calculator(ctx: ToolContext, args: CalculatorArgs) -> str:
        """Evaluate an arithmetic expression and return the number."""

        def run() -> str:
            ledger.record("calculator", ctx)
            return str(evaluate(args.expression))

        return str(observed("calculator", ctx, args, run))

    @tool(durable=True)
    def word_count(ctx: ToolContext, args: TextArgs) -> int:
        """Count the words of a text."""

        def run() -> int:
            ledger.record("word_count", ctx)
            return len(args.text.split())

        return int(observed("word_count", ctx, args, run))

    @tool
    def save_note(ctx: ToolContext, args: TextArgs) -> str:
        """Append a note to notes.txt in the state directory (a side effect: runs at most once)."""

        def run() -> str:
            notes = env.home / NOTES_FILE
            with notes.open("a", encoding="utf-8") as handle:
                handle.write(args.text.replace("\n", " ") + "\n")
            ledger.record("save_note", ctx)
            if env.after_note is not None:
                env.after_note(ctx)
            return f"saved to {NOTES_FILE}"

        return str(observed("save_note", ctx, args, run))

    @tool(durable=True)
    def durable_tool(ctx: ToolContext, args: GymArgs) -> str:
        """Echo the call (the gym model calls it on even call numbers)."""
        ledger.record("durable_tool", ctx)
        return f"durable result for {args.call}"

    @tool
    def fragile_tool(ctx: ToolContext, args: GymArgs) -> str:
        """Echo the call (the gym model calls it on odd call numbers; runs at most once)."""
        ledger.record("fragile_tool", ctx)
        return f"fragile result for {args.call}"

    return [calculator, word_count, save_note, durable_tool, fragile_tool]


class DemoTools(Feature):
    """Offers the CLI's tools to the agents whose provider gets them.

    Args:
        tools: The tools (see :func:`build_tools`).
        offered: Whether an agent on this provider id (None: the default provider) gets them.
    """

    name = "cli-demo-tools"

    def __init__(
        self, tools: Sequence[Tool[Any, Any]], offered: Callable[[str | None], bool]
    ) -> None:
        self._tools = tuple(tools)
        self._offered = offered

    def tools(self, ctx: HookContext) -> Sequence[Tool[Any, Any]]:
        # Asked for each request and each tool batch, so a provider switch changes the
        # offer at the next inference; a call to a tool no longer offered is answered
        # with an error result, never run.
        return self._tools if self._offered(ctx.settings.provider) else ()

    def tool_catalog(self) -> Sequence[Tool[Any, Any]]:
        # What a definition's toolbox.toolIds may name (``calculator``, ``word_count``, …).
        return self._tools
