"""DRIVERS.md's example driver, ported to Python line by line and loaded with ``--drivers``.

Nothing here is adapted to agentkeep: the request is read as seed 002 describes it (its
revision, history, input and driver session id), a streaming observation is emitted through
the context, and the result is the plain JSON object DRIVERS.md returns. The only change
from the TypeScript is the port's own: ``context.signal.throwIfAborted()`` is Python's
``context.raise_if_cancelled()`` and attribute names are snake_case.
"""

from __future__ import annotations

from typing import Any


class MyRuntime:
    """``defineDriver({id: 'my-runtime', async run(request, context) {...}})``."""

    id = "my-runtime"

    def run(self, request: Any, context: Any) -> dict[str, Any]:
        context.raise_if_cancelled()
        context.emit({"type": "text.delta", "data": {"text": "Working…"}})

        said = "".join(p["text"] for p in request.input["parts"] if p["type"] == "text")
        seen = [message["role"] for message in request.history]
        return {
            "driverSessionId": request.driver_session_id or "native-session-id",
            "message": {
                "role": "assistant",
                "parts": [{"type": "text", "text": f"Done: {said} (after {seen})"}],
            },
            "metadata": {"provider": "example"},
        }


#: "export either an AgentDriver, a `driver` value, or a zero-argument factory"
driver = MyRuntime()
