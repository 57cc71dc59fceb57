"""Identities: 24-character strings matching ``^[a-z][a-z0-9]*$``, unique across processes.

Each id is 119 bits from the operating system's CSPRNG (``os.urandom``, 24 fresh bytes per
id): a letter from ``a``-``p`` (4 bits of the first byte), then 23 characters of the base32
alphabet (``a-z`` and ``2-7``, 5 bits of each following byte). That is the shape and length
of the cuid2 ids agentkeep used before (every stored id stays valid) and at least their
collision resistance. Each byte becomes its character by one ``bytes.translate`` (256 is a
multiple of 16 and of 32, so every character is uniform): about a microsecond an id, where
cuid2 took tens and ``base64.b32encode`` five (a durable step makes a dozen ids, issue 17).
Nothing is kept between ids, so a fork or a restart cannot repeat one. Nothing may assume
more of an id than ``is_valid_id``.
"""

from __future__ import annotations

import os
import re

_CUID_PATTERN = re.compile(r"^[a-z][a-z0-9]{1,31}$")
_SIZE = 24
_FIRST = bytes(b"abcdefghijklmnop"[b % 16] for b in range(256))  # byte -> its first character
_REST = bytes(b"abcdefghijklmnopqrstuvwxyz234567"[b % 32] for b in range(256))  # the others


def new_id() -> str:
    """A fresh id: 24 characters, a letter first, 119 random bits (unguessable, and
    unique across processes and restarts with overwhelming probability)."""
    raw = os.urandom(_SIZE)
    return chr(_FIRST[raw[0]]) + raw[1:].translate(_REST).decode("ascii")


def is_valid_id(value: str) -> bool:
    """True if ``value`` has the shape of an agentkeep id (2-32 chars, lowercase alphanumeric,
    starting with a letter)."""
    return bool(_CUID_PATTERN.match(value))
