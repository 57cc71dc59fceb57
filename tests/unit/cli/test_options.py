"""The options the commands share (``agentkeep.cli.options``): every ``--timeout`` of the
command tree is the one :func:`~agentkeep.cli.options.timeout_option`."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest

from agentkeep.cli import cli


def _timeouts(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every command of the tree that takes ``--timeout``."""
    if any("--timeout" in getattr(p, "opts", ()) for p in command.params):
        yield path
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from _timeouts(sub, (*path, name))


TIMEOUT_COMMANDS = list(_timeouts(cli))


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


def test_the_walk_finds_the_commands_that_wait() -> None:
    found = {" ".join(path) for path in TIMEOUT_COMMANDS}
    assert {"session send", "talk", "session cancel", "session compact", "resume"} <= found


@pytest.mark.parametrize("path", TIMEOUT_COMMANDS, ids=" ".join)
@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_every_timeout_refuses_what_is_not_a_number_of_seconds(
    path: tuple[str, ...], value: str
) -> None:
    command = _command(path)
    (option,) = [p for p in command.params if "--timeout" in getattr(p, "opts", ())]
    context = click.Context(command)
    with pytest.raises(click.BadParameter, match="not a number of seconds"):
        option.process_value(context, value)
    assert option.process_value(context, "0") == 0.0
    assert option.name == "timeout_seconds"
    assert isinstance(option, click.Option)
    assert option.show_default
