"""Campaigns inject thousands of faults on purpose, and the store logs each one: while a
campaign runs, only critical lines are kept.

:func:`quiet_logs` restores the embedder's structlog configuration when the campaign ends,
so a campaign run inside another program (the command line invoked in-process, a test)
leaves that program's logging as it found it — unconfigured included: restoring an
unconfigured structlog's values with ``configure`` would mark it configured with structlog's
defaults (every level printed to stdout), and agentkeep's own default logging, installed
only into an unconfigured structlog, would never be installed after it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import structlog

__all__ = ["quiet_logs"]


@contextmanager
def quiet_logs() -> Iterator[None]:
    """Only critical log lines while inside; the previous configuration afterwards."""
    configured, saved = structlog.is_configured(), structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    try:
        yield
    finally:
        if configured:
            structlog.configure(**saved)
        else:
            structlog.reset_defaults()  # unconfigured again, as it was found
