"""An example harness for the process driver (docs/drivers.md): it echoes the turn's input.

Standard library only, so it starts in a few milliseconds run by path (``python
.../agentkeep/drivers/harnesses/echo.py``; its directory holds nothing that shadows the
standard library) or, slower, as ``python -m agentkeep.drivers.harnesses.echo``. It speaks
the process driver's protocol:

- reads the turn's request, one JSON document, from stdin (to EOF);
- writes JSON lines to stdout: ``harness.started`` (its ``pid`` and the ``historyLength``),
  the reply as ``text.delta`` pieces, then the ``result`` line: the reply message (in the
  input's own shape: ``parts`` or ``content``), a ``driverSessionId`` (kept, or
  ``echo-<session id>`` the first time) and ``metadata``;
- exits 0.

It reads two keys of its definition's ``driver.config``, to watch cancels and crashes:
``gate`` -- a path it opens and reads to EOF before answering (a FIFO blocks it until a
writer opens and closes it); ``fail`` -- a text it writes to stderr before exiting with
status 3.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _text(message: dict[str, Any]) -> str:
    blocks = message.get("parts", message.get("content", []))
    return "".join(
        b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"
    )


def _line(value: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def main() -> int:
    """Answer the one turn on stdin (see the module docstring); the exit status."""
    request = json.load(sys.stdin)
    config = request["revision"]["definition"]["driver"].get("config", {})
    history = request.get("history", [])
    _line({"type": "harness.started", "data": {"pid": os.getpid(), "historyLength": len(history)}})
    if "fail" in config:
        sys.stderr.write(f"echo harness: {config['fail']}\n")
        return 3
    if "gate" in config:
        with open(config["gate"], "rb") as gate:
            gate.read()
    message = request["input"]
    reply = f"echo: {_text(message)}"
    for word in reply.split(" "):
        _line({"type": "text.delta", "data": {"text": word + " "}})
    blocks = [{"type": "text", "text": reply}]
    shape = "parts" if "parts" in message else "content"
    _line(
        {
            "type": "result",
            "message": {"role": "assistant", shape: blocks},
            "driverSessionId": request.get("driverSessionId") or f"echo-{request['session']['id']}",
            "metadata": {"harness": "echo", "historyLength": len(history)},
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
