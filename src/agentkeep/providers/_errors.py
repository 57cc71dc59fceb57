"""Classifying vendor failures into agentkeep's error kinds and retryability.

Adapters extract plain values from their SDK's exception (HTTP status, decoded body, response
headers, message) and hand them here, so both vendors share one table:

=====================================  =================  =======================  =========
what                                    ``Done.kind``      ``provider_error.type``  retried
=====================================  =================  =======================  =========
401 / 403, ``authentication_error``     internal_error     authentication           no
billing, credit, ``insufficient_quota`` billing_error      out_of_tokens            no
context too long (400/413 + message)    context_overflow   unclassified             no
429, ``rate_limit_error``               internal_error     rate_limit (reset_at)    yes
529, 503, ``overloaded_error``          internal_error     server_overloaded        yes
500, 502, 504, ``api_error``            internal_error     internal_server_error    yes
408, 409, connection lost / timeout     internal_error     unclassified             yes
anything else                           internal_error     unclassified             no
=====================================  =================  =======================  =========

The API key never reaches a message or a diagnostic: only status, vendor codes, the request
id and the vendor's own error message (which never echoes the key) are kept.
"""

from __future__ import annotations

import datetime
import email.utils
import re
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from agentkeep.providers.retry import RetryableFailure
from agentkeep.types import (
    Done,
    ErrorKind,
    ProviderErrorInfo,
    ProviderErrorType,
    done_error,
)

_CONTEXT_OVERFLOW = re.compile(
    r"prompt is too long|context[_ ]length[_ ]exceeded|maximum context length|context window"
    r"|exceed(?:s|ed)? (?:the )?context limit|too many (?:input )?tokens|input is too long",
    re.IGNORECASE,
)
_BILLING = re.compile(
    r"credit balance|billing|insufficient_quota|exceeded your current quota|payment",
    re.IGNORECASE,
)
_MAX_MESSAGE_CHARS = 500  # diagnostics are bounded


