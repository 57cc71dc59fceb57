"""The console's sign-in: one-time links that become a same-origin session cookie.

The daemon's token never has to appear in a page URL past the first step:

1. ``serve`` prints a one-time link ``/console/signin?code=…`` (:meth:`ConsoleSessions.issue`;
   ``POST /v1/console/links`` mints another with the token). A code is single use and
   expires after :data:`CODE_SECONDS`.
2. Opening it redeems the code (:meth:`ConsoleSessions.redeem`) for a fresh session
   credential, set as an ``HttpOnly; SameSite=Strict; Path=/`` cookie, and redirects to
   ``/`` (a clean URL: the used code is worthless anyway).
3. The guard accepts that cookie instead of the token only for a same-origin request
   (:meth:`ConsoleSessions.cookie_allowed`): never when ``Sec-Fetch-Site`` says another site
   sent it, and for an unsafe method only with the console's custom header (which a
   cross-site page cannot send without a CORS preflight, and no CORS header is ever sent).

Invariants: codes and credentials are kept only as SHA-256 digests, in memory (a restart
signs everyone out); comparisons are by digest lookup of a 256-bit random value, so timing
says nothing useful; an expired entry is never honoured and is dropped on the next call.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable

#: The cookie carrying a console session credential.
COOKIE_NAME = "agentkeep_console"
#: The header the console sends with every unsafe request (the CSRF proof).
CSRF_HEADER = "x-agentkeep-console"
#: How long a sign-in code may wait to be used.
CODE_SECONDS = 300.0
#: How long a console session lasts.
SESSION_SECONDS = 12 * 3600.0
_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_CROSS = frozenset({b"cross-site", b"same-site"})
_MAX_ENTRIES = 1024


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


class ConsoleSessions:
    """The one-time codes and console credentials of one daemon (thread-safe)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._codes: dict[bytes, float] = {}
        self._sessions: dict[bytes, float] = {}

    def issue(self, ttl_seconds: float = CODE_SECONDS) -> str:
        """A new one-time sign-in code, valid for ``ttl_seconds``."""
        code = secrets.token_urlsafe(32)
        with self._lock:
            self._prune()
            if len(self._codes) >= _MAX_ENTRIES:
                self._codes.pop(next(iter(self._codes)))
            self._codes[_digest(code)] = self._clock() + ttl_seconds
        return code

    def redeem(self, code: str) -> str | None:
        """The code's session credential (the code is spent), or None: unknown, used or
        expired."""
        with self._lock:
            self._prune()
            if self._codes.pop(_digest(code), None) is None:
                return None
            credential = secrets.token_urlsafe(32)
            if len(self._sessions) >= _MAX_ENTRIES:
                self._sessions.pop(next(iter(self._sessions)))
            self._sessions[_digest(credential)] = self._clock() + SESSION_SECONDS
            return credential

    def revoke(self, credential: str) -> None:
        """End a console session (sign-out)."""
        with self._lock:
            self._sessions.pop(_digest(credential), None)

    def valid(self, credential: str) -> bool:
        """True if ``credential`` is a live console session."""
        with self._lock:
            expires = self._sessions.get(_digest(credential))
            if expires is None:
                return False
            if expires <= self._clock():
                del self._sessions[_digest(credential)]
                return False
            return True

    def cookie_allowed(self, method: str, headers: dict[bytes, list[bytes]]) -> bool:
        """True if the request carries a live console cookie and is same-origin enough to
        use it (the module doc, step 3). The Origin allowlist is the guard's, checked before."""
        fetch_site = headers.get(b"sec-fetch-site", [])
        if any(value.strip().lower() in _CROSS for value in fetch_site):
            return False
        if method in _UNSAFE and headers.get(CSRF_HEADER.encode()) != [b"1"]:
            return False
        credential = cookie_value(headers, COOKIE_NAME)
        return credential is not None and self.valid(credential)

    def _prune(self) -> None:
        now = self._clock()
        for table in (self._codes, self._sessions):
            for key in [k for k, expires in table.items() if expires <= now]:
                del table[key]


def cookie_value(headers: dict[bytes, list[bytes]], name: str) -> str | None:
    """The value of cookie ``name`` in the request's ``Cookie`` headers, or None."""
    wanted = name.encode()
    for header in headers.get(b"cookie", []):
        for pair in header.split(b";"):
            key, sep, value = pair.strip().partition(b"=")
            if sep and key == wanted:
                return value.decode("latin-1")
    return None
