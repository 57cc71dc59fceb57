"""What the CLI prints: JSON (``--json``) or readable text on stdout, errors on stderr.

Every command builds one JSON-ready value (stable field names) and, for people, a text
rendering of it. Errors are :class:`CliError` values with a stable ``code``, a message that
says what happened and a hint that says what to do; :func:`fail` prints one and exits with
its exit code.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TextIO

import apsw
import click
import msgspec

from agentkeep.errors import (
    AgentExistsError,
    AgentkeepError,
    InvalidConfigError,
    InvalidIdError,
    InvalidMessageError,
    MissingExtraError,
    ProviderError,
    SchemaTooNewError,
    SchemaTooOldError,
    StoreDamagedError,
    StoreDirectoryError,
    StoreLockedError,
    UnknownAgentError,
    UnknownProviderError,
)
from agentkeep.types import (
    AgentMessage,
    AssistantMessage,
    CompactionMessage,
    DataBlock,
    ImageBlock,
    Message,
    ReasoningBlock,
    ReferenceBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolCallRequestBlock,
    ToolResultMessage,
    UserMessage,
)
from agentkeep.types.content import data_text, reference_text

# Exit codes (stable): documented in ``agentkeep --help``.
EXIT_OK = 0
EXIT_FAILURE = 1  # the command ran and failed (or `db check` found a problem)
EXIT_BAD_INPUT = 2  # bad flags, malformed config, empty message (also click's usage errors)
EXIT_STORE_LOCKED = 3  # another process owns the state directory
EXIT_NOT_FOUND = 4  # no such agent, or no store at --home


class CliError(Exception):
    """An error the CLI reports to the user: stable code, message, hint and exit code."""

    def __init__(
        self, message: str, *, code: str, hint: str | None = None, exit_code: int = EXIT_FAILURE
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.hint = hint
        self.exit_code = exit_code

    def to_json(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "hint": self.hint}}


def command_prefix() -> str:
    """How to run ``agentkeep`` the way this process was started, for commands we print.

    ``make demo`` runs ``.venv/bin/agentkeep``, which is not on ``PATH``: a printed command
    must name that script (or ``python -m agentkeep.cli``) to run as printed.
    """
    argv0 = sys.argv[0] if sys.argv else ""
    name = Path(argv0).name
    if name == "agentkeep":
        found = shutil.which("agentkeep")
        if found is not None and Path(found).resolve() == Path(argv0).resolve():
            return "agentkeep"
        return shlex.quote(argv0)
    if name == "__main__.py" and Path(argv0).parent.name == "cli":
        return f"{shlex.quote(sys.executable)} -m agentkeep.cli"
    return "agentkeep"


def command_line(home: str | Path | None, *args: str) -> str:
    """A copy-pasteable ``agentkeep [--home HOME] ARGS...`` (quoted for a POSIX shell)."""
    words = [command_prefix()]
    if home is not None:
        words += ["--home", shlex.quote(str(home))]
    words += [shlex.quote(arg) for arg in args]
    return " ".join(words)


def from_library_error(error: AgentkeepError, *, home: str | None = None) -> CliError:
    """The CLI error (with a hint naming its real cause, and an exit code) for a library error."""
    if isinstance(error, StoreLockedError):
        holder = f"process {error.holder_pid}" if error.holder_pid is not None else "another owner"
        return CliError(
            f"The state directory is in use by {holder} ({error.path}).",
            code=error.code,
            hint=f"Stop {holder} or wait for it to exit, then run the command again.",
            exit_code=EXIT_STORE_LOCKED,
        )
    if isinstance(error, UnknownAgentError):
        return CliError(
            str(error),
            code=error.code,
            hint=f"List the sessions with `{command_line(home, 'session', 'list')}`.",
            exit_code=EXIT_NOT_FOUND,
        )
    if isinstance(error, AgentExistsError):
        return CliError(
            str(error), code=error.code, hint="Choose another --id.", exit_code=EXIT_BAD_INPUT
        )
    if isinstance(error, UnknownProviderError):
        where = f"{home}/providers.toml" if home else "providers.toml in the state directory"
        return CliError(
            str(error),
            code=error.code,
            hint=f"Pass one of the providers named above, or register this one in {where}.",
            exit_code=EXIT_BAD_INPUT,
        )
    if isinstance(error, InvalidIdError):
        return CliError(
            str(error),
            code=error.code,
            hint="Choose an id of 1-128 lowercase letters, digits, dots, underscores or "
            "hyphens (a lowercase UUID fits; `agentkeep COMMAND --help`); nothing was written.",
            exit_code=EXIT_BAD_INPUT,
        )
    if isinstance(error, InvalidMessageError):
        return CliError(
            str(error),
            code=error.code,
            hint="Fix the message as described above; nothing was queued.",
            exit_code=EXIT_BAD_INPUT,
        )
    if isinstance(error, InvalidConfigError):
        return CliError(
            str(error),
            code=error.code,
            hint="Fix the value named above (`agentkeep COMMAND --help` lists the options).",
            exit_code=EXIT_BAD_INPUT,
        )
    if isinstance(error, MissingExtraError):
        return CliError(str(error), code=error.code, hint=f"pip install 'agentkeep[{error.extra}]'")
    if isinstance(error, ProviderError):
        where = f"{home}/providers.toml" if home else "providers.toml in the state directory"
        return CliError(str(error), code=error.code, hint=f"Check the provider's table in {where}.")
    if isinstance(error, StoreDamagedError):
        return damaged(error.path, str(error), home=home)
    if isinstance(error, StoreDirectoryError):
        return CliError(
            str(error),
            code=error.code,
            hint="Use a directory this user can write (--home DIR or AGENTKEEP_HOME), "
            "or fix its owner and permissions.",
        )
    if isinstance(error, SchemaTooNewError):
        return CliError(str(error), code=error.code, hint="Upgrade agentkeep.")
    if isinstance(error, SchemaTooOldError):
        return CliError(
            str(error),
            code=error.code,
            hint=f"Run `{command_line(home, 'resume')}` once to migrate it.",
        )
    if error.code == "unauthorized":  # the daemon refused this client's token
        return CliError(
            str(error),
            code=error.code,
            hint="The daemon was started with another token (--token-file): set "
            "AGENTKEEP_DAEMON_TOKEN to it.",
        )
    return CliError(
        str(error) or type(error).__name__, code=error.code, exit_code=exit_code_of(error.code)
    )


# The exit code of a library error no branch above names, by its stable code (the same
# codes the daemon sends, so a command exits alike directly and through the daemon).
_NOT_FOUND_CODES = frozenset(
    {
        "unknown_definition",
        "definition_deleted",
        "unknown_revision",
        "unknown_session",
        "unknown_turn",
        "not_found",
    }
)
_BAD_INPUT_CODES = frozenset(
    {
        "invalid_definition",
        "definition_exists",
        "invalid_session_config",
        "unsupported_driver",
        "idempotency_conflict",
        "event_too_large",
        "input_too_large",
        "payload_too_large",  # the daemon's 413: a body over its limit
        "model_not_served",
        "invalid_request",
        "invalid_query",
    }
)


def exit_code_of(code: str) -> int:
    """4 for a record that does not exist, 2 for input refused, else 1."""
    if code in _NOT_FOUND_CODES:
        return EXIT_NOT_FOUND
    if code in _BAD_INPUT_CODES:
        return EXIT_BAD_INPUT
    return EXIT_FAILURE


def damaged(path: str, message: str, *, home: str | None) -> CliError:
    """A damaged database: what SQLite said, and how to see the whole diagnosis."""
    return CliError(
        message,
        code="store_damaged",
        hint=f"Run `{command_line(home, 'db', 'check')}` to see what SQLite finds; restore "
        f"{path} from a backup (nothing more was written into it).",
    )


def database_error(error: apsw.Error, *, home: str | None) -> CliError:
    """An error SQLite raised outside the library's own checks."""
    path = str(Path(home) / "agents.db") if home else "agents.db"
    if isinstance(error, apsw.CorruptError | apsw.NotADBError):
        return damaged(path, f"The database {path} is damaged: {error}.", home=home)
    return CliError(
        f"The database {path} could not be used: {error}",
        code="database_unreadable",
        hint="Check the disk (free space, I/O errors) and the file's permissions.",
    )


