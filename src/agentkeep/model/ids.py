"""Identities: 24-character strings matching ``^[a-z][a-z0-9]*$``, unique across processes.

Each id is 119 bits from the operating system's CSPRNG (``os.urandom``): 24 random bytes,
each turned by one ``bytes.translate`` into a character of the base32 alphabet (``a-z`` and
``2-7``, its low 5 bits: 256 is a multiple of 32, so every character is uniform), the first
then folded onto a letter ``a``-``p`` (4 bits). That is the shape and length of the cuid2
ids agentkeep used before (every stored id stays valid) and at least their collision
resistance. Nothing may assume more of an id than ``is_valid_id``.

Ids are made 64 at a time from one read of the OS's random bytes and handed out from a
list (issue 17: a durable step makes a dozen ids; cuid2 took tens of microseconds each,
and every ``os.urandom`` call releases the GIL, which on a busy process costs a thread
switch). ``list.pop`` and ``list.extend`` are atomic under the GIL, so threads share the
list without a lock (two that find it empty both refill it: more ids, none repeated). A
forked child forgets the ids it inherited, so it never hands out one its parent will.
"""

from __future__ import annotations

import os
import re

_CUID_PATTERN = re.compile(r"^[a-z][a-z0-9]{1,31}$")
_SIZE = 24
_IDS_PER_READ = 64
_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"
_TO_ALPHABET = bytes(_ALPHABET.encode("ascii")[b % 32] for b in range(256))  # a byte's char
_TO_LETTER = {c: "abcdefghijklmnop"[i % 16] for i, c in enumerate(_ALPHABET)}  # two to one

# Made, not yet handed out; each id is handed out once (popped).
_made: list[str] = []
os.register_at_fork(after_in_child=_made.clear)


def _make() -> list[str]:
    chars = os.urandom(_SIZE * _IDS_PER_READ).translate(_TO_ALPHABET).decode("ascii")
    return [_TO_LETTER[chars[i]] + chars[i + 1 : i + _SIZE] for i in range(0, len(chars), _SIZE)]


def new_id() -> str:
    """A fresh id: 24 characters, a letter first, 119 random bits (unguessable, and
    unique across processes and restarts with overwhelming probability)."""
    while True:
        try:
            return _made.pop()
        except IndexError:
            _made.extend(reversed(_make()))  # popped in the order made


def is_valid_id(value: str) -> bool:
    """True if ``value`` has the shape of an agentkeep id (2-32 chars, lowercase alphanumeric,
    starting with a letter)."""
    return bool(_CUID_PATTERN.match(value))
