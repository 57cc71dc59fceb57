"""SIGTERM/SIGINT for a daemon that embeds an AgentSystem: each starts a graceful shutdown."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

from agentkeep.logs import get_logger

log = get_logger(__name__)


class ShutdownSignals:
    """Installed from the main thread; the handler only starts a thread (a signal handler
    must not block), which runs ``shutdown`` and then sets :attr:`finished`."""

    def __init__(self, shutdown: Callable[[], None]) -> None:
        self._shutdown = shutdown
        self.finished = threading.Event()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        log.info("shutdown_signal", signal=signal.Signals(signum).name)
        threading.Thread(target=self._run, name="agentkeep-shutdown").start()

    def _run(self) -> None:
        try:
            self._shutdown()
        finally:
            self.finished.set()
