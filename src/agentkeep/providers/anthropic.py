"""``AnthropicProvider`` (compatibility kind ``claude``): the Messages API, streamed, over the
official ``anthropic`` SDK's synchronous client.

The SDK is an optional extra and is imported only when a provider is constructed, so
``import agentkeep.providers`` works without it. The SDK's own retries are disabled
(``max_retries=0``): agentkeep's retry driver owns retries so each one is reported as a
``Retrying`` event and can be aborted (spec §1.7).

A mid-stream disconnect (the connection ends before ``message_stop``, or the transport
fails) is retried like any transient failure: the attempt's output was tentative, and the
driver rewinds it with ``BlockReset`` before sending the request again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentkeep.errors import MissingExtraError
from agentkeep.providers._anthropic_request import ThinkingMode, build_request
from agentkeep.providers._attempt import AttemptRunner, VendorStream
from agentkeep.providers._compaction import compact_by_summary
from agentkeep.providers._errors import classify, connection_lost
from agentkeep.providers._transport import ResponseSlot
from agentkeep.providers._wire import ToolNames
from agentkeep.providers.local_session import SessionRules
from agentkeep.providers.protocol import CancelToken
from agentkeep.providers.retry import AttemptOutcome, RetryPolicy, stream_with_retries
from agentkeep.providers.types import (
    CompactionOutcome,
    Context,
    Selection,
    SessionOptions,
    StreamEvent,
    done_error,
)

if TYPE_CHECKING:
    import anthropic as anthropic_sdk

DEFAULT_MODEL = "claude-sonnet-4-6"
DEFAULT_MAX_TOKENS = 16384
MODEL_PREFIX = "anthropic/"  # the compatibility family prefix (spec §1.8), not a model name


@dataclass(frozen=True)
class _Settings:
    model: str
    max_tokens: int
    thinking_mode: ThinkingMode


def _now_ms() -> int:
    return int(time.time() * 1000)


def _classify_failure(failure: BaseException) -> AttemptOutcome | None:
    """Anthropic's exceptions → an outcome (see ``_errors`` for the table)."""
    import anthropic as sdk
    import httpx2

    if isinstance(failure, sdk.APIStatusError):
        # An `event: error` mid-stream arrives as a status error on the 200 response.
        status = None if failure.status_code == 200 else failure.status_code
        return classify(
            status=status,
            body=failure.body,
            headers=dict(failure.response.headers),
            message=failure.message,
            request_id=failure.request_id,
            now_ms=_now_ms,
        )
    if isinstance(failure, (sdk.APIConnectionError, httpx2.TransportError)):
        return connection_lost(str(failure) or type(failure).__name__)
    return None


class AnthropicProvider:
    """Opens Anthropic sessions; one HTTP client (and connection pool) for all of them.

    Args:
        api_key: The key; defaults to ``ANTHROPIC_API_KEY``. Held only by the SDK client,
            never in agent state, never in ``repr``.
        model: The model when a request's selection names none.
        base_url: The API root (a local server in tests); defaults to the SDK's.
        max_tokens: The output limit of a request (raised above a thinking budget).
        thinking_mode: ``"adaptive"`` (current models: the effort goes in ``output_config``)
            or ``"budget"`` (older models: the effort becomes ``budget_tokens``).
        retry: Retry count, jitter source and sleep (spec §1.7).
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
        self._client = sdk.Anthropic(
            api_key=key,
            base_url=base_url,
            max_retries=0,  # agentkeep's driver owns retries (reported, abortable)
            timeout=timeout_seconds,
        )
        self._model = model
        self._max_tokens = max_tokens
        self._thinking_mode: ThinkingMode = thinking_mode
        self._retry = retry or RetryPolicy()

    def __repr__(self) -> str:
        return f"AnthropicProvider(model={self._model!r}, base_url={str(self._client.base_url)!r})"

    def open_session(self, session_id: str, options: SessionOptions) -> AnthropicSession:
        """Open a session for fixed instructions and tools (spec §1.1)."""
        return AnthropicSession(
            self._client,
            session_id,
            options,
            _Settings(self._model, self._max_tokens, self._thinking_mode),
            self._retry,
        )

    def close(self) -> None:
        """Close the HTTP client and its pooled connections."""
        self._client.close()


class AnthropicSession:
    """One agent's Anthropic session: stateless on the wire, one operation at a time."""

    def __init__(
        self,
        client: anthropic_sdk.Anthropic,
        session_id: str,
        options: SessionOptions,
        settings: _Settings,
        retry: RetryPolicy,
    ) -> None:
        self._client = client
        self.session_id = session_id
        self._options = options
        self._settings = settings
        self._retry = retry
        self._names = ToolNames(options.tools)
        self._rules = SessionRules(session_id)

    def __repr__(self) -> str:
        return f"AnthropicSession(session_id={self.session_id!r})"

    def stream(
        self, context: Context, selection: Selection, cancel: CancelToken
    ) -> Iterator[StreamEvent]:
        """Stream one response; exactly one terminal ``Done``, failures never raised."""
        self._rules.begin("stream")
        try:
            yield from self._stream(context, selection, cancel)
        finally:
            self._rules.end()

    def _stream(
        self, context: Context, selection: Selection, cancel: CancelToken
    ) -> Iterator[StreamEvent]:
        try:
            body = build_request(
                self._options,
                context,
                selection,
                model=self._settings.model,
                max_tokens=self._settings.max_tokens,
                thinking_mode=self._settings.thinking_mode,
            )
        except Exception as failure:  # a malformed context is reported, never raised
            yield done_error(f"could not build the request: {failure}")
            return
        body["model"] = str(body["model"]).removeprefix(MODEL_PREFIX)
        from agentkeep.providers._anthropic_stream import AnthropicStreamMapper

        client = self._client

        def open_stream() -> VendorStream[Any]:
            # The body holds plain JSON built by _anthropic_request; the SDK's TypedDict
            # params describe the same JSON, so it is passed through unchanged.
            return client.messages.create(**body, stream=True)

        attempt = AttemptRunner(
            open_stream,
            lambda: AnthropicStreamMapper(self._names),
            _classify_failure,
            ResponseSlot(cancel),
            cancel,
        )
        yield from stream_with_retries(attempt, self._retry, cancel)

    def compact(
        self, context: Context, selection: Selection, cancel: CancelToken
    ) -> CompactionOutcome:
        """Summarise ``context`` by a request of its own (tools offered, none called)."""
        return compact_by_summary(self.stream, context, selection, cancel)

    def close(self) -> None:
        """End the session (once); the provider's HTTP client stays open for other sessions."""
        self._rules.close()
