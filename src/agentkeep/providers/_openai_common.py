"""What the two OpenAI adapters share: the SDK client and reading its failures.

Imported only after the ``openai`` SDK was found (the adapters import it lazily).
"""

from __future__ import annotations

import os

import httpx2
import openai

from agentkeep.providers._errors import classify, classify_status_error, now_ms, transport_failed
from agentkeep.providers.retry import AttemptOutcome

MODEL_PREFIX = "openai/"  # the compatibility family prefix, not a model name


def make_client(
    *, api_key: str | None, base_url: str | None, timeout_seconds: float
) -> openai.OpenAI:
    """A sync client with the SDK's retries off (agentkeep's driver owns and reports them)."""
    key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
    return openai.OpenAI(
        api_key=key or "unset",  # the SDK refuses no key; a missing key fails as a 401
        base_url=base_url,
        max_retries=0,
        timeout=timeout_seconds,
    )


def classify_failure(failure: BaseException) -> AttemptOutcome | None:
    """OpenAI's exceptions → an outcome (see ``_errors`` for the table)."""
    if isinstance(failure, openai.APIStatusError):
        return classify_status_error(failure, status=failure.status_code)
    if isinstance(failure, (openai.APIConnectionError, httpx2.TransportError)):
        return transport_failed(failure)
    if isinstance(failure, openai.APIError):  # an error object inside the stream's data
        return classify(
            status=None,
            body={"error": failure.body},
            headers={},
            message=failure.message,
            request_id=None,
            now_ms=now_ms,
        )
    return None
