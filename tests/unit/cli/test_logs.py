"""Logging is configured by the CLI only: JSON lines off a terminal, filtered by level."""

from __future__ import annotations

import io
import json

import pytest
import structlog

from agentkeep.cli.logs import configure_logging


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_each_log_line_is_json_at_or_above_the_level() -> None:
    stream = io.StringIO()
    configure_logging("info", stream=stream)
    log = structlog.get_logger("test")
    log.debug("hidden")
    log.info("shown", agent_id="a1")
    (line,) = stream.getvalue().splitlines()
    entry = json.loads(line)
    assert entry["event"] == "shown"
    assert entry["agent_id"] == "a1"
    assert entry["level"] == "info"
    assert "timestamp" in entry


def test_on_a_terminal_log_lines_are_readable() -> None:
    stream = _Terminal()
    configure_logging("warning", stream=stream)
    structlog.get_logger("test").warning("careful", pid=7)
    text = stream.getvalue()
    assert "careful" in text
    assert "pid=7" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_the_default_level_is_warning() -> None:
    stream = io.StringIO()
    configure_logging(stream=stream)
    structlog.get_logger("test").info("quiet")
    assert stream.getvalue() == ""


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("chatty")
