"""``OpenAICompatibleProvider``: Chat Completions streaming, for any OpenAI-compatible server
(vLLM, llama.cpp server, Ollama, ...), over the official ``openai`` SDK's sync client.

The base URL and model come from configuration. A local server usually needs no key: when
none is given and ``OPENAI_API_KEY`` is unset, a placeholder is sent. The SDK's retries are
off; agentkeep's driver owns them (spec §1.7). A stream cut before its ``finish_reason`` is
retried, its tentative output rewound with ``BlockReset``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from agentkeep.errors import MissingExtraError
from agentkeep.providers._attempt import AttemptRunner, VendorStream
from agentkeep.providers._chat_request import build_request
from agentkeep.providers._compaction import compact_by_summary
from agentkeep.providers._transport import ResponseSlot
from agentkeep.providers._wire import ToolNames
from agentkeep.providers.local_session import SessionRules
from agentkeep.providers.protocol import CancelToken
from agentkeep.providers.retry import RetryPolicy, stream_with_retries
from agentkeep.providers.types import (
    CompactionOutcome,
    Context,
    Selection,
    SessionOptions,
    StreamEvent,
    done_error,
)

if TYPE_CHECKING:
    import openai


class OpenAICompatibleProvider:
    """Opens Chat Completions sessions against one compatible server.

    Args:
        base_url: The server's API root, e.g. ``http://localhost:8000/v1``.
        model: The model when a request's selection names none.
        api_key: The key, if the server wants one; defaults to ``OPENAI_API_KEY``. Held only
            by the SDK client, never in agent state, never in ``repr``.
        retry: Retry count, jitter source and sleep (spec §1.7).
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
        try:
            import openai as _  # noqa: F401 (the import is the check)
        except ImportError as missing:
            raise MissingExtraError("openai", "openai") from missing
        from agentkeep.providers._openai_common import make_client

        self._client = make_client(
            api_key=api_key, base_url=base_url, timeout_seconds=timeout_seconds
        )
        self._model = model
        self._retry = retry or RetryPolicy()

    def __repr__(self) -> str:
        base_url = str(self._client.base_url)
        return f"OpenAICompatibleProvider(model={self._model!r}, base_url={base_url!r})"

    def open_session(self, session_id: str, options: SessionOptions) -> OpenAIChatSession:
        """Open a session for fixed instructions and tools (spec §1.1)."""
        return OpenAIChatSession(self._client, session_id, options, self._model, self._retry)

    def close(self) -> None:
        """Close the HTTP client and its pooled connections."""
        self._client.close()


class OpenAIChatSession:
    """One agent's Chat Completions session: one operation at a time, closed once."""

    def __init__(
        self,
        client: openai.OpenAI,
        session_id: str,
        options: SessionOptions,
        model: str,
        retry: RetryPolicy,
    ) -> None:
        self._client = client
        self.session_id = session_id
        self._options = options
        self._model = model
        self._retry = retry
        self._names = ToolNames(options.tools)
        self._rules = SessionRules(session_id)

    def __repr__(self) -> str:
        return f"OpenAIChatSession(session_id={self.session_id!r})"

    def stream(
        self, context: Context, selection: Selection, cancel: CancelToken
    ) -> Iterator[StreamEvent]:
        """Stream one response; exactly one terminal ``Done``, failures never raised."""
        from agentkeep.providers._chat_stream import ChatStreamMapper
        from agentkeep.providers._openai_common import classify_failure

        self._rules.begin("stream")
        try:
            try:
                body = build_request(self._options, context, selection, model=self._model)
            except Exception as failure:  # a malformed context is reported, never raised
                yield done_error(f"could not build the request: {failure}")
                return
            client = self._client

            def open_stream() -> VendorStream[Any]:
                # Plain JSON built by _chat_request; the SDK's TypedDicts describe it.
                return client.chat.completions.create(**body, stream=True)

            attempt = AttemptRunner(
                open_stream,
                lambda: ChatStreamMapper(self._names),
                classify_failure,
                ResponseSlot(cancel),
                cancel,
            )
            yield from stream_with_retries(attempt, self._retry, cancel)
        finally:
            self._rules.end()

    def compact(
        self, context: Context, selection: Selection, cancel: CancelToken
    ) -> CompactionOutcome:
        """Summarise ``context`` by a request of its own."""
        return compact_by_summary(self.stream, context, selection, cancel)

    def close(self) -> None:
        """End the session (once); the provider's client stays open for other sessions."""
        self._rules.close()
