"""``AnthropicProvider`` (compatibility kind ``claude``): the Messages API, streamed, over the
official ``anthropic`` SDK's synchronous client.

The SDK is an optional extra and is imported only when a provider is constructed, so
``import agentkeep.providers`` works without it. The SDK's own retries are disabled
(``max_retries=0``): agentkeep's retry driver owns retries so each one is reported as a
``Retrying`` event and can be aborted.

A mid-stream disconnect (the connection ends before ``message_stop``, or the transport
fails) is retried like any transient failure: the attempt's output was tentative, and the
driver rewinds it with ``BlockReset`` before sending the request again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentkeep.errors import MissingExtraError
from agentkeep.providers._anthropic_request import ThinkingMode, build_request
from agentkeep.providers._attempt import Mapper, VendorStream
from agentkeep.providers._errors import classify_status_error, transport_failed
from agentkeep.providers._vendor_model_session import Json, VendorModelSession, VendorProvider
from agentkeep.providers._wire import ToolNames
from agentkeep.providers.retry import AttemptOutcome, RetryPolicy
from agentkeep.types import Context, ModelSessionOptions, Selection

if TYPE_CHECKING:
    import anthropic as anthropic_sdk

DEFAULT_MODEL = "claude-sonnet-4-6"
DEFAULT_MAX_TOKENS = 16384
MODEL_PREFIX = "anthropic/"  # the compatibility family prefix, not a model name


def serves_anthropic(model: str) -> bool:
    """Whether ``model`` is a name of Anthropic's family: ``claude-*`` or ``anthropic/…``."""
    return model.startswith(("claude-", MODEL_PREFIX)) and model != MODEL_PREFIX


@dataclass(frozen=True)
class _Settings:
    model: str
    max_tokens: int
    thinking_mode: ThinkingMode


class AnthropicProvider(VendorProvider["anthropic_sdk.Anthropic"]):
    """Opens Anthropic model sessions; one HTTP client (and connection pool) for all of them.

    Args:
        api_key: The key; defaults to ``ANTHROPIC_API_KEY``. Held only by the SDK client,
            never in agent state, never in ``repr``.
        model: The model when a request's selection names none.
        base_url: The API root (a local server in tests); defaults to the SDK's.
        max_tokens: The output limit of a request (raised above a thinking budget).
        thinking_mode: ``"adaptive"`` (current models: the effort goes in ``output_config``)
            or ``"budget"`` (older models: the effort becomes ``budget_tokens``).
        retry: Retry count, jitter source and sleep.
        timeout_seconds: The SDK's per-request timeout (connect and read).

    Raises:
        MissingExtraError: The ``anthropic`` package is not installed.
    """

    kind = "claude"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        model: str = DEFAULT_MODEL,
        base_url: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        thinking_mode: ThinkingMode = "adaptive",
        retry: RetryPolicy | None = None,
        timeout_seconds: float = 600.0,
    ) -> None:
        try:
            import anthropic as sdk
        except ImportError as missing:
            raise MissingExtraError("anthropic", "anthropic") from missing
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        client: anthropic_sdk.Anthropic = sdk.Anthropic(
            api_key=key,
            base_url=base_url,
            max_retries=0,  # agentkeep's driver owns retries (reported, abortable)
            timeout=timeout_seconds,
        )
        super().__init__(client, model, retry)
        self._max_tokens = max_tokens
        self._thinking_mode: ThinkingMode = thinking_mode

    @property
    def served_models(self) -> str:
        """Anthropic's family: ``claude-*`` names, or any ``anthropic/<name>``."""
        return "Anthropic models (claude-* or anthropic/<name>)"

    def serves(self, model: str) -> bool:
        """Any name of Anthropic's family (the API itself knows which exist)."""
        return serves_anthropic(model)

    def open_model_session(
        self, agent_id: str, options: ModelSessionOptions
    ) -> AnthropicModelSession:
        """Open a model session for fixed instructions and tools."""
        return AnthropicModelSession(
            self._client,
            agent_id,
            options,
            _Settings(self._model, self._max_tokens, self._thinking_mode),
            self._retry,
        )


class AnthropicModelSession(VendorModelSession["anthropic_sdk.Anthropic", _Settings]):
    """One agent's Anthropic model session: stateless on the wire, one operation at a time."""

    def _build_body(self, context: Context, selection: Selection) -> Json:
        body = build_request(
            self._options,
            context,
            selection,
            model=self._settings.model,
            max_tokens=self._settings.max_tokens,
            thinking_mode=self._settings.thinking_mode,
        )
        body["model"] = str(body["model"]).removeprefix(MODEL_PREFIX)
        return body

    def _open_stream(self, body: Json) -> VendorStream[Any]:
        # The body holds plain JSON built by _anthropic_request; the SDK's TypedDict
        # params describe the same JSON, so it is passed through unchanged.
        return self._client.messages.create(**body, stream=True)

    def _mapper_type(self) -> Callable[[ToolNames], Mapper[Any]]:
        from agentkeep.providers._anthropic_stream import AnthropicStreamMapper

        return AnthropicStreamMapper

    @staticmethod
    def _classify_failure(failure: BaseException) -> AttemptOutcome | None:
        """Anthropic's exceptions → an outcome (see ``_errors`` for the table)."""
        import anthropic as sdk
        import httpx2

        if isinstance(failure, sdk.APIStatusError):
            # An `event: error` mid-stream arrives as a status error on the 200 response.
            status = None if failure.status_code == 200 else failure.status_code
            return classify_status_error(failure, status=status)
        if isinstance(failure, (sdk.APIConnectionError, httpx2.TransportError)):
            return transport_failed(failure)
        return None
