"""Admission wakes its condition only when a close or a delete waits on it; the
waiter must still be woken by the last operation that finishes."""

from __future__ import annotations

import threading

from agentkeep._admission import Admission


def _waiting(admission: Admission, flag: object) -> None:
    # The waiter sets its flag under the lock and holds the lock until it waits: once the
    # flag shows and the lock is free, it is waiting.
    while not flag():  # type: ignore[operator]
        pass
    with admission._changed:
        pass


def test_a_close_is_woken_when_the_last_operation_ends() -> None:
    admission = Admission()
    done = threading.Event()
    with admission.operation():
        closer = threading.Thread(target=lambda: (admission.begin_close(60), done.set()))
        closer.start()
        _waiting(admission, lambda: admission._closing)
        assert not done.is_set()
    assert done.wait(10), "the close was not woken by the operation's end"
    closer.join(10)


def test_a_delete_is_woken_when_the_agents_last_operation_ends() -> None:
    admission = Admission()
    entered = threading.Event()

    def delete() -> None:
        with admission.deleting("a", 60):
            entered.set()

    with admission.agent_operation("a"):
        deleter = threading.Thread(target=delete)
        deleter.start()
        _waiting(admission, lambda: "a" in admission._deleting)
        assert not entered.is_set()
    assert entered.wait(10), "the delete was not woken by the agent's operation's end"
    deleter.join(10)
