"""Reading a session's whole event ledger, one page at a time.

Below the world (which reads the ledger with the durable state) and the ledger checks (which
judge what it reads), so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable

from agentkeep.types import SessionEvent

#: The page size every caller asks ``after -> events`` for (a shorter page is the last).
EVENT_PAGE = 1000


def read_all(page: Callable[[int], list[SessionEvent]]) -> list[SessionEvent]:
    """Every event, one page (``after -> events``) at a time."""
    events: list[SessionEvent] = []
    while True:
        batch = page(events[-1].sequence if events else 0)
        events += batch
        if len(batch) < EVENT_PAGE:
            return events


__all__ = ["EVENT_PAGE", "read_all"]
