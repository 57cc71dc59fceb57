"""What a step did, as a small value: the steps report, :mod:`agentkeep.loop.transitions` drives.

The step modules (:mod:`~agentkeep.loop.loading`, :mod:`~agentkeep.loop.inference`,
:mod:`~agentkeep.loop.tools`, :mod:`~agentkeep.loop.compaction`,
:mod:`~agentkeep.loop.landing`, :mod:`~agentkeep.loop.interruptions`,
:mod:`~agentkeep.loop.offers`, :mod:`~agentkeep.loop.retry`) change the loop's state and
append effects, but never take the run's next step themselves: a step whose end moves the
run returns an :class:`Outcome`, and ``transitions.go_on`` acts on it (``decide``,
``end_turn``, ``stop``, ``begin_turn``, …) at once, where the step would have called it. So
the imports form a tree: ``transitions`` imports the steps, no step imports ``transitions``.
"""

from __future__ import annotations

from enum import Enum, auto


class Outcome(Enum):
    """What happened in a step, for ``transitions.go_on`` to act on."""

    #: Nothing for the run to do now: what the step started (a commit, a child, a timer)
    #: reports back as an event of its own, or nothing was due.
    WAITING = auto()
    #: The step is done: the pass takes its next step (``decide``).
    DONE = auto()
    #: The turn cannot go on: it ends (``end_turn``: a failure note if owed, then
    #: ``after_turn``).
    TURN_OVER = auto()
    #: The run can neither go on nor prove it owes nothing: it stops, the owed fact kept.
    RUN_BLOCKED = auto()
    #: Nothing remembered can be trusted: a new turn reads the durable state (``begin_turn``).
    MEMORY_LOST = auto()
    #: As ``MEMORY_LOST``, after a retry's backoff (retrying forever).
    MEMORY_LOST_RETRYING = auto()
    #: An acceptance consumed under an offer this loop does not hold: a run starts from the
    #: durable state, which holds the consumption (``request_turn``).
    RUN_WANTED = auto()
    #: The loaded turn's lifecycle ids are durable (they landed with the owed fact, or the
    #: load found nothing to write them with): its hooks may be told them now (``open_turn``).
    IDS_DURABLE = auto()
    #: The turn's closing commit (``after_turn_transact``) landed: ``after_turn`` runs.
    TURN_CLOSED = auto()
    #: The loop's closing commit (``after_agent_loop_transact``) landed: ``after_agent_loop``
    #: runs.
    LOOP_CLOSED = auto()
    #: The run's settlement landed: it stops, settled.
    SETTLED = auto()
    #: The settlement found work (queued or pending) that arrived meanwhile: the run goes on
    #: with a new turn if it may, else stops with the owed fact kept.
    NOT_SETTLED = auto()
