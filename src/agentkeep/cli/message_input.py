"""Where a message comes from: TEXT, ``-`` (stdin) or ``--file PATH``.

argv stops near 128 KB (one argument), so a long message is piped or read from a file; both
are read as UTF-8, and the newline(s) an editor or ``echo`` leaves at the end are dropped,
like the shell's ``$(...)`` does. A message is at most ``max_input_bytes`` (its stored JSON,
512 KiB: the wire's ``maxInputBytes``). Every refusal is exit 2 before anything is queued.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
import msgspec

from agentkeep.cli.output import EXIT_BAD_INPUT, CliError
from agentkeep.mcp.types import AgentMessage
from agentkeep.messages import user, wire_input
from agentkeep.persistence.ledger import check_input_size

_MESSAGE_FORMS = "TEXT, - (read stdin) or --file PATH"


def _bad_input(message: str, hint: str, code: str = "invalid_message_input") -> CliError:
    return CliError(message, code=code, hint=hint, exit_code=EXIT_BAD_INPUT)


def _decoded(data: bytes, source: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _bad_input(
            f"The message from {source} is not UTF-8 text ({error.reason} at byte {error.start}).",
            "Convert it to UTF-8, e.g. with iconv.",
        ) from error
    # Like the shell's $(...): the newline(s) an editor or `echo` adds are not part of it.
    return text.rstrip("\r\n")


def read_message(text: str | None, file_path: Path | None) -> str:
    """The message text from TEXT, ``-`` (stdin) or ``--file PATH``, checked non-empty.

    Raises:
        CliError: Both or neither were given, the file cannot be read, it is not UTF-8, or
            the message is empty (exit 2, nothing queued).
    """
    if text is not None and file_path is not None:
        raise _bad_input(
            f"Pass the message once: {_MESSAGE_FORMS}, not both.",
            "Drop TEXT or --file.",
        )
    if file_path is not None:
        try:
            content = _decoded(file_path.read_bytes(), str(file_path))
        except OSError as error:
            raise _bad_input(
                f"Cannot read the message file {file_path}: {error.strerror or error}.",
                "Pass the path of a readable text file.",
            ) from error
    elif text == "-":
        content = _decoded(sys.stdin.buffer.read(), "stdin")
    elif text is None:
        raise _bad_input(
            f"No message: pass {_MESSAGE_FORMS}.",
            'e.g. agentkeep session send ID "What is 2+2?", or: cat question.txt | '
            "agentkeep session send ID -",
        )
    else:
        content = text
    if not content.strip():
        raise CliError(
            "The message is empty.",
            code="empty_message",
            hint='Pass the text to send, e.g. agentkeep session send ID "What is 2+2?".',
            exit_code=EXIT_BAD_INPUT,
        )
    check_size(content)
    return content


def check_size(content: str) -> None:
    """Refuse a message over ``max_input_bytes`` before anything is sent or started, as the
    library would once it is sent (the same size of the same stored JSON, the same error),
    so the command fails alike directly and through a daemon, whose body limit would
    otherwise refuse it first in other words (a 413).

    Raises:
        InputTooLargeError: exit 2; nothing was written (``talk`` starts no session).
    """
    check_input_size(wire_input(user(content)))


def structured_message(content: str) -> AgentMessage:
    """``content`` (the message read as for :func:`read_message`) as the wire's
    ``AgentMessage`` JSON, ``{"role": "user" | "system", "parts": [...]}`` (``--message-json``):
    its reference and data parts are kept verbatim.

    Raises:
        CliError: it is not such JSON (exit 2, naming what is wrong; nothing is queued).
    """
    try:
        return msgspec.json.decode(content, type=AgentMessage)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise _bad_input(
            f"--message-json: the message is not seed 002's AgentMessage JSON ({error}).",
            'e.g. {"role": "user", "parts": [{"type": "text", "text": "Review"}, '
            '{"type": "reference", "uri": "file:///a.py", "name": "a.py"}]}',
        ) from None


#: ``--message-json`` on the commands that send a turn (``session send``, ``talk``).
message_json_option = click.option(
    "--message-json",
    "message_json",
    is_flag=True,
    help=(
        "The message is seed 002's AgentMessage JSON ({role, parts}: text, reference and "
        "data parts, kept verbatim) instead of text."
    ),
)


def message_of(content: str, message_json: bool) -> str | AgentMessage:
    """The message to send: the text, or with ``--message-json`` the structured message."""
    return structured_message(content) if message_json else content