def home_is_a_file(source: str, path: Path) -> CliError:
    """``--home`` / ``AGENTKEEP_HOME`` names a file."""
    return CliError(
        f"{source} names a file, not a directory: {path}.",
        code="home_is_a_file",
        hint=f"Point {source} at a directory (agentkeep creates it if it is missing).",
        exit_code=EXIT_BAD_INPUT,
    )


def not_utf8(position: int, arg: str) -> CliError:
    """A command-line argument that is not valid UTF-8 (Python kept its bytes as surrogates)."""
    shown = os.fsencode(arg).decode("utf-8", "backslashreplace")
    return CliError(
        f"Argument {position} is not valid UTF-8 text: {shown}.",
        code="not_utf8",
        hint="Pass text in UTF-8 (check the terminal's encoding and LANG, e.g. LANG=C.UTF-8).",
        exit_code=EXIT_BAD_INPUT,
    )


def no_store_hint(home: str | None, hint: str | None) -> str | None:
    """Name the demo's store when there is none in ``home`` but the demo made one below it."""
    if home is None:
        return hint
    stores = sorted(Path(home).glob("demo-*/agents.db"), key=lambda p: p.stat().st_mtime)
    if not stores:
        return hint
    latest = stores[-1].parent
    return f"The demo's store is in {latest}: run `{command_line(latest, 'session', 'list')}`."


