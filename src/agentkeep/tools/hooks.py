"""The four hooks that bracket one tool call (seed: "A tool call is bracketed by four hooks").

In the order a call meets them:

1. ``before_tool_call_transact(ctx, call)`` runs inside the transaction that makes a freshly
   dispatched batch durable, once per call and feature (never again when a batch resumes
   after a restart). ``ctx``'s stores are bound to that transaction, so what it writes
   commits with the dispatch or not at all. Raising rolls the dispatch back: no call of the
   batch runs and the turn fails like any failed commit.
2. ``before_tool_call(ctx, call) -> ToolCallDecision | None`` runs in the call's own thread,
   right before execution, for a call that resolved to a tool and whose arguments validated
   (a refused call reaches no tool hook). Features chain in order: each sees the call as the
   earlier ones amended it; an amendment is resolved and validated again like a call the
   model made (a refusal becomes the call's error result); the first ``answer`` wins and
   the tool never runs. Raising gives the call an error result (the tool never runs).
   It runs again whenever a durable call runs again after a restart (``call.resumed``).
   A decision may also choose another permission mode for this one execution: the tool's
   ``ctx.permission_mode`` (and the later hooks' ``call.permission_mode``) show it; the
   agent's durable mode is unchanged.
3. ``after_tool_call(ctx, call, result)`` observes what a call that reached
   ``before_tool_call`` produced — executed, answered or failed — in the call's thread;
   a failing observer is logged and never affects the call or the run.
4. ``after_tool_call_transact(ctx, call, result)`` runs inside the transaction that appends
   a dispatched call's result — exactly once per durable result, synthetic errors (abort,
   restart, refusals) included. Raising rolls the result back: the batch stops there, the
   turn fails and the run stays owed, to resume the batch later.

Tool-call hooks also get ``ctx.call_kv``: a store of this call for this feature, erased in
the transaction that appends the call's result.

This module holds the values those hooks see and return; chaining the features'
``before_tool_call`` over a call is :func:`agentkeep.features.tool_calls.decide`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from agentkeep.providers.protocol import CancelToken
from agentkeep.tools.definition import Tool
from agentkeep.types import (
    PERMISSION_MODES,
    ImageBlock,
    OutputBlock,
    PermissionMode,
    TextBlock,
    ToolCallBlock,
)


@dataclass(frozen=True, kw_only=True)
class ToolCallInfo:
    """One tool call, as a tool-call hook sees it.

    Attributes:
        call_id: agentkeep's durable id of the call (``ToolContext.call_id``).
        call: The call as it stands: the model's, or as an earlier feature amended it.
        requested: The call as the model made it.
        tool: What ``call`` resolved to (None in the transactional hooks: a call resolves
            only when it runs, against the tools of that moment).
        arguments: ``call``'s validated arguments (None in the transactional hooks).
        resumed: The call runs again after a restart interrupted it.
        cancel: Fires when the call's lifetime ends (abort, close); None in the
            transactional hooks. A ``before_tool_call`` that waits should watch it.
        permission_mode: The permission mode the call runs under: the agent's when its
            batch started, or the one an earlier ``before_tool_call`` chose for it.
    """

    call_id: str
    call: ToolCallBlock
    requested: ToolCallBlock
    tool: Tool[Any, Any] | None = None
    arguments: Any = None
    resumed: bool = False
    cancel: CancelToken | None = None
    permission_mode: PermissionMode = "auto"

    @property
    def name(self) -> str:
        """The name of the tool ``call`` names."""
        return self.call.name

    @property
    def namespace(self) -> str | None:
        """The namespace of the tool ``call`` names, if any."""
        return self.call.namespace

    @property
    def provider_call_id(self) -> str:
        """The provider's id of the call (what its result answers), not agentkeep's ``call_id``."""
        return self.call.call_id


@dataclass(frozen=True, kw_only=True)
class ToolCallDecision:
    """What ``before_tool_call`` decided for one call (return None to leave it alone).

    Either amend the call — ``tool`` runs another tool (``namespace`` then applies as given;
    without ``tool`` the call keeps its namespace) and/or ``arguments`` replaces the
    arguments — or ``answer`` it: the tool never runs and the model is told ``answer`` (text
    or content blocks), as an error result if ``is_error``.

    ``arguments`` is a msgspec Struct, a JSON-compatible value, or a JSON string as a model
    would send it (for a grammar tool: the raw input).

    ``permission_mode`` (an amendment too, alone or with the others) runs this one execution
    under another permission mode: the tool's ``ctx.permission_mode`` shows it, while the
    agent's durable mode stays as it is.
    """

    tool: str | None = None
    namespace: str | None = None
    arguments: Any = None
    answer: str | Sequence[OutputBlock] | None = None
    is_error: bool = False
    permission_mode: PermissionMode | None = None

    def __post_init__(self) -> None:
        mode = self.permission_mode
        if mode is not None and mode not in PERMISSION_MODES:
            raise ValueError(
                f"a tool-call decision's permission_mode must be one of {PERMISSION_MODES}, "
                f"not {mode!r}"
            )
        amends = self.tool is not None or self.arguments is not None or mode is not None
        if self.answer is not None and amends:
            raise ValueError("a tool-call decision either amends the call or answers it")
        if self.answer is None and not amends:
            raise ValueError(
                "a tool-call decision needs tool, arguments, permission_mode or answer "
                "(return None to leave the call alone)"
            )
        if self.namespace is not None and self.tool is None:
            raise ValueError("a tool-call decision's namespace needs its tool")

    def amend(self, call: ToolCallBlock) -> ToolCallBlock:
        """``call`` as this decision amends it (the model's call id stays)."""
        name, namespace = call.name, call.namespace
        if self.tool is not None:
            name, namespace = self.tool, self.namespace
        arguments = call.arguments
        if self.arguments is not None:
            arguments = (
                self.arguments
                if isinstance(self.arguments, str)
                else msgspec.json.encode(self.arguments).decode()
            )
        return msgspec.structs.replace(call, name=name, namespace=namespace, arguments=arguments)

    def content(self) -> tuple[OutputBlock, ...]:
        """The answer as content blocks."""
        if isinstance(self.answer, str):
            return (TextBlock(text=self.answer),)
        blocks = tuple(self.answer or ())
        if not all(isinstance(block, TextBlock | ImageBlock) for block in blocks):
            raise TypeError("an answer is text or a sequence of text and image blocks")
        return blocks


@dataclass(frozen=True, kw_only=True)
class ToolCallResult:
    """What a call produced, for ``after_tool_call``.

    Attributes:
        content: What the model is told.
        is_error: Whether it is an error result.
        executed: The tool ran (False: answered by a hook, refused, or a hook failed).
        value: What the tool's ``execute`` returned, if it ran and returned.
        answered_by: The feature whose ``before_tool_call`` answered the call, if one did.
    """

    content: tuple[OutputBlock, ...]
    is_error: bool = False
    executed: bool = False
    value: Any = None
    answered_by: str | None = None


def failed(text: str) -> ToolCallResult:
    """An error result carrying ``text``: the answer of a call a hook or validation refused."""
    return ToolCallResult(content=(TextBlock(text=text),), is_error=True)
