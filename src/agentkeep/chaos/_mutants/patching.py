"""One way for a mutant to swap an attribute while it is active (every module of
:mod:`agentkeep.chaos._mutants`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_ABSENT = object()


@contextmanager
def patched(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    """Set ``owner.name`` to ``replacement`` while active, then put back exactly what
    ``owner`` itself held: its own value, or nothing (an inherited attribute — a mixin's
    method — is shadowed, then uncovered again)."""
    own = vars(owner).get(name, _ABSENT)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        if own is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, own)
