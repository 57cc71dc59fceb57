"""Closing a vendor's HTTP stream from the thread that cancels.

The reading thread is blocked in a socket ``recv`` inside the SDK. Closing a socket from
another thread does not wake that ``recv`` on Linux, but ``shutdown`` does: the read returns
end-of-file at once, the SDK raises (or ends the stream), and the reading thread, seeing the
token cancelled, closes the response itself and reports ``Done(cancelled)``. So the only
cross-thread action is ``socket.shutdown``; every other close happens on the reading thread.

Before the response headers arrive there is no response (and no socket) to shut down yet, so
the request is sent from a short-lived opener thread while the reading thread waits on an
event that a cancel also sets: a cancel returns at once, and the opener closes the response
itself as soon as the SDK hands it over (see ``_attempt``).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from agentkeep.providers.protocol import CancelToken


class HttpResponse(Protocol):
    """The part of an ``httpx`` response this module needs (typed without importing httpx)."""

    @property
    def extensions(self) -> Mapping[str, Any]: ...


def _socket_of(response: HttpResponse) -> socket.socket | None:
    stream = response.extensions.get("network_stream")
    get_extra_info = getattr(stream, "get_extra_info", None)
    if get_extra_info is None:
        return None
    sock = get_extra_info("socket")
    return sock if isinstance(sock, socket.socket) else None


class ResponseSlot:
    """The response currently being read for one request; shut down when cancelled.

    Registered once per request with :meth:`CancelToken.on_cancel`. Invariant: after
    :meth:`abort` no response is attached again (``attach`` returns False), so a cancel that
    lands between two attempts, or before the headers arrive, is never lost.
    """

    def __init__(self, cancel: CancelToken) -> None:
        self._lock = threading.Lock()
        self._response: HttpResponse | None = None
        self._wake: threading.Event | None = None
        self._aborted = False
        cancel.on_cancel(self.abort)

    def watch(self, wake: threading.Event) -> bool:
        """Set ``wake`` on cancel (a wait for headers); False if already cancelled."""
        with self._lock:
            if self._aborted:
                return False
            self._wake = wake
            return True

    def attach(self, response: HttpResponse) -> bool:
        """Make ``response`` the one to shut down on cancel; False if already cancelled."""
        with self._lock:
            if self._aborted:
                return False
            self._response = response
            return True

    def detach(self) -> None:
        """The response is finished (read to the end or closed): nothing to shut down."""
        with self._lock:
            self._response = None

    def abort(self) -> None:
        """Shut down the attached response's socket so a blocked read returns now."""
        with self._lock:
            self._aborted = True
            response, self._response = self._response, None
            wake, self._wake = self._wake, None
        if wake is not None:
            wake.set()
        if response is None:
            return
        sock = _socket_of(response)
        if sock is None:
            return
        # Already closed by the reading thread (OSError): nothing is left to wake.
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
