"""The daemon's guard (docs/daemon.md, "Security"): token, Host, Origin, content type and body size.

Every request passes :class:`Guard` before any route runs, in this order:

1. ``Host`` must be in the allowlist, or **421** (a DNS-rebinding page reaches a loopback
   daemon under its own host name);
2. a present ``Origin`` must be allowed, or **403** (browsers send it cross-site);
3. every ``/v1`` request needs the token, or the canonical **401**: ``Authorization: Bearer``
   (the scheme case-insensitive) or ``x-amalgm-runtime-token``, compared with
   :func:`hmac.compare_digest` on bytes — or, instead, the console's session cookie on a
   same-origin request (:mod:`agentkeep.server.console_auth`);
4. a ``POST``/``PATCH`` with a body must declare JSON (**415**) and be at most
   :data:`MAX_BODY_BYTES` (**413**; a body without a length is counted while it is read,
   :func:`agentkeep.server.requests.read_body`).

``/metrics`` (:data:`METRICS_PATH`) needs the token too, the token only (step 3).
No CORS headers are ever sent. The token is never read from a URL and never logged.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from agentkeep.errors import AgentkeepError
from agentkeep.server.console_auth import ConsoleSessions
from agentkeep.server.errors import ApiError, error_response, unauthorized

#: The largest request body accepted (512 KB, docs/daemon.md).
MAX_BODY_BYTES = 512 * 1024
#: The token file in the state directory, and the environment variable that overrides it.
TOKEN_FILE = "daemon.token"
TOKEN_ENV = "AGENTKEEP_DAEMON_TOKEN"
#: Shorter tokens are refused: they could be guessed.
MIN_TOKEN_CHARS = 16
#: The Prometheus metrics' path (outside ``/v1``), behind the token as well.
METRICS_PATH = "/metrics"
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


class DaemonConfigError(AgentkeepError):
    """The daemon cannot start as configured (an unsafe bind, an unusable token file)."""

    code = "daemon_config"


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _check_token(token: str, source: str) -> str:
    token = token.strip()
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() or not c.isprintable() for c in token):
        raise DaemonConfigError(
            f"The token from {source} must be at least {MIN_TOKEN_CHARS} printable characters "
            "without spaces."
        )
    return token


def load_token(
    home: Path, *, token_file: Path | None = None, env: dict[str, str] | None = None
) -> str:
    """The daemon's token: ``token_file`` if given, else ``$AGENTKEEP_DAEMON_TOKEN``, else
    ``<home>/daemon.token``, generated on first start (``secrets.token_urlsafe(32)``, mode
    0600, in a 0700 home).

    Raises:
        DaemonConfigError: the file cannot be read, is readable by others, or holds no
            usable token.
    """
    environ = os.environ if env is None else env
    if token_file is not None:
        return _check_token(_read_private(token_file), str(token_file))
    if environ.get(TOKEN_ENV):
        return _check_token(environ[TOKEN_ENV], f"${TOKEN_ENV}")
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    path = home / TOKEN_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _check_token(_read_private(path), str(path))
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(token + "\n")
    return token


def _read_private(path: Path) -> str:
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise DaemonConfigError(f"Cannot read the token file {path}: {error}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise DaemonConfigError(
            f"The token file {path} is accessible by other users (mode {stat.filemode(mode)}); "
            f"run `chmod 600 {path}`."
        )
    return text


@dataclass(frozen=True, kw_only=True)
class SecurityPolicy:
    """What the guard allows.

    Attributes:
        token: The token every ``/v1`` request must carry; None only with ``--no-auth``.
        allowed_hosts: ``Host`` values accepted (``name`` or ``name:port``, lowercase).
        allowed_origins: ``Origin`` values accepted (``scheme://host:port``).
        max_body_bytes: The largest request body.
    """

    token: str | None
    allowed_hosts: frozenset[str]
    allowed_origins: frozenset[str]
    max_body_bytes: int = MAX_BODY_BYTES
    _token_bytes: bytes = field(init=False, repr=False, default=b"")

    def __post_init__(self) -> None:
        object.__setattr__(self, "_token_bytes", (self.token or "").encode())

    @classmethod
    def for_bind(
        cls,
        host: str,
        port: int,
        *,
        token: str | None,
        extra_hosts: Iterable[str] = (),
        extra_origins: Iterable[str] = (),
    ) -> SecurityPolicy:
        """The policy for a server bound to ``host:port``: the loopback names and the bound
        address, with and without the port, plus the extra ones.

        Raises:
            DaemonConfigError: ``token`` is None and ``host`` is not a loopback address.
        """
        if token is None and not is_loopback(host):
            raise DaemonConfigError(
                f"Refusing to listen on {host} without a token: a non-loopback address is "
                "reachable by others. Drop --no-auth (a token is generated), or bind 127.0.0.1."
            )
        # Loopback names are always allowed: a rebinding attack arrives under its own name.
        names = {*_LOOPBACK_NAMES, host.lower()}
        hosts: set[str] = set()
        origins: set[str] = set()
        for name in names:
            shown = f"[{name}]" if ":" in name else name
            hosts |= {shown, f"{shown}:{port}"}
            origins |= {f"http://{shown}:{port}"}
        hosts |= {h.lower() for h in extra_hosts}
        origins |= {o.lower().rstrip("/") for o in extra_origins}
        return cls(token=token, allowed_hosts=frozenset(hosts), allowed_origins=frozenset(origins))

    def authorized(self, headers: dict[bytes, list[bytes]]) -> bool:
        """True if a token header carries the token (constant-time compare)."""
        if self.token is None:
            return True
        given: list[bytes] = list(headers.get(b"x-amalgm-runtime-token", []))
        for value in headers.get(b"authorization", []):
            scheme, _, credentials = value.strip().partition(b" ")
            if scheme.lower() == b"bearer":
                given.append(credentials.strip())
        # Every candidate is compared, so the time spent says nothing about which matched.
        matched = False
        for candidate in given:
            matched |= hmac.compare_digest(candidate, self._token_bytes)
        return matched


def _headers(scope: Scope) -> dict[bytes, list[bytes]]:
    found: dict[bytes, list[bytes]] = {}
    for name, value in scope["headers"]:
        found.setdefault(name.lower(), []).append(value)
    return found


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (
        media.startswith(b"application/") and media.endswith(b"+json")
    )


class Guard:
    """The ASGI middleware enforcing a :class:`SecurityPolicy` (see the module doc)."""

    def __init__(
        self, app: ASGIApp, policy: SecurityPolicy, console: ConsoleSessions | None = None
    ) -> None:
        self.app = app
        self.policy = policy
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse the request with the first rule it breaks, or pass it on."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            headers = {"WWW-Authenticate": "Bearer"} if refusal.status == 401 else None
            await error_response(refusal, headers)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> ApiError | None:
        headers = _headers(scope)
        hosts = headers.get(b"host", [])
        host = hosts[0].decode("latin-1").lower() if len(hosts) == 1 else ""
        if host not in self.policy.allowed_hosts:
            return ApiError(
                421, "misdirected_request", "The Host header names no host this server answers."
            )
        for origin in headers.get(b"origin", []):
            if origin.decode("latin-1").lower().rstrip("/") not in self.policy.allowed_origins:
                return ApiError(403, "forbidden_origin", "Requests from this Origin are refused.")
        path: str = scope["path"]
        if (path == "/v1" or path.startswith("/v1/")) and not self._authorized(scope, headers):
            return unauthorized()
        if path == METRICS_PATH and not self.policy.authorized(headers):
            return unauthorized()  # the Prometheus metrics: the token, like the API's
        if scope["method"] in ("POST", "PATCH", "PUT"):
            return self._body_refusal(headers)
        return None

    def _authorized(self, scope: Scope, headers: dict[bytes, list[bytes]]) -> bool:
        if self.policy.authorized(headers):
            return True
        return self.console is not None and self.console.cookie_allowed(scope["method"], headers)

    def _body_refusal(self, headers: dict[bytes, list[bytes]]) -> ApiError | None:
        lengths = headers.get(b"content-length", [])
        chunked = b"chunked" in b",".join(headers.get(b"transfer-encoding", [])).lower()
        try:
            length = int(lengths[0]) if lengths else None
        except ValueError:
            return ApiError(400, "bad_request", "Content-Length is not a number.")
        if length is not None and length > self.policy.max_body_bytes:
            return ApiError(
                413,
                "payload_too_large",
                f"The body is {length} bytes; the limit is {self.policy.max_body_bytes}.",
                {"limit": self.policy.max_body_bytes},
            )
        has_body = chunked or (length is not None and length > 0)
        types = headers.get(b"content-type", [])
        if has_body and not (len(types) == 1 and _is_json(types[0])):
            return ApiError(
                415, "unsupported_media_type", "Request bodies must be JSON (application/json)."
            )
        return None
