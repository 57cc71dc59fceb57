"""The context one tool call runs with, and its early result commit (``ctx.commit``).

A call's result can become durable before ``execute`` returns: ``ctx.commit(result)``
validates and renders it as a return would be, then claims it for the pending call in one
transaction that erases the call's store (:func:`agentkeep.runtime.tool_claims.claim_result`).
The first claim wins; once one is made the call's store expires and the tool's return is
ignored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from agentkeep.errors import AgentkeepError, ToolCommitError
from agentkeep.key_value import KeyValueStore
from agentkeep.providers.protocol import CancelToken
from agentkeep.refs import AgentSystemRef
from agentkeep.registry.types import Resources
from agentkeep.tools import Tool, ToolError
from agentkeep.tools.results import validate_result
from agentkeep.types import (
    JSONObject,
    PermissionMode,
    ReasoningEffort,
    ServiceTier,
    Settings,
    ToolResultMessage,
)


@dataclass(frozen=True, kw_only=True)
class CallContext:
    """The :class:`~agentkeep.tools.ToolContext` the runtime hands a tool."""

    agent_id: str
    call_id: str
    provider_call_id: str
    cancel: CancelToken
    kv: KeyValueStore
    system: AgentSystemRef
    permission_mode: PermissionMode
    commits: CallCommits
    loop_id: str | None = None
    turn_id: str | None = None
    inference_id: str | None = None
    open_history_kv: Callable[[], KeyValueStore] | None = None  # makes history_kv

    @cached_property
    def history_kv(self) -> KeyValueStore:
        """See :attr:`agentkeep.tools.ToolContext.history_kv` (made when first read)."""
        if self.open_history_kv is None:
            raise AgentkeepError("This tool context has no history store.")
        return self.open_history_kv()

    # -- the agent's settings and its definition's references --
    settings: Settings = field(default_factory=Settings)  # the batch's settings
    config: dict[str, Any] = field(default_factory=dict)  # the AgentConfig as JSON
    cwd: str | None = None  # workspace.cwd
    resources: Resources = field(default_factory=Resources)  # resources
    driver_config: JSONObject = field(default_factory=dict)  # driver.config

    @property
    def provider(self) -> str | None:
        """``settings.provider``."""
        return self.settings.provider

    @property
    def model(self) -> str | None:
        """``settings.model``."""
        return self.settings.model

    @property
    def effort(self) -> ReasoningEffort | None:
        """``settings.effort``."""
        return self.settings.effort

    @property
    def service_tier(self) -> ServiceTier | None:
        """``settings.service_tier``."""
        return self.settings.service_tier

    def commit(self, result: Any) -> bool:
        """See :meth:`agentkeep.tools.ToolContext.commit`."""
        return self.commits.commit(result)


class CallCommits:
    """The results one live call committed early: the first that won, if any.

    ``claim`` makes a rendered result durable (in its own transaction, or in a transactional
    tool's); it returns False when a result was claimed already or the call is no longer
    pending. Thread-safe: a tool may commit from any of its threads. Once :meth:`close`
    ran (the call returned) or the call was cancelled, a commit is refused.
    """

    def __init__(
        self,
        tool: Tool[Any, Any],
        call_id: str,
        cancel: CancelToken,
        claim: Callable[[ToolResultMessage], bool],
    ) -> None:
        self._tool = tool
        self._call_id = call_id  # the provider's id, which a result carries
        self._cancel = cancel
        self._claim = claim
        self._lock = threading.Lock()
        self._open = True
        self.result: ToolResultMessage | None = None  # the winning commit's result
        self.value: Any = None  # what the tool passed to that commit

    @property
    def open(self) -> bool:
        """The call is live and nothing was committed: its store may still be used."""
        return self._open and self.result is None and not self._cancel.cancelled

    @property
    def running(self) -> bool:
        """The call has not returned and was not cancelled (a commit does not end it)."""
        return self._open and not self._cancel.cancelled

    def close(self) -> None:
        """The call returned: no commit is taken from now on."""
        with self._lock:
            self._open = False

    def commit(self, value: Any) -> bool:
        output = validate_result(self._tool, value)
        if isinstance(output, ToolError):
            raise ToolCommitError(f"ctx.commit was refused: {output.message}")
        message = ToolResultMessage(
            call_id=self._call_id, content=output.content, is_error=output.is_error
        )
        with self._lock:  # one claim at a time; the first that wins is kept
            if self.result is not None:
                return False
            if not self._open or self._cancel.cancelled:
                raise ToolCommitError(
                    f'ctx.commit was refused: the call of "{self._tool.name}" is no longer '
                    "live (it returned or was aborted)."
                )
            if not self._claim(message):
                return False
            self.result, self.value = message, value
            return True
