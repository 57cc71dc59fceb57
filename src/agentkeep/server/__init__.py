"""The daemon: a REST API (docs/daemon.md) and an SSE event stream over an embedded ``AgentSystem``.

``agentkeep serve`` runs it (``docs/daemon.md``); a program that embeds a system can serve it
too::

    with ak.AgentSystem.open(home, providers=providers) as system:
        server = RunningServer(system, ServeOptions(port=0, token=token)).start()
        ...  # server.url
        server.stop()

- :mod:`~agentkeep.server.app`: the Starlette app (:func:`create_app`);
- :mod:`~agentkeep.server.security`: the token, Host/Origin, content type and size guard;
- :mod:`~agentkeep.server.routes_agents`, :mod:`~agentkeep.server.routes_sessions`,
  :mod:`~agentkeep.server.routes_events`: the routes;
- :mod:`~agentkeep.server.wire`: the JSON shapes; :mod:`~agentkeep.server.errors`: the
  error envelope; :mod:`~agentkeep.server.openapi`: ``/v1/openapi.json``;
- :mod:`~agentkeep.server.sse`: committed events from a subscription to the event loop;
- :mod:`~agentkeep.server.daemon`: uvicorn in a thread, ``daemon.json``, signals.
"""

from agentkeep.server.app import create_app
from agentkeep.server.daemon import (
    DAEMON_FILE,
    DEFAULT_HOST,
    DEFAULT_PORT,
    RunningServer,
    ServeOptions,
    make_home_private,
    run_daemon,
)
from agentkeep.server.security import (
    MAX_BODY_BYTES,
    TOKEN_ENV,
    TOKEN_FILE,
    DaemonConfigError,
    SecurityPolicy,
    is_loopback,
    load_token,
)

__all__ = [
    "DAEMON_FILE",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "MAX_BODY_BYTES",
    "TOKEN_ENV",
    "TOKEN_FILE",
    "DaemonConfigError",
    "RunningServer",
    "SecurityPolicy",
    "ServeOptions",
    "create_app",
    "is_loopback",
    "load_token",
    "make_home_private",
    "run_daemon",
]
