"""``OpenAIProvider`` (compatibility kind ``codex``): the Responses API, streamed, over the
official ``openai`` SDK's synchronous client.

The SDK is an optional extra, imported only when a provider is constructed. Requests are
stateless (``store: false``): the whole conversation is sent each time, with reasoning items
replayed from their encrypted content. The SDK's retries are off; agentkeep's driver owns them.
A stream cut before ``response.completed`` is retried like a transient failure,
its tentative output rewound with ``BlockReset``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentkeep.providers._attempt import Mapper, VendorStream
from agentkeep.providers._openai_adapter import OpenAIClientProvider, OpenAIModelSession
from agentkeep.providers._responses_request import build_request
from agentkeep.providers._vendor_model_session import Json
from agentkeep.providers._wire import ToolNames
from agentkeep.providers.anthropic import serves_anthropic
from agentkeep.providers.retry import RetryPolicy
from agentkeep.types import Context, ModelSessionOptions, Selection

DEFAULT_MODEL = "gpt-5.2"


class OpenAIProvider(OpenAIClientProvider):
    """Opens OpenAI Responses model sessions; one HTTP client (and pool) for all of them.

    Args:
        api_key: The key; defaults to ``OPENAI_API_KEY``. Held only by the SDK client,
            never in agent state, never in ``repr``.
        model: The model when a request's selection names none.
        base_url: The API root including ``/v1`` (a local server in tests).
        retry: Retry count, jitter source and sleep.
        timeout_seconds: The SDK's per-request timeout.

    Raises:
        MissingExtraError: The ``openai`` package is not installed.
    """

    kind = "codex"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        model: str = DEFAULT_MODEL,
        base_url: str | None = None,
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

    @property
    def served_models(self) -> str:
        """Any Responses API model name, except Anthropic's family."""
        return "OpenAI Responses API models (any name but claude-* or anthropic/<name>)"

    def serves(self, model: str) -> bool:
        """Any name the Responses API may know: everything but Anthropic's family (a
        Responses-compatible server, xAI's for one, serves its own names)."""
        return bool(model) and not serves_anthropic(model)

    def open_model_session(
        self, agent_id: str, options: ModelSessionOptions
    ) -> OpenAIResponsesModelSession:
        """Open a model session for fixed instructions and tools."""
        return OpenAIResponsesModelSession(
            self._client, agent_id, options, self._model, self._retry
        )


class OpenAIResponsesModelSession(OpenAIModelSession):
    """One agent's Responses model session: one operation at a time, closed once."""

    def _build_body(self, context: Context, selection: Selection) -> Json:
        from agentkeep.providers._openai_common import MODEL_PREFIX

        body = build_request(
            self._options, context, selection, model=self._model, agent_id=self.agent_id
        )
        body["model"] = str(body["model"]).removeprefix(MODEL_PREFIX)
        return body

    def _open_stream(self, body: Json) -> VendorStream[Any]:
        # Plain JSON built by _responses_request; the SDK's TypedDicts describe it.
        return self._client.responses.create(**body, stream=True)

    def _mapper_type(self) -> Callable[[ToolNames], Mapper[Any]]:
        from agentkeep.providers._responses_stream import ResponsesStreamMapper

        return ResponsesStreamMapper
