"""The library's logging default: warnings and above on stderr, nothing on stdout.

structlog's own default prints every event, at every level, to *stdout*, which would mix
the library's bookkeeping into an embedding program's output. Opening a store calls
:func:`install_default_logging`, which leaves an application's choice alone:

- structlog already configured (by the embedder, or the CLI's ``configure_logging``): nothing
  changes;
- the standard library's root logger has handlers (the embedder configured ``logging``):
  events go to the ``logging`` logger named after the module, with that configuration's
  levels and handlers;
- otherwise: one line per event on the current ``sys.stderr``, ``warning`` and above.

The level filter is a processor (not a filtering wrapper class), so
``structlog.testing.capture_logs()`` still sees every event.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import MutableMapping
from typing import Any

import structlog

__all__ = ["DEFAULT_LEVEL", "install_default_logging"]

DEFAULT_LEVEL = logging.WARNING

_install_lock = threading.Lock()
_LEVELS = logging.getLevelNamesMapping()


class _StderrLogger(structlog.PrintLogger):
    """A print logger bound to whatever ``sys.stderr`` is when it is created.

    Loggers are created per call (caching is off), so a replaced ``sys.stderr`` (pytest's
    capture, a daemon's redirect) is honoured instead of a closed stream being kept.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(sys.stderr)


def _warnings_and_above(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    if _LEVELS.get(method_name.upper(), logging.CRITICAL) < DEFAULT_LEVEL:
        raise structlog.DropEvent
    return event_dict


def _message(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> str:
    # One plain message: passing the fields as ``extra`` would collide with LogRecord's own
    # attributes (``name``, ``message``...) and make logging raise inside the library.
    fields = dict(event_dict)
    event = fields.pop("event", "")
    return " ".join([str(event), *(f"{key}={value!r}" for key, value in fields.items())])


def install_default_logging() -> None:
    """Configure structlog for an embedding program that has not (idempotent, thread-safe)."""
    with _install_lock:
        if structlog.is_configured():
            return
        if logging.getLogger().handlers:
            structlog.configure(
                processors=[
                    structlog.contextvars.merge_contextvars,
                    structlog.processors.format_exc_info,
                    _message,
                ],
                logger_factory=structlog.stdlib.LoggerFactory(),
                wrapper_class=structlog.stdlib.BoundLogger,
                cache_logger_on_first_use=False,
            )
            return
        structlog.configure(
            processors=[
                _warnings_and_above,
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                # It formats exceptions itself (format_exc_info before it only earns a warning).
                structlog.dev.ConsoleRenderer(colors=False),
            ],
            logger_factory=_StderrLogger,
            cache_logger_on_first_use=False,
        )
