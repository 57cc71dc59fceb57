"""Identities: what a client may name a record by, and the ids agentkeep makes itself.

A client-given id (an agent, session or message id; docs/decisions.md, "One id rule")
is 1-128 lowercase letters, digits, dots, underscores or hyphens (:data:`ID_PATTERN`), and
neither ``.`` nor ``..``: an id is a path segment on the wire (``/v1/sessions/{id}``), where
those two would name another route. A lowercase UUID fits. :func:`agentkeep.errors.check_id` refuses
any other with an ``InvalidIdError`` saying which id and naming the field.
Ids are never used in file paths, and reach SQL only as bound parameters.

A generated id (:func:`new_id`) is 24 characters matching ``^[a-z][a-z0-9]*$``, unique across
processes, so it is also a valid client id. Each is 119 bits from the operating system's
CSPRNG (``os.urandom``): 24 random bytes, each turned by one ``bytes.translate`` into a
character of the base32 alphabet (``a-z`` and ``2-7``, its low 5 bits: 256 is a multiple of
32, so every character is uniform), the first then folded onto a letter ``a``-``p`` (4 bits).
That is the shape and length of the cuid2 ids agentkeep used before, and at least their
collision resistance. Nothing may assume more of an id than ``is_valid_id``.

Ids are made 64 at a time from one read of the OS's random bytes and handed out from a
list (a durable step makes a dozen ids; cuid2 took tens of microseconds each,
and every ``os.urandom`` call releases the GIL, which on a busy process costs a thread
switch). ``list.pop`` and ``list.extend`` are atomic under the GIL, so threads share the
list without a lock (two that find it empty both refill it: more ids, none repeated). A
forked child forgets the ids it inherited, so it never hands out one its parent will.
"""

from __future__ import annotations

import os
import re
from typing import Annotated

import msgspec

#: The wire's id grammar, as JSON Schema and OpenAPI state it: ``.`` and ``..`` are refused
#: too (the lookahead), so the document is as strict as :func:`is_valid_id`.
ID_PATTERN = r"^(?!\.\.?$)[a-z0-9._-]{1,128}$"
#: The longest id.
MAX_ID_CHARS = 128
#: The rule in words, for help texts and error messages.
ID_RULE = (
    f'1-{MAX_ID_CHARS} lowercase letters, digits, dots, underscores or hyphens (not "." or "..")'
)
_ID = re.compile(r"[a-z0-9._-]{1,128}")
_PATH_SEGMENTS = frozenset({".", ".."})

#: A client-given id in a wire struct: a ``str`` whose JSON Schema (``/v1/openapi.json``)
#: states the rule. Decoding does not check it: ``agentkeep.errors.check_id`` does, so the
#: error says which id it is and names the field.
IdString = Annotated[
    str,
    msgspec.Meta(
        extra_json_schema={
            "pattern": ID_PATTERN,
            "minLength": 1,
            "maxLength": MAX_ID_CHARS,
            "description": f"An id: {ID_RULE}.",
        }
    ),
]
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


def is_valid_id(value: object) -> bool:
    """True if ``value`` is a valid id: 1-128 of ``[a-z0-9._-]``, and not ``.`` or ``..``
    (every generated id is one)."""
    return (
        isinstance(value, str) and _ID.fullmatch(value) is not None and value not in _PATH_SEGMENTS
    )


def id_cursor(after: str) -> str:
    """The page cursor ``after`` (any string: "the ids after this one") as a store may bind it.

    No id holds a NUL (:func:`is_valid_id`), so the ids after a string holding one are the
    ids after its text before the first NUL, in byte order: the same page. PostgreSQL's text
    cannot carry a NUL at all, so listings bind this instead of ``after``."""
    return after.split("\x00", 1)[0]
