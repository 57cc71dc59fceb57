"""structlog configuration: done by the CLI only, never by the library.

Logs go to stderr so stdout carries only command output: readable console lines on a
terminal, one JSON object per line otherwise. The default level is ``warning``, so a
command's output stays clean unless something needs attention; ``-v`` shows ``info`` and
``-vv`` ``debug``. (An embedding program gets the library's own default instead: see
:mod:`agentkeep.logs`.)
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

from agentkeep.logs import SafePrintLoggerFactory

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
DEFAULT_LOG_LEVEL = "warning"


def effective_level(level: str, verbose: int) -> str:
    """``--log-level`` raised by ``-v`` (info) or ``-vv`` (debug); the more detailed wins."""
    name = level.lower()
    if verbose <= 0:
        return name
    wanted = "info" if verbose == 1 else "debug"
    return min(name, wanted, key=LOG_LEVELS.index)


def configure_logging(level: str = DEFAULT_LOG_LEVEL, *, stream: TextIO | None = None) -> None:
    """Route structlog to ``stream`` (stderr) at ``level``.

    Args:
        level: One of :data:`LOG_LEVELS` (case-insensitive).
        stream: Where log lines go; defaults to the current ``sys.stderr``.

    Raises:
        ValueError: ``level`` is not a known level name.
    """
    name = level.lower()
    if name not in LOG_LEVELS:
        raise ValueError(f"unknown log level {level!r}; expected one of {', '.join(LOG_LEVELS)}")
    target = stream if stream is not None else sys.stderr
    rendering: list[Any]
    if _isatty(target):
        # The console renderer formats exceptions itself (format_exc_info before it warns).
        rendering = [structlog.dev.ConsoleRenderer(colors=False)]
    else:
        rendering = [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *rendering,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[name.upper()]
        ),
        # A line that cannot be written (a full disk under the log) is dropped and counted,
        # never raised into the runtime (agentkeep.logs).
        logger_factory=SafePrintLoggerFactory(target),
        # Not cached: a test (or a second invocation in one process) may reconfigure.
        cache_logger_on_first_use=False,
    )


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
