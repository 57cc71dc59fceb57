"""The ledger hub's side of wake-ups from other processes (persistence/ledger/hub.py).

``on_follow`` tells when a session gets its first watcher and loses its last (how a store
that hears other processes' commits learns which to hear); ``committed_elsewhere`` moves a
mark only while the session is watched or someone waits (no marks piled up for sessions
nobody here follows); ``wake_watchers`` wakes the selected sessions' watchers once.
"""

from __future__ import annotations

import threading

from agentkeep.persistence.ledger import LedgerHub


def test_on_follow_is_told_of_the_first_watcher_and_the_last() -> None:
    hub = LedgerHub()
    told: list[tuple[str, bool]] = []
    hub.on_follow = lambda agent_id, on: told.append((agent_id, on))
    first = hub.watch("a", lambda: None)
    second = hub.watch("a", lambda: None)
    other = hub.watch("b", lambda: None)
    assert told == [("a", True), ("b", True)]
    first()
    first()  # idempotent: tells nothing twice
    assert told == [("a", True), ("b", True)]
    second()
    other()
    assert told == [("a", True), ("b", True), ("a", False), ("b", False)]


def test_a_commit_elsewhere_wakes_the_watchers_and_moves_only_followed_marks() -> None:
    hub = LedgerHub()
    woken = threading.Event()
    hub.committed_elsewhere("nobody-watches", 5)
    # Nobody watched it: no mark kept, so a waiter past 0 still waits (and re-reads its
    # store at its poll, as after any lost wake-up).
    assert hub.wait_past("nobody-watches", 0, 0) == 0
    unwatch = hub.watch("a", woken.set)
    hub.committed_elsewhere("a", 7)
    assert woken.is_set()
    assert hub.wait_past("a", 6, 0) == 7
    woken.clear()
    hub.committed_elsewhere("a", 7)  # the same mark again (a duplicate): nothing moves
    assert not woken.is_set()
    unwatch()


def test_a_waiter_is_woken_by_a_commit_elsewhere() -> None:
    hub = LedgerHub()
    seen: list[int] = []
    waiting = threading.Thread(target=lambda: seen.append(hub.wait_past("a", 0, 60)))
    waiting.start()
    while not seen:  # until the waiter counts itself, the mark is not kept; then it is
        hub.committed_elsewhere("a", 3)
        waiting.join(0.01)
    waiting.join()
    assert seen == [3]


def test_wake_watchers_wakes_only_the_selected_sessions() -> None:
    hub = LedgerHub()
    a, b = threading.Event(), threading.Event()
    hub.watch("a", a.set)
    hub.watch("b", b.set)
    hub.wake_watchers(lambda agent_id: agent_id == "b")
    assert (a.is_set(), b.is_set()) == (False, True)
    hub.wake_watchers()
    assert a.is_set()
