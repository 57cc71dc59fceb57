"""What every SDK adapter shares: the provider's client and the model session's template.

:class:`VendorProvider` holds the one SDK client (and connection pool) a provider's model
sessions share, its default model and retry policy. :class:`VendorModelSession` is a template:
``stream`` claims the model session for the whole stream, builds the request (a
failure is reported as a ``Done(error)``, never raised), and drives attempts of it through the
retry driver. A vendor supplies only what differs, as hooks: how the body is
built, how its SDK opens the stream, which mapper reads its events, and how its SDK's failures
are classified.

Nothing here imports an SDK, so the vendor modules stay importable without their extras.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from agentkeep.providers._attempt import AttemptRunner, Mapper, VendorStream
from agentkeep.providers._compaction import compact_by_summary
from agentkeep.providers._transport import ResponseSlot
from agentkeep.providers._wire import ToolNames
from agentkeep.providers.credentials import Credential
from agentkeep.providers.local_model_session import ModelSessionRules
from agentkeep.providers.protocol import CancelToken
from agentkeep.providers.retry import AttemptOutcome, RetryPolicy, stream_with_retries
from agentkeep.types import (
    CompactionOutcome,
    Context,
    ModelSessionOptions,
    Selection,
    StreamEvent,
    done_error,
)

Json = dict[str, Any]


class SdkClient(Protocol):
    """What the provider needs of an SDK client: its API root (for ``repr``) and ``close``."""

    @property
    def base_url(self) -> object: ...

    def copy(self, *, api_key: str | None = None) -> Any: ...

    def close(self) -> None: ...


ProviderClientT = TypeVar("ProviderClientT", bound=SdkClient)
ClientT = TypeVar("ClientT")
SettingsT = TypeVar("SettingsT")


class VendorProvider(Generic[ProviderClientT]):
    """One SDK client for all of a provider's model sessions; closing the provider closes it.

    The API key is held only by the client, never here and never in ``repr``.
    """

    def __init__(self, client: ProviderClientT, model: str, retry: RetryPolicy | None) -> None:
        self._client = client
        self._model = model
        self._retry = retry or RetryPolicy()

    def __repr__(self) -> str:
        base_url = str(self._client.base_url)
        return f"{type(self).__name__}(model={self._model!r}, base_url={base_url!r})"

    def close(self) -> None:
        """Close the HTTP client and its pooled connections."""
        self._client.close()

    def open_model_session_as(
        self, agent_id: str, options: ModelSessionOptions, credential: Credential
    ) -> Any:
        """Open a model session whose requests carry ``credential`` as the API key (a
        session's ``authRef``, :class:`~agentkeep.providers.credentials.UsesCredentials`).

        Its client is a copy of the provider's with that key, sharing its connection pool;
        the secret is held by that client only."""
        keyed = copy.copy(self)
        keyed._client = self._client.copy(api_key=credential.secret)
        opener: Any = keyed
        return opener.open_model_session(agent_id, options)


class VendorModelSession(ABC, Generic[ClientT, SettingsT]):
    """One agent's model session over a shared SDK client: one operation at a time, closed once.

    ``settings`` is what the vendor's request builder needs besides the context and
    selection (the default model, and for some vendors more).
    """

    def __init__(
        self,
        client: ClientT,
        agent_id: str,
        options: ModelSessionOptions,
        settings: SettingsT,
        retry: RetryPolicy,
    ) -> None:
        self._client = client
        self.agent_id = agent_id
        self._options = options
        self._settings = settings
        self._retry = retry
        self._names = ToolNames(options.tools)
        self._rules = ModelSessionRules(agent_id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(agent_id={self.agent_id!r})"

    @abstractmethod
    def _build_body(self, context: Context, selection: Selection) -> Json:
        """The request body, plain JSON (its model without the compatibility prefix).

        Raises on a context the vendor cannot express; ``stream`` reports that.
        """

    @abstractmethod
    def _open_stream(self, body: Json) -> VendorStream[Any]:
        """Send ``body`` through the SDK and return its event stream (one attempt)."""

    @abstractmethod
    def _mapper_type(self) -> Callable[[ToolNames], Mapper[Any]]:
        """The vendor's event mapper (its module imports the SDK, so it is imported here)."""

    @abstractmethod
    def _classify_failure(self, failure: BaseException) -> AttemptOutcome | None:
        """The SDK's exception → an outcome; None when it is not the SDK's."""

    def stream(
        self, context: Context, selection: Selection, cancel: CancelToken
    ) -> Iterator[StreamEvent]:
        """Stream one response; exactly one terminal ``Done``, failures never raised."""
        self._rules.begin("stream")
        try:
            try:
                body = self._build_body(context, selection)
            except Exception as failure:  # a malformed context is reported, never raised
                yield done_error(f"could not build the request: {failure}")
                return
            mapper_type = self._mapper_type()
            attempt = AttemptRunner(
                lambda: self._open_stream(body),
                lambda: mapper_type(self._names),
                self._classify_failure,
                ResponseSlot(cancel),
                cancel,
            )
            yield from stream_with_retries(attempt, self._retry, cancel)
        finally:
            self._rules.end()

    def compact(
        self, context: Context, selection: Selection, cancel: CancelToken
    ) -> CompactionOutcome:
        """Summarise ``context`` by a request of its own (tools offered, none called)."""
        return compact_by_summary(self.stream, context, selection, cancel)

    def close(self) -> None:
        """End the model session (once); the provider's HTTP client stays open for the others."""
        self._rules.close()
