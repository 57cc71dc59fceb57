"""Server-sent events as a client reads them: the lines of a ``text/event-stream`` response,
the frames they dispatch, and a bound on how long a stream may only send heartbeats.

This is the one SSE parser of the clients: ``session events --follow``
(:meth:`~agentkeep.client.http.HttpBackend.follow`, through :func:`sse_lines` and
:func:`parse_sse`, its idle time bounded by an :class:`IdleBound`) and ``agentkeep demo --daemon``
(:func:`response_frames`) both read their streams with it. It keeps the rules of the
``text/event-stream`` format we rely on:

- a line ends at CRLF, CR or LF only (a JSON string may hold U+2028 or U+0085 raw, where
  ``str.splitlines`` would cut it);
- a frame is dispatched at the blank line that ends it, never before: a frame cut short by the
  connection closing is dropped, so a client resumes from the last *complete* frame's id;
- comment lines (``: ping``, the daemon's heartbeats) and fields other than ``id`` and
  ``data`` are ignored.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import httpx

# The three line ends of text/event-stream; CRLF first, so it is one end and not two.
_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, kw_only=True)
class SseFrame:
    """One dispatched SSE event: its ``id:`` (None if the frame had none) and its data."""

    id: str | None
    data: str


def sse_lines(chunks: Iterable[str]) -> Iterator[str]:
    """The complete lines of a stream's text, arriving in chunks cut anywhere.

    A line is yielded once its line end arrived; the unterminated rest at the end of the
    stream is dropped (it cannot end a frame, so no frame is lost with it). A chunk ending
    in CR yields its line at once, and an LF opening the next chunk is the second half of
    that CRLF, not an empty line.
    """
    pending = ""
    after_cr = False
    for chunk in chunks:
        if not chunk:
            continue
        if after_cr and chunk.startswith("\n"):
            chunk = chunk[1:]
        after_cr = chunk.endswith("\r")
        *lines, pending = _LINE_END.split(pending + chunk)
        yield from lines


def parse_sse(lines: Iterable[str]) -> Iterator[SseFrame]:
    """SSE frames from the stream's lines (without their line ends).

    A frame is dispatched only at the blank line that ends it, so a frame cut short by a dead
    server (an ``id:`` without its data, or data without its blank line) is never yielded.
    Comment lines (``: ping``) and frames without a ``data:`` line are skipped; each frame
    has its own id (None when it carries no ``id:`` line: the last id is not inherited).
    """
    frame_id: str | None = None
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield SseFrame(id=frame_id, data="\n".join(data))
            frame_id, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "id":
            frame_id = value
        elif field == "data":
            data.append(value)


def response_frames(response: httpx.Response) -> Iterator[SseFrame]:
    """The SSE frames of a streamed ``httpx`` response, as they arrive."""
    return parse_sse(sse_lines(response.iter_text()))


class IdlePassedError(Exception):
    """Raised through the SSE parser when only heartbeats came for the idle bound."""


class IdleBound:
    """The idle bound of one stream connection (``seconds`` None: no bound), as
    :meth:`~agentkeep.client.http.HttpBackend.follow` uses it."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.passed = False
        self._since = time.monotonic()

    def reset(self) -> None:
        self._since = time.monotonic()

    def watch(self, lines: Iterator[str]) -> Iterator[str]:
        """``lines``, ending the connection (:class:`IdlePassedError`) once the bound passed
        since the last event: a heartbeat every few seconds must not hide a quiet turn."""
        for line in lines:
            if self.seconds is not None and time.monotonic() - self._since >= self.seconds:
                self.passed = True
                raise IdlePassedError
            yield line