def _error_fields(body: object) -> tuple[str | None, str | None, str | None]:
    """(type, code, message) from ``{"error": {...}}`` or a bare error object."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            kind, code, message = inner.get("type"), inner.get("code"), inner.get("message")
            return (
                kind if isinstance(kind, str) else None,
                code if isinstance(code, str) else None,
                message if isinstance(message, str) else None,
            )
    return None, None, None


def _duration_seconds(text: str) -> float | None:
    """``"1.5"``, ``"20ms"``, ``"6m0s"``, ``"1h2m3.5s"`` → seconds (OpenAI's reset headers)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(number) * scale[unit] for number, unit in parts)


def _rfc3339_ms(text: str) -> int | None:
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def reset_at_ms(headers: Mapping[str, str], now_ms: int) -> int | None:
    """When a rate limit lifts, from ``retry-after(-ms)`` or the vendors' rate-limit headers."""
    lowered = {key.lower(): value for key, value in headers.items()}
    if (value := lowered.get("retry-after-ms")) is not None:
        seconds = _duration_seconds(value)
        if seconds is not None:
            return now_ms + int(seconds)  # already milliseconds
    if (value := lowered.get("retry-after")) is not None:
        seconds = _duration_seconds(value)
        if seconds is not None:
            return now_ms + int(seconds * 1000)
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            when = None
        if when is not None:
            return int(when.timestamp() * 1000)
    resets: list[int] = []
    for key, value in lowered.items():
        if key.startswith("anthropic-ratelimit-") and key.endswith("-reset"):
            when_ms = _rfc3339_ms(value)  # Anthropic's reset headers are RFC 3339 instants
            if when_ms is not None:
                resets.append(when_ms)
        elif key.startswith("x-ratelimit-reset-"):
            seconds = _duration_seconds(value)
            if seconds is not None:
                resets.append(now_ms + int(seconds * 1000))
    # The limit lifts when the latest exhausted bucket resets; unknown buckets are not
    # distinguished here, so the latest reset is the safe answer.
    return max(resets) if resets else None


def classify(
    *,
    status: int | None,
    body: object,
    headers: Mapping[str, str],
    message: str,
    request_id: str | None,
    now_ms: Callable[[], int],
) -> Done | RetryableFailure:
    """Turn one failed HTTP exchange (or an ``error`` event mid-stream) into an outcome."""
    vendor_type, vendor_code, vendor_message = _error_fields(body)
    text = vendor_message or message
    diagnostics: dict[str, str | int | float | bool | None] = {"status": status}
    if request_id:
        diagnostics["request_id"] = request_id
    if vendor_type:
        diagnostics["vendor_type"] = vendor_type
    if vendor_code:
        diagnostics["code"] = vendor_code
    short = text[:_MAX_MESSAGE_CHARS]
    markers = " ".join(x for x in (vendor_type, vendor_code, text) if x)

    def fail(kind: ErrorKind, error_type: ProviderErrorType) -> Done:
        info = ProviderErrorInfo(type=error_type, diagnostics=diagnostics)
        return done_error(short, kind=kind, provider_error=info)

    def retry(
        error_type: ProviderErrorType, reason: str, reset: int | None = None
    ) -> RetryableFailure:
        info = ProviderErrorInfo(type=error_type, reset_at_ms=reset, diagnostics=diagnostics)
        wait = 0.0 if reset is None else max(0.0, (reset - now_ms()) / 1000)
        return RetryableFailure(reason=f"{reason}: {short}", error=info, min_delay_seconds=wait)

    if status in (401, 403) or vendor_type in ("authentication_error", "permission_error"):
        return fail("internal_error", "authentication")
    if status == 402 or vendor_type == "billing_error" or _BILLING.search(markers):
        return fail("billing_error", "out_of_tokens")
    if status in (400, 413) and _CONTEXT_OVERFLOW.search(markers):
        return fail("context_overflow", "unclassified")
    if status == 429 or vendor_type == "rate_limit_error" or vendor_code == "rate_limit_exceeded":
        return retry("rate_limit", "rate limited", reset_at_ms(headers, now_ms()))
    if status in (503, 529) or vendor_type == "overloaded_error":
        return retry("server_overloaded", "server overloaded")
    if (status is not None and status >= 500) or vendor_type in ("api_error", "server_error"):
        return retry("internal_server_error", "server error")
    if status in (408, 409) or vendor_type == "timeout_error":
        return retry("unclassified", "request timed out")
    if status is None and _CONTEXT_OVERFLOW.search(markers):
        return fail("context_overflow", "unclassified")
    return fail("internal_error", "unclassified")


def now_ms() -> int:
    """The wall clock in milliseconds (rate-limit resets are compared against it)."""
    return int(time.time() * 1000)


class _HasHeaders(Protocol):
    @property
    def headers(self) -> Mapping[str, str]: ...


class StatusError(Protocol):
    """What both SDKs' ``APIStatusError`` carry (the decoded body, the HTTP response)."""

    @property
    def body(self) -> object: ...

    @property
    def message(self) -> str: ...

    @property
    def request_id(self) -> str | None: ...

    @property
    def response(self) -> _HasHeaders: ...


def classify_status_error(failure: StatusError, *, status: int | None) -> Done | RetryableFailure:
    """An SDK's status error → :func:`classify` (``status`` None: an error event mid-stream)."""
    return classify(
        status=status,
        body=failure.body,
        headers=dict(failure.response.headers),
        message=failure.message,
        request_id=failure.request_id,
        now_ms=now_ms,
    )


def transport_failed(failure: BaseException) -> RetryableFailure:
    """An SDK's connection error or a transport exception → :func:`connection_lost`."""
    return connection_lost(str(failure) or type(failure).__name__)


def connection_lost(reason: str) -> RetryableFailure:
    """The transport failed (refused, reset, timed out, cut mid-stream): worth another attempt.

    Sending the request again is safe because an attempt's output is tentative until its
    ``BlockStop``: the driver rewinds it with ``BlockReset`` before retrying.
    """
    return RetryableFailure(
        reason=f"connection lost: {reason[:_MAX_MESSAGE_CHARS]}",
        error=ProviderErrorInfo(type="unclassified", diagnostics={"transport": True}),
    )
