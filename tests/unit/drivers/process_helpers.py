"""Helpers for the process driver's tests: the shipped echo harness, and what /proc says
about a process or a process group (a zombie counts as gone: it runs nothing)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from agentkeep.drivers.harnesses import echo

ECHO = str(Path(echo.__file__).resolve())
PYTHON = sys.executable

linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    return text[text.rindex(")") + 2 :].split()


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def group_of(pid: int) -> int:
    """The process group of the live process ``pid``."""
    fields = _stat(pid)
    assert fields is not None, f"process {pid} is gone"
    return int(fields[2])


def group_members(pgid: int) -> list[int]:
    """The live processes of group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                members.append(int(entry.name))
    return members


def wait_until(predicate: object, timeout: float = 15.0, what: str = "a condition") -> None:
    """Poll ``predicate()`` until true, at most ``timeout`` seconds (a bounded deadline for
    something another process does; nothing is ordered by it)."""
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def echo_definition(
    name: str = "echo", *, driver: str = "process", **config: object
) -> dict[str, object]:
    """A definition whose sessions run the echo harness through the process driver."""
    return {
        "id": name,
        "driver": {"id": driver, "config": {"command": [PYTHON, ECHO], **config}},
    }


def text_of(message: dict[str, object]) -> str:
    """The text of a message in either shape (``parts`` or ``content``)."""
    blocks = message.get("parts", message.get("content", []))
    assert isinstance(blocks, list)
    return "".join(b["text"] for b in blocks if b.get("type") == "text")
