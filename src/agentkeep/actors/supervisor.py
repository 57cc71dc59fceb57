"""Supervisors for pykka actors, modelled on Erlang/OTP's supervisor behaviour.

Pykka has no links, monitors or supervisors; this is the small, general library agentkeep's
tree is built from::

    SystemSupervisor (rest_for_one)
    ├── StoreWriter
    └── AgentSupervisor (one_for_one)
        └── AgentActor <agent id> ...   (transient: passivation is a normal stop)

A child reports its own exits (:class:`SupervisedActor`, or :class:`SupervisedMixin` on another
pykka actor class); a supervisor restarts it by its :class:`ChildSpec`, ``one_for_one`` or
``rest_for_one``, after a :class:`Backoff` delay, at most :class:`RestartIntensity` times per
period. One restart more and the supervisor gives up: it stops its children in reverse start
order and escalates :class:`SupervisorGaveUpError`, to its parent supervisor (as its own
failure), or, at the root, to whoever waits in :meth:`SupervisorRef.wait_for_stop`.

Example (the runtime's tree; ``AgentActor`` subclasses :class:`SupervisedActor`)::

    class Runtime:
        def open(self) -> None:
            self.system = start_supervisor(
                "system",
                strategy="rest_for_one",  # a writer failure restarts the agents after it
                children=[
                    ChildSpec(id="store_writer", start=self._start_writer),
                    ChildSpec(id="agents", start=self._start_agents, shutdown_timeout_seconds=None),
                ],
                on_give_up=self._on_gave_up,  # or: error = self.system.wait_for_stop()
            )

        def _start_agents(self) -> pykka.ActorRef[Any]:
            # Called again on every restart: the new one resumes the agents that owe work.
            self.agents = start_supervisor("agents", children=[self._spec(a) for a in owed()])
            return self.agents.actor_ref

        def _spec(self, agent_id: str) -> ChildSpec:
            # transient: passivation (self.stop()) is a normal exit, a crash restarts it
            return ChildSpec(id=agent_id, start=lambda: AgentActor.start(...), restart="transient")

        def accept_work(self, agent_id: str) -> None:
            self.agents.start_child(self._spec(agent_id))  # DuplicateChildError: already live

The pieces live in :mod:`agentkeep.actors.supervision`; this module is their public face.
"""

from agentkeep.actors.supervision.errors import (
    ChildStartError,
    DuplicateChildError,
    SupervisionDeadlockError,
    SupervisionError,
    SupervisorGaveUpError,
    SupervisorStoppedError,
    UnknownChildError,
)
from agentkeep.actors.supervision.ref import SupervisorRef, start_supervisor
from agentkeep.actors.supervision.scheduling import (
    ManualScheduler,
    ScheduledCall,
    Scheduler,
    ThreadScheduler,
)
from agentkeep.actors.supervision.specs import (
    Backoff,
    ChildInfo,
    ChildSpec,
    ChildStatus,
    RestartIntensity,
    RestartType,
    Strategy,
)
from agentkeep.actors.supervision.supervised import SupervisedActor, SupervisedMixin

__all__ = [
    "Backoff",
    "ChildInfo",
    "ChildSpec",
    "ChildStartError",
    "ChildStatus",
    "DuplicateChildError",
    "ManualScheduler",
    "RestartIntensity",
    "RestartType",
    "ScheduledCall",
    "Scheduler",
    "Strategy",
    "SupervisedActor",
    "SupervisedMixin",
    "SupervisionDeadlockError",
    "SupervisionError",
    "SupervisorGaveUpError",
    "SupervisorRef",
    "SupervisorStoppedError",
    "ThreadScheduler",
    "UnknownChildError",
    "start_supervisor",
]
