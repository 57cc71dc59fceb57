"""``tx.queue``: a session's queued input, inside one transaction.

It holds the message identities a session has accepted (``message_ids``), its two message
queues (``queue``: steering and send), its notices (``notices``) and the per-queue high-water
marks they are numbered from (``queue_tails``).

Invariants:

- A queued message's or notice's ``seq`` comes from the durable high-water mark of its
  (session, queue), bumped and read back in one statement (:meth:`QueueStatements._next_seq`):
  seqs grow strictly across restarts and are never reused.
- :meth:`QueueStatements.claim_message_id` is one ``INSERT OR IGNORE``: the first claim of a
  message id wins, atomically even without the enclosing transaction. An id minted for the
  message being accepted, in its first run, cannot be durable yet: it is claimed by a plain
  ``INSERT`` sent without waiting (:meth:`QueueStatements.claim_fresh_message_id`); were it
  durable after all, that insert fails the work item with a constraint error, never a
  second claim.
- The writer's memo (persistence/memo.py states its invariant: every value it returns equals
  what the database holds at that point of the transaction) remembers each session's whole
  queue in ``_QUEUE_ORDER`` (``("queue", agent_id)``) and its notices in seq order
  (``("notices", agent_id)``). Besides the ``agents`` cascade and raw SQL (which the memo
  accounts for as a whole), only the methods here write those tables, and each records or
  forgets what its statement changed; message ids are not remembered.
"""

from __future__ import annotations

from bisect import bisect_left

import msgspec

from agentkeep.persistence.codec import decode_message, decode_notice, encode
from agentkeep.persistence.executor import TableStatements
from agentkeep.persistence.memo import MISSING
from agentkeep.types.records import QueuedMessage, QueuedNotice, QueueName

_QUEUE_ORDER = "CASE queue WHEN 'steering' THEN 0 ELSE 1 END, seq"
_NOTICE_TAIL = "notice"  # queue_tails key for notices (not a QueueName)


def _rank(queue: str, seq: int) -> tuple[int, int]:
    """The sort key of ``_QUEUE_ORDER``."""
    return (0 if queue == "steering" else 1, seq)


def _queue_rank(message: QueuedMessage) -> tuple[int, int]:
    return _rank(message.queue, message.seq)


#: Below every send entry's rank and above every steering entry's (seqs start at 1).
_FIRST_SEND = _rank("send", 0)


def _at(queue: tuple[QueuedMessage, ...], rank: tuple[int, int]) -> int:
    """Where ``rank`` is or would go in a remembered queue (sorted by ``_QUEUE_ORDER``, each
    rank once): a bisect, so keeping a long queue costs O(log n) Python steps per change and
    C-level slices, not a sort or a scan per message (a backlog of 5,000 made each ``send``
    3x slower)."""
    return bisect_left(queue, rank, key=_queue_rank)


__all__ = ["QueueStatements"]


