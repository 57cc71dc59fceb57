"""What the two OpenAI adapters share over ``_vendor_model_session``: the SDK client (opened
with the extra's check), the default model as the model sessions' settings, and reading the
SDK's failures.

Importable without the ``openai`` SDK: it (and ``_openai_common``, which imports it) is
imported only when a provider is constructed or, later, when a failure is classified.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentkeep.errors import MissingExtraError
from agentkeep.providers._vendor_model_session import VendorModelSession, VendorProvider
from agentkeep.providers.retry import AttemptOutcome, RetryPolicy
from agentkeep.types import ModelSessionOptions

if TYPE_CHECKING:
    import openai


class OpenAIClientProvider(VendorProvider["openai.OpenAI"]):
    """A provider over the ``openai`` SDK's sync client (see ``make_client``).

    Raises:
        MissingExtraError: The ``openai`` package is not installed.
    """

    def __init__(
        self,
        *,
        api_key: str | None,
        model: str,
        base_url: str | None,
        retry: RetryPolicy | None,
        timeout_seconds: float,
    ) -> None:
        try:
            import openai as _  # noqa: F401 (the import is the check)
        except ImportError as missing:
            raise MissingExtraError("openai", "openai") from missing
        from agentkeep.providers._openai_common import make_client

        client = make_client(api_key=api_key, base_url=base_url, timeout_seconds=timeout_seconds)
        super().__init__(client, model, retry)

    @property
    def served_models(self) -> str:
        """Any name: which models exist is the server's to say."""
        return f"any model name the server at {self._client.base_url} knows"

    def serves(self, model: str) -> bool:
        """Any non-empty name (an OpenAI-compatible server may serve anything)."""
        return bool(model)


class OpenAIModelSession(VendorModelSession["openai.OpenAI", str]):
    """A model session over the ``openai`` SDK's sync client; its settings are the default model."""

    def __init__(
        self,
        client: openai.OpenAI,
        agent_id: str,
        options: ModelSessionOptions,
        model: str,
        retry: RetryPolicy,
    ) -> None:
        super().__init__(client, agent_id, options, model, retry)

    @property
    def _model(self) -> str:
        return self._settings

    @staticmethod
    def _classify_failure(failure: BaseException) -> AttemptOutcome | None:
        from agentkeep.providers._openai_common import classify_failure

        return classify_failure(failure)
