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

Invariants: a code is kept only as its SHA-256 digest, in memory, and dropped once used or
expired. A session credential is ``<expiry>.<nonce>.<mac>``: an HMAC-SHA256, under a key
derived from the daemon's token, of its expiry (wall-clock seconds) and a 256-bit nonce,
compared in constant time. So it outlives a daemon restart (an open console reconnects and
resumes its streams) and dies with the token (rotating the token signs every console out).
Sign-out deletes the cookie in the browser and revokes its nonce in this process until it
would have expired.
"""

from __future__ import annotations

import hashlib
import hmac
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
    """The one-time codes and console credentials of one daemon (thread-safe).

    ``secret`` is the daemon's token (None: a random key, good for this process only).
    """

    def __init__(
        self, secret: str | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        seed = secrets.token_bytes(32) if secret is None else secret.encode()
        self._key = hmac.new(seed, b"agentkeep console session", hashlib.sha256).digest()
        self._clock = clock
        self._lock = threading.Lock()
        self._codes: dict[bytes, float] = {}
        self._revoked: dict[str, float] = {}

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
        signed = f"{int(self._clock() + SESSION_SECONDS)}.{secrets.token_urlsafe(32)}"
        return f"{signed}.{self._mac(signed)}"

    def revoke(self, credential: str) -> None:
        """End a console session (sign-out), if ``credential`` is one."""
        if self.valid(credential):
            expires, nonce, _ = credential.split(".")
            with self._lock:
                if len(self._revoked) >= _MAX_ENTRIES:
                    self._revoked.pop(next(iter(self._revoked)))
                self._revoked[nonce] = float(expires)

    def valid(self, credential: str) -> bool:
        """True if ``credential`` is a live console session: this token's MAC, unexpired,
        not signed out."""
        fields = credential.split(".")
        if len(fields) != 3 or not fields[0].isdigit():
            return False
        expires, nonce, mac = fields
        if not hmac.compare_digest(mac, self._mac(f"{expires}.{nonce}")):
            return False
        if int(expires) <= self._clock():
            return False
        with self._lock:
            return nonce not in self._revoked

    def _mac(self, signed: str) -> str:
        return hmac.new(self._key, signed.encode(), hashlib.sha256).hexdigest()

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
        for key in [k for k, expires in self._codes.items() if expires <= now]:
            del self._codes[key]
        for nonce in [n for n, expires in self._revoked.items() if expires <= now]:
            del self._revoked[nonce]


def cookie_value(headers: dict[bytes, list[bytes]], name: str) -> str | None:
    """The value of cookie ``name`` in the request's ``Cookie`` headers, or None."""
    wanted = name.encode()
    for header in headers.get(b"cookie", []):
        for pair in header.split(b";"):
            key, sep, value = pair.strip().partition(b"=")
            if sep and key == wanted:
                return value.decode("latin-1")
    return None
