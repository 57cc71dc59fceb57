"""The loop's mirror of the queues (``loop/landing.py``): every durable entry once, in seq
order per queue, however its acceptance reaches the loop — told by the mailbox (in or out of
order, again after a commit already carried it) or carried by a landed commit that read the
whole queue. Kept by bisection and one set per merge, so a long backlog costs no scan per
entry (``bench/queue_backlog.py``)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

import agentkeep as ak
from agentkeep.loop import landing
from agentkeep.loop.context import LoopContext
from agentkeep.loop.machine import AgentLoop
from agentkeep.types import Settings
from agentkeep.types.records import QueuedMessage, QueuedNotice, QueueName


def _context() -> LoopContext:
    counter = itertools.count()
    loop = AgentLoop("agent", new_id=lambda: f"id{next(counter)}", defaults=Settings())
    return loop._ctx  # the mirror the loop keeps (no event needed to reach it)


def _message(queue: QueueName, seq: int) -> QueuedMessage:
    return QueuedMessage(id=f"{queue}{seq}", queue=queue, message=ak.user("hi"), seq=seq)


ARRIVALS = st.lists(
    st.tuples(
        st.sampled_from(["told", "carried"]),
        st.lists(st.tuples(st.sampled_from(["steering", "send"]), st.integers(1, 30))),
    ),
    max_size=12,
)


@given(arrivals=ARRIVALS)
def test_every_entry_is_mirrored_once_in_seq_order(
    arrivals: list[tuple[str, list[tuple[QueueName, int]]]],
) -> None:
    ctx = _context()
    seen: dict[QueueName, set[int]] = {"steering": set(), "send": set()}
    for how, entries in arrivals:
        messages = [_message(queue, seq) for queue, seq in entries]
        if how == "told":
            for entry in messages:
                landing.accept(ctx, entry, None)
        else:
            landing.accept_all(ctx, messages)
        for queue, seq in entries:
            seen[queue].add(seq)
        for queue in ("steering", "send"):
            assert [m.seq for m in ctx.mirror.queued[queue]] == sorted(seen[queue])
            assert all(m.queue == queue for m in ctx.mirror.queued[queue])


def test_a_notice_told_again_or_late_is_mirrored_once_in_order() -> None:
    ctx = _context()
    for seq in (3, 1, 3, 2, 1):
        landing.accept(ctx, None, QueuedNotice(message=ak.system(f"n{seq}"), seq=seq))
    assert [n.seq for n in ctx.mirror.notices] == [1, 2, 3]


def test_a_carried_queue_as_long_as_the_mirror_but_not_it_adds_what_is_missing() -> None:
    # Entry 2 was removed behind the loop's back (a cancelled queued turn) and entry 4 was
    # accepted but not told yet: the same length, yet entry 4 must be mirrored.
    ctx = _context()
    for seq in (1, 2, 3):
        landing.accept(ctx, _message("send", seq), None)

    landing.accept_all(ctx, [_message("send", 1), _message("send", 3), _message("send", 4)])

    assert [m.seq for m in ctx.mirror.queued["send"]] == [1, 2, 3, 4]


def test_a_carried_queue_that_is_the_mirror_changes_nothing() -> None:
    ctx = _context()
    for queue, seq in (("steering", 5), ("send", 1), ("send", 2)):
        landing.accept(ctx, _message(queue, seq), None)
    mirrored = {queue: list(entries) for queue, entries in ctx.mirror.queued.items()}

    landing.accept_all(ctx, [*ctx.mirror.queued["steering"], *ctx.mirror.queued["send"]])

    assert ctx.mirror.queued == mirrored
