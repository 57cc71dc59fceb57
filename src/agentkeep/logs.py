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

Invariant: logging never raises into the runtime. A log line is bookkeeping; the
store writer, a supervisor or a request must not fail because its line could not be written
(a full disk under the log file, a closed or broken stderr). Two layers keep it so:

- the sinks this package installs (:class:`SafePrintLogger`, here and in the CLI) drop a line
  they cannot write and count it;
- the runtime's critical modules (the store, supervisors, the server) log through
  :func:`get_logger`, whose every call drops and counts whatever the configured pipeline
  raises, whoever configured it.

:func:`dropped_log_lines` is the count since the process started.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

__all__ = [
    "DEFAULT_LEVEL",
    "SafePrintLogger",
    "SafePrintLoggerFactory",
    "dropped_log_lines",
    "get_logger",
    "install_default_logging",
]

DEFAULT_LEVEL = logging.WARNING

_install_lock = threading.Lock()
_LEVELS = logging.getLevelNamesMapping()


_dropped_lock = threading.Lock()
_dropped = 0
_write_lock = threading.Lock()


def _drop() -> None:
    global _dropped
    with _dropped_lock:
        _dropped += 1


def dropped_log_lines() -> int:
    """Log lines dropped since the process started (a sink that could not write them)."""
    with _dropped_lock:
        return _dropped


class SafePrintLogger:
    """A structlog logger printing one line per event that never raises.

    ``file`` None means whatever ``sys.stderr`` is at each call (pytest's capture, a daemon's
    redirect), so a replaced stream is honoured instead of a closed one being kept. A line
    the stream refuses (``OSError`` such as ENOSPC or EROFS, a closed stream's
    ``ValueError``) is dropped and counted (:func:`dropped_log_lines`).
    """

    def __init__(self, file: TextIO | None = None) -> None:
        self._file = file

    def msg(self, message: str) -> None:
        """Write ``message`` and a newline, or drop and count it (never raises)."""
        stream = self._file if self._file is not None else sys.stderr
        try:
            with _write_lock:
                stream.write(message + "\n")
                stream.flush()
        except Exception:
            _drop()

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class SafePrintLoggerFactory:
    """A structlog ``logger_factory`` of :class:`SafePrintLogger` on ``file`` (None: stderr)."""

    def __init__(self, file: TextIO | None = None) -> None:
        self._file = file

    def __call__(self, *args: Any) -> SafePrintLogger:
        """A logger (structlog passes the logger's name; it is not needed)."""
        return SafePrintLogger(self._file)


class _GuardedLogger:
    """A structlog bound logger whose calls drop and count whatever the pipeline raises."""

    __slots__ = ("_logger",)

    def __init__(self, logger: Any) -> None:
        self._logger = logger

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._logger, name)
        if not callable(attribute):
            return attribute
        rebinds = name in _REBINDING

        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                result = attribute(*args, **kwargs)
            except Exception:
                _drop()
                return self if rebinds else None
            return _GuardedLogger(result) if rebinds else result

        return guarded


_REBINDING = frozenset({"bind", "new", "unbind", "try_unbind"})


def get_logger(name: str) -> Any:
    """``structlog.get_logger(name)`` whose calls never raise (see the module docstring)."""
    return _GuardedLogger(structlog.get_logger(name))


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
            logger_factory=SafePrintLoggerFactory(),
            cache_logger_on_first_use=False,
        )
