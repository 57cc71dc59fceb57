"""The agent system: the facade users hold (:class:`AgentSystem`, :class:`Agent`) and the
parts it is composed of, each a private module of this package.

- ``_facade``: :class:`AgentSystem`, one-line delegations to the parts below;
- ``_agent``: :class:`Agent`, a handle on one agent;
- ``_opening``: ``open``'s options (:class:`SystemOptions`), their checks, turn recovery;
- ``_reads``: snapshot reads of an agent's durable state, and its metadata update;
- ``_internals``: the parts, built once by ``open`` (``AgentSystem.internals``);
- ``_acceptance``: the one acceptance path of a message (``_driver_turns``: a driver's);
- ``_requests``: the requests to a running agent (abort, compact, wait, wake);
- ``_transactions``: an embedder's transaction, and the commands refused inside one;
- ``_stopping``: ``close``, ``shutdown``, giving up, the daemon's signal handlers;
- ``_rows``: creating, listing and relabelling agents (:class:`AgentInfo`);
- ``_signals``: SIGTERM/SIGINT for a daemon;
- :mod:`~agentkeep.agent_system.compaction`: compacting a session now and saying what it did
  (the daemon's and the MCP server's ``compact``).
"""

from agentkeep.agent_system._agent import Agent
from agentkeep.agent_system._facade import AgentSystem
from agentkeep.agent_system._opening import SystemOptions
from agentkeep.agent_system._rows import AgentInfo

__all__ = ["Agent", "AgentInfo", "AgentSystem", "SystemOptions"]