class QueueStatements(TableStatements):
    """A session's message ids, queues and notices over the enclosing transaction (see the
    module)."""

    # -- message identities ------------------------------------------------------------------
    def claim_message_id(self, agent_id: str, message_id: str) -> bool:
        """Insert-if-absent: False if this id is already durable for the agent."""
        return (
            self._write(
                "INSERT OR IGNORE INTO message_ids (agent_id, message_id) VALUES (?, ?)",
                (agent_id, message_id),
            )
            == 1
        )

    def claim_fresh_message_id(self, agent_id: str, message_id: str) -> None:
        """Claim an id just minted for the message this work accepts, on its first run
        (so never durable yet): sent without waiting for its change count (one round trip
        fewer on PostgreSQL). A later run of the same work (its first one's COMMIT outcome
        unknown) must use :meth:`claim_message_id`: there the id may be durable, and this
        insert would fail the item with ``StoreConstraintError``."""
        self._send(
            "INSERT INTO message_ids (agent_id, message_id) VALUES (?, ?)",
            (agent_id, message_id),
        )

    def release_message_ids(self, agent_id: str, message_ids: list[str]) -> None:
        for message_id in message_ids:
            self._send(
                "DELETE FROM message_ids WHERE agent_id = ? AND message_id = ?",
                (agent_id, message_id),
            )

    # -- queues ------------------------------------------------------------------------------
    def _next_seq(self, agent_id: str, queue: str) -> int:
        # One statement: bump the durable high-water mark and read it back, so seqs grow
        # strictly per (agent, queue) across restarts and are never reused.
        self._check(write=True)
        statements = self._x.statements
        key = ("queue_tail", agent_id, queue)
        known = self._memo.get(key) if statements.sends else MISSING
        self._memo.forget(key)
        bump = (
            "INSERT INTO queue_tails (agent_id, queue, last_seq) VALUES (?, ?, 1) "
            "ON CONFLICT (agent_id, queue) DO UPDATE SET last_seq = queue_tails.last_seq + 1"
        )
        if known is not MISSING:
            # A backend whose statements are round trips: the writer remembers the mark (it
            # is the only writer of it), so the bump is sent without waiting for it.
            seq = int(known) + 1
            statements.send(bump, (agent_id, queue))
        else:
            returned = statements.write(bump + " RETURNING last_seq", (agent_id, queue))
            last = returned.fetchall()[0][0]
            assert isinstance(last, int)
            seq = last
        if statements.sends:
            self._memo.put(key, seq)
        return seq

    def enqueue(self, agent_id: str, message: QueuedMessage) -> QueuedMessage:
        """Append to ``message.queue``; returns the message with its assigned ``seq``."""
        stored = msgspec.structs.replace(message, seq=self._next_seq(agent_id, message.queue))
        key = ("queue", agent_id)
        before = self._memo.get(key)
        self._memo.forget(key)
        self._send(
            "INSERT INTO queue (agent_id, queue, seq, message_id, envelope_json) "
            "VALUES (?, ?, ?, ?, ?)",
            (agent_id, stored.queue, stored.seq, stored.id, encode(stored)),
        )
        if before is not MISSING:
            at = _at(before, _queue_rank(stored))
            self._memo.put(key, (*before[:at], stored, *before[at:]))
        return stored

    def messages(self, agent_id: str, queue: QueueName | None = None) -> list[QueuedMessage]:
        """Queued messages in FIFO order: one queue, or both, steering before send
        (steering outranks sends)."""
        key = ("queue", agent_id)
        everything: tuple[QueuedMessage, ...] = self._memo_get(key)
        if everything is MISSING:
            cursor = self._read(
                f"SELECT envelope_json FROM queue WHERE agent_id = ? ORDER BY {_QUEUE_ORDER}",
                (agent_id,),
            )
            everything = tuple(decode_message(row[0]) for row in cursor)
            self._memo.put(key, everything)
        # The whole queue in (rank, seq) order, so each queue's own part is in seq order.
        if queue is None:
            return list(everything)
        first_send = _at(everything, _FIRST_SEND)
        return list(everything[:first_send] if queue == "steering" else everything[first_send:])

    def dequeue(self, agent_id: str, queue: QueueName, seq: int) -> bool:
        """Delete-if-present: the claim that consumes one entry exactly once."""
        key = ("queue", agent_id)
        before = self._memo.get(key)
        self._memo.forget(key)
        sql = "DELETE FROM queue WHERE agent_id = ? AND queue = ? AND seq = ?"
        present = False
        if before is not MISSING:
            at = _at(before, _rank(queue, seq))
            present = at < len(before) and before[at].queue == queue and before[at].seq == seq
        if present and self._x.statements.sends:
            # Known to be there: the DELETE removes it; sent without waiting for its count.
            self._send(sql, (agent_id, queue, seq))
            removed = True
        else:
            removed = self._write(sql, (agent_id, queue, seq)) == 1
        if before is not MISSING and removed and present:
            self._memo.put(key, (*before[:at], *before[at + 1 :]))
        return removed

    def inject_notice(self, agent_id: str, notice: QueuedNotice) -> QueuedNotice:
        self._memo.forget(("notices", agent_id))
        stored = msgspec.structs.replace(notice, seq=self._next_seq(agent_id, _NOTICE_TAIL))
        self._send(
            "INSERT INTO notices (agent_id, seq, notice_json) VALUES (?, ?, ?)",
            (agent_id, stored.seq, encode(stored)),
        )
        return stored

    def notices(self, agent_id: str) -> list[QueuedNotice]:
        key = ("notices", agent_id)
        found: tuple[QueuedNotice, ...] = self._memo_get(key)
        if found is MISSING:
            cursor = self._read(
                "SELECT notice_json FROM notices WHERE agent_id = ? ORDER BY seq", (agent_id,)
            )
            found = tuple(decode_notice(row[0]) for row in cursor)
            self._memo.put(key, found)
        return list(found)

    def remove_notice(self, agent_id: str, seq: int) -> bool:
        self._memo.forget(("notices", agent_id))
        return (
            self._write("DELETE FROM notices WHERE agent_id = ? AND seq = ?", (agent_id, seq)) == 1
        )