def fail(error: CliError, *, json_mode: bool) -> NoReturn:
    """Print ``error`` on stderr (as JSON with ``--json``) and exit with its exit code."""
    if json_mode:
        click.echo(msgspec.json.encode(error.to_json()).decode(), err=True)
    else:
        click.echo(f"error: {error.message}", err=True)
        if error.hint:
            click.echo(f"hint: {error.hint}", err=True)
    sys.exit(error.exit_code)


@dataclass(frozen=True)
class Output:
    """Where a command's result goes, and in which form."""

    json_mode: bool

    def result(self, value: Any, render: Callable[[Any], str] | None = None) -> None:
        """Print ``value`` as one JSON document, or ``render(value)`` for people."""
        if self.json_mode or render is None:
            click.echo(msgspec.json.encode(value).decode())
        else:
            text = render(value)
            if text:
                click.echo(text)

    def event(self, value: dict[str, Any]) -> None:
        """One JSON line of a stream (``talk --json``)."""
        click.echo(msgspec.json.encode(value).decode())


class Console:
    """A lock-guarded writer: streamed text and tool lines come from different threads."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self.at_line_start = True

    def write(self, text: str) -> None:
        if not text:
            return
        with self._lock:
            stream = self._stream or sys.stdout
            stream.write(text)
            stream.flush()
            self.at_line_start = text.endswith("\n")

    def start_line(self, text: str) -> None:
        """Write ``text`` at the start of a line (ending a partial line first), no newline."""
        with self._lock:
            stream = self._stream or sys.stdout
            prefix = "" if self.at_line_start else "\n"
            stream.write(f"{prefix}{text}")
            stream.flush()
            self.at_line_start = False

    def line(self, text: str) -> None:
        """Write ``text`` on a line of its own (ending a partial line first)."""
        with self._lock:
            stream = self._stream or sys.stdout
            prefix = "" if self.at_line_start else "\n"
            stream.write(f"{prefix}{text}\n")
            stream.flush()
            self.at_line_start = True


# -- messages -------------------------------------------------------------------------------


def block_text(blocks: tuple[Any, ...]) -> str:
    """The readable text of content blocks (images as a placeholder)."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ImageBlock):
            parts.append(f"[image {block.mime_type}]")
        elif isinstance(block, ToolCallRequestBlock):
            arguments = json.dumps(block.arguments, sort_keys=True)
            parts.append(f"[tool request {block.name} {arguments}]")
        elif isinstance(block, ReferenceBlock):
            parts.append(reference_text(block))
        elif isinstance(block, DataBlock):
            parts.append(data_text(block))
    return "".join(parts)


def answer_text(messages: list[Message]) -> str | None:
    """The text of the last assistant message, if the conversation ends with one."""
    if messages and isinstance(messages[-1], AssistantMessage):
        text = block_text(tuple(b for b in messages[-1].content if isinstance(b, TextBlock)))
        return text or None
    return None


def render_message(message: Message) -> list[str]:
    """One message as readable lines."""
    if isinstance(message, UserMessage):
        return [f"user: {block_text(message.content)}"]
    if isinstance(message, SystemMessage):
        return [f"system: {block_text(message.content)}"]
    if isinstance(message, AgentMessage):
        return [f"agent {message.author.id}: {block_text(message.content)}"]
    if isinstance(message, ToolResultMessage):
        flag = " (error)" if message.is_error else ""
        return [f"  ↳ result [{message.call_id}]{flag}: {block_text(message.content)}"]
    if isinstance(message, CompactionMessage):
        return [f"compaction: {message.content or '(encrypted summary)'}"]
    lines: list[str] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            lines.append(f"assistant: {block.text}")
        elif isinstance(block, ToolCallBlock):
            lines.append(f"  → {block.name}({block.arguments}) [{block.call_id}]")
        elif isinstance(block, ReasoningBlock):
            lines.append(f"  (reasoning{': ' + block.text if block.text else ''})")
    return lines


def render_transcript(messages: list[Message]) -> str:
    return "\n".join(line for message in messages for line in render_message(message))


def to_builtins(value: Any) -> Any:
    """A msgspec value (or a container of them) as JSON-ready builtins."""
    return msgspec.to_builtins(value)


def all_fields(value: msgspec.Struct) -> dict[str, Any]:
    """Every field of a struct, defaults included, so JSON output has stable keys."""
    return {name: msgspec.to_builtins(getattr(value, name)) for name in value.__struct_fields__}
