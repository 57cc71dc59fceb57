"""How ``AgentSystem`` stops: ``close`` (admit nothing new, let admitted work finish),
``shutdown`` (stop before the next step; owed work resumes at the next open), stopping on its
own when the system supervisor gives up, and the signal handlers of a daemon.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from agentkeep._admission import Admission
from agentkeep.actors.agent_tier import AgentTier
from agentkeep.actors.loop_thread import current_loop_agent
from agentkeep.actors.supervisor import SupervisorRef
from agentkeep.agent_system._signals import ShutdownSignals
from agentkeep.drivers.host import DriverHost
from agentkeep.errors import AgentClosedError
from agentkeep.logs import get_logger
from agentkeep.loop.events import ShutdownRequested, StopRetrying
from agentkeep.persistence.store import Store

log = get_logger(__name__)

_TREE_STOP_SECONDS = 60.0


class Stopping:
    """``AgentSystem``'s stopping. The system's supervision tree is started after this
    object (the tree's ``on_give_up`` is :meth:`gave_up`) and handed over with :meth:`run`."""

    def __init__(
        self,
        store: Store,
        *,
        admission: Admission,
        agents: AgentTier,
        drivers: DriverHost,
        providers_off: Callable[[], None],
    ) -> None:
        self._store = store
        self._admission = admission
        self._agents = agents
        self._drivers = drivers
        self._providers_off = providers_off
        self._tree: SupervisorRef | None = None
        self._failure: BaseException | None = None
        self._stopped = threading.Event()
        self._shut_down = threading.Event()  # set once the store is released, however
        self._signals: ShutdownSignals | None = None

    def run(self, tree: SupervisorRef) -> None:
        """The system's supervision tree, started: :meth:`close` stops it."""
        self._tree = tree

    def close(self, *, timeout_seconds: float | None = 30.0) -> None:
        """``AgentSystem.close`` (documented there)."""
        inside = current_loop_agent()
        if inside is not None:
            threading.Thread(target=self.close, name="agentkeep-close", daemon=True).start()
            raise AgentClosedError(
                f'Closing the system from inside agent "{inside}"\'s loop would wait for a turn '
                "that cannot finish; the system is closing in the background."
            )
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        if not self._admission.begin_close(timeout_seconds):
            return  # another close or shutdown did the work
        # Retrying forever never finishes on its own: closing stops it (the work stays owed).
        self._agents.tell_all(StopRetrying())
        # After the tree gave up no actor is left to finish anything: do not wait for one.
        for agent_id in self._agents.live() if self._failure is None else ():
            known = self._agents.known(agent_id)
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if known is not None and not known.status.wait_for_idle(remaining):
                log.warning("agent_close_timed_out", agent_id=agent_id)
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if self._failure is None and not self._drivers.wait_idle(remaining):
            log.warning("driver_close_timed_out")
        self._stop_tree()

    def shutdown(self, *, timeout_seconds: float | None = 30.0) -> None:
        """``AgentSystem.shutdown`` (documented there)."""
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        if not self._admission.begin_close(_TREE_STOP_SECONDS):
            return  # another close or shutdown did the work
        self._agents.tell_all(ShutdownRequested())
        for agent_id in self._agents.live():
            known = self._agents.known(agent_id)
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if known is not None and not known.status.wait_for_idle(remaining):
                log.warning("agent_shutdown_timed_out", agent_id=agent_id)
        self._stop_tree()

    def _stop_tree(self) -> None:
        """Stop the agents, then the writer (reverse start order), then release the store."""
        self._drivers.stop()  # runs still going get their cancel signal and grace
        self._agents.stop_all()
        try:
            if self._tree is not None:
                self._tree.stop(timeout_seconds=_TREE_STOP_SECONDS)
        except Exception as error:  # it gave up (and stopped) already, or timed out
            log.warning("agent_system_tree_stop_failed", error=repr(error))
        finally:
            self._providers_off()
            self._store.close()
            self._admission.closed()
            self._shut_down.set()

    @property
    def failure(self) -> BaseException | None:
        """Why the system stopped on its own (a failure storm past the restart intensity)."""
        return self._failure

    def wait_for_failure(self, timeout_seconds: float | None = None) -> BaseException | None:
        """Block until the system stopped on its own; returns the error (None on timeout)."""
        self._stopped.wait(timeout_seconds)
        return self._failure

    def gave_up(self, error: BaseException) -> None:
        """The system supervisor gave up (it has stopped the agents and the writer): release
        the store cleanly, keep the durable state, surface the error."""
        log.error("agent_system_gave_up", error=repr(error))
        self._failure = error

        def stop() -> None:
            try:
                self.close(timeout_seconds=5.0)
            finally:
                self._stopped.set()

        threading.Thread(target=stop, name="agentkeep-give-up", daemon=True).start()

    def install_signal_handlers(self) -> None:
        """``AgentSystem.install_signal_handlers`` (documented there)."""
        self._signals = ShutdownSignals(self.shutdown)
        self._signals.install()

    def wait_for_shutdown(self, timeout_seconds: float | None = None) -> bool:
        """``AgentSystem.wait_for_shutdown`` (documented there)."""
        return self._shut_down.wait(timeout_seconds)
