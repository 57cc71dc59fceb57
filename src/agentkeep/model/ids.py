"""Identities: cuid2 strings (``^[a-z][a-z0-9]*$``), collision-resistant across processes."""

from __future__ import annotations

import re

from cuid2 import create_id

_CUID_PATTERN = re.compile(r"^[a-z][a-z0-9]{1,31}$")


def new_id() -> str:
    """A fresh cuid2 id."""
    return str(create_id())


def is_valid_id(value: str) -> bool:
    """True if ``value`` has the shape of an agentkeep id (2-32 chars, lowercase alphanumeric,
    starting with a letter)."""
    return bool(_CUID_PATTERN.match(value))
