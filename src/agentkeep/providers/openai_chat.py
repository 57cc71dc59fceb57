"""``OpenAICompatibleProvider``: Chat Completions streaming, for any OpenAI-compatible server
(vLLM, llama.cpp server, Ollama, ...), over the official ``openai`` SDK's sync client.

The base URL and model come from configuration. A local server usually needs no key: when
none is given and ``OPENAI_API_KEY`` is unset, a placeholder is sent. The SDK's retries are
off; agentkeep's driver owns them. A stream cut before its ``finish_reason`` is
retried, its tentative output rewound with ``BlockReset``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentkeep.providers._attempt import Mapper, VendorStream
from agentkeep.providers._chat_request import build_request
from agentkeep.providers._openai_adapter import OpenAIClientProvider, OpenAIModelSession
from agentkeep.providers._vendor_model_session import Json
from agentkeep.providers._wire import ToolNames
from agentkeep.providers.retry import RetryPolicy
from agentkeep.types import Context, ModelSessionOptions, Selection


class OpenAICompatibleProvider(OpenAIClientProvider):
    """Opens Chat Completions model sessions against one compatible server.

    Args:
        base_url: The server's API root, e.g. ``http://localhost:8000/v1``.
        model: The model when a request's selection names none.
        api_key: The key, if the server wants one; defaults to ``OPENAI_API_KEY``. Held only
            by the SDK client, never in agent state, never in ``repr``.
        retry: Retry count, jitter source and sleep.
        timeout_seconds: The SDK's per-request timeout.

    Raises:
        MissingExtraError: The ``openai`` package is not installed.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        timeout_seconds: float = 600.0,
    ) -> None:
        super().__init__(
            api_key=api_key,
            model=model,
            base_url=base_url,
            retry=retry,
            timeout_seconds=timeout_seconds,
        )

    def open_model_session(
        self, agent_id: str, options: ModelSessionOptions
    ) -> OpenAIChatModelSession:
        """Open a model session for fixed instructions and tools."""
        return OpenAIChatModelSession(self._client, agent_id, options, self._model, self._retry)


class OpenAIChatModelSession(OpenAIModelSession):
    """One agent's Chat Completions model session: one operation at a time, closed once."""

    def _build_body(self, context: Context, selection: Selection) -> Json:
        return build_request(self._options, context, selection, model=self._model)

    def _open_stream(self, body: Json) -> VendorStream[Any]:
        # Plain JSON built by _chat_request; the SDK's TypedDicts describe it.
        return self._client.chat.completions.create(**body, stream=True)

    def _mapper_type(self) -> Callable[[ToolNames], Mapper[Any]]:
        from agentkeep.providers._chat_stream import ChatStreamMapper

        return ChatStreamMapper
