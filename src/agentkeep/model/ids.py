"""Identities: 24-character strings matching ``^[a-z][a-z0-9]*$``, unique across processes.

Each id is 119 bits from the operating system's CSPRNG (``os.urandom``): a lowercase letter,
then 23 base32 characters (``a-z`` and ``2-7``). That is the shape and length of the cuid2 ids
agentkeep used before (every stored id stays valid) and at least their collision resistance,
for a few microseconds instead of tens (cuid2 hashes a fresh entropy pool per id; a durable
step makes several ids, issue 17). Nothing may assume more of an id than ``is_valid_id``.
"""

from __future__ import annotations

import base64
import os
import re

_CUID_PATTERN = re.compile(r"^[a-z][a-z0-9]{1,31}$")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def new_id() -> str:
    """A fresh id: 24 characters, a letter first, 119 random bits (unguessable, and
    unique across processes and restarts with overwhelming probability)."""
    raw = os.urandom(16)
    # raw[15] % 26 picks the letter (a negligible bias); raw[:15] is 120 bits, 115 kept.
    body = base64.b32encode(raw[:15]).decode("ascii").lower()
    return _LETTERS[raw[15] % 26] + body[:23]


def is_valid_id(value: str) -> bool:
    """True if ``value`` has the shape of an agentkeep id (2-32 chars, lowercase alphanumeric,
    starting with a letter)."""
    return bool(_CUID_PATTERN.match(value))
