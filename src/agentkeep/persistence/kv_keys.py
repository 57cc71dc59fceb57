"""The ``kv`` table's keys: a scope is a path of escaped segments, each followed by ``.``.

Escaping (``%`` → ``%25``, ``.`` → ``%2E``) is prefix-free; :mod:`agentkeep.persistence.kv`
states what follows from it. These functions need no store, so the statement classes (an
agent's delete clears its prefix) and the scoped stores both build on them.
"""

from __future__ import annotations


def escape_segment(segment: str) -> str:
    """Escape one scope segment or key: ``%`` → ``%25``, ``.`` → ``%2E``."""
    return segment.replace("%", "%25").replace(".", "%2E")


def unescape_segment(escaped: str) -> str:
    """Invert :func:`escape_segment`."""
    return escaped.replace("%2E", ".").replace("%25", "%")


def scope_prefix(*segments: str) -> str:
    """The raw key prefix of the scope ``segments`` (``""`` for the root)."""
    for segment in segments:
        check_name(segment, "segment")
    return "".join(escape_segment(segment) + "." for segment in segments)


def agent_prefix(agent_id: str) -> str:
    """The raw prefix under which everything one agent stores in ``kv`` lives."""
    return scope_prefix("agent", agent_id)


def check_name(name: str, what: str) -> None:
    """A scope segment or a key is a non-empty string (``ValueError`` otherwise)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a kv {what} must be a non-empty string, got {name!r}")


__all__ = ["agent_prefix", "check_name", "escape_segment", "scope_prefix", "unescape_segment"]
