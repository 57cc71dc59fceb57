"""``agentkeep session export ID``: one conversation as one self-contained file.

The report's data is what the durable state holds for the session, as the wire shows it: the
session, its turns, its whole event ledger (every page), what the runtime holds for it (model
settings, owed work) and, for a session started from a definition, that definition and the
revision the session is pinned to (its instructions, model and toolbox). ``--json`` writes
that data; ``--html`` one HTML page that opens without a server: the console's own renderer
(``server/console/dom.js``, ``ledger.js``, ``console.css``) and the report's (``report.js``,
``report.css``) inlined, the data embedded as JSON in a ``<script type="application/json">``
block and rendered by the page. Invariants:

- **Nothing is fetched.** No external URL is referenced; a Content-Security-Policy of
  ``default-src 'none'`` forbids any load, so even a reference in the data stays inert.
- **Everything is escaped.** The data block escapes ``<``, ``>``, ``&`` and the two JSON line
  separators as ``\\uXXXX``, so no text can end the block; the page builds DOM only from text
  nodes (``dom.js``), never from HTML strings.

What each provider request sent is not stored as such (the request is assembled from the
records and the features' instructions at the time): the page reconstructs each request's
conversation from the ledger (every conversation fact committed before the response began).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from importlib import resources
from typing import Any

from agentkeep.cli.definitions import PAGE_LIMIT, wire
from agentkeep.errors import AgentkeepError
from agentkeep.mcp.backend import Backend
from agentkeep.registry import Revision
from agentkeep.registry.errors import UnknownDefinitionError, UnknownRevisionError
from agentkeep.server.turn_wire import turn_out
from agentkeep.server.wire import agent_out, event_out, revision_out, session_out

#: The format version of the report's data (``--json`` and the page's embedded block).
REPORT_VERSION = 1
#: The console files the page inlines, in order (the report's script last).
_SCRIPTS = ("dom.js", "ledger.js", "report.js")
_STYLES = ("console.css", "report.css")
_IMPORT = re.compile(r"^import\s[^;]*;\s*$", re.MULTILINE)
_EXPORT = re.compile(r"^export\s+(?=(?:async\s+)?function\b|const\b|let\b|class\b)", re.MULTILINE)
_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)


def report_data(
    backend: Backend,
    agent_id: str,
    runtime: dict[str, Any] | None,
    revision: Callable[[str], Revision] | None = None,
) -> dict[str, Any]:
    """Everything the report shows, read from ``backend`` (every page of the ledger);
    ``revision`` reads the session's pinned revision of its definition (from the store)."""
    record = backend.get_session(agent_id)
    events: list[Any] = []
    after = 0
    while True:
        page = backend.events(agent_id, after=after, limit=PAGE_LIMIT)
        events += page
        if len(page) < PAGE_LIMIT:
            break
        after = page[-1].sequence
    turns: list[Any] = []
    after = 0
    while True:
        turn_page = backend.turns(agent_id, after=after, limit=PAGE_LIMIT)
        turns += turn_page
        if len(turn_page) < PAGE_LIMIT:
            break
        after = turn_page[-1].number
    definition = None
    if record.definition_id is not None:
        try:
            found = backend.get_definition(record.definition_id, include_deleted=True)
        except UnknownDefinitionError:
            found = None
        if found is not None:
            definition = wire(agent_out(found))
    pinned = None
    if record.revision_id is not None and revision is not None:
        try:
            pinned = wire(revision_out(revision(record.revision_id)))
        except UnknownRevisionError:
            pinned = None
    return {
        "version": REPORT_VERSION,
        "session": wire(session_out(record)),
        "definition": definition,
        "revision": pinned,
        "runtime": runtime,
        "turns": [wire(turn_out(t)) for t in turns],
        "events": [wire(event_out(e)) for e in events],
    }


def _source(name: str) -> str:
    return (resources.files("agentkeep.server") / "console" / name).read_text(encoding="utf-8")


def _script(name: str) -> str:
    """A console module as a classic script's text: its imports and ``export`` keywords go
    (every module is inlined into one scope, dependencies first)."""
    return _EXPORT.sub("", _IMPORT.sub("", _source(name)))


def embed_json(value: Any) -> str:
    """``value`` as JSON safe inside a ``<script>`` element (and as HTML text)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char in ("<", ">", "&", "\u2028", "\u2029"):
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


def _no_end_tag(text: str, tag: str, name: str) -> str:
    if f"</{tag}" in text.lower():
        raise AgentkeepError(f"{name} cannot be inlined: it contains </{tag}")
    return text


def render_html(data: dict[str, Any]) -> str:
    """The self-contained page showing ``data`` (see the module's invariants)."""
    title = f"agentkeep session {data['session']['id']}"
    styles = "\n".join(_no_end_tag(_source(n), "style", n) for n in _STYLES)
    scripts = "\n".join(_no_end_tag(_script(n), "script", n) for n in _SCRIPTS)
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_html_text(title)}</title>\n<style>\n{styles}\n</style>\n</head>\n"
        '<body class="report">\n<main id="report"><p class="muted">Rendering the report '
        "needs JavaScript.</p></main>\n"
        f'<script type="application/json" id="report-data">{embed_json(data)}</script>\n'
        f'<script>\n"use strict";\n(() => {{\n{scripts}\n}})();\n</script>\n'
        "</body>\n</html>\n"
    )


def _html_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
