"""Options and checks shared by the commands."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

# How long a command waits for an answer, a turn or the agents by default.
DEFAULT_TIMEOUT_SECONDS = 120.0


def check_seconds(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """A ``--timeout`` callback: a finite number of seconds, zero or more (else exit 2).

    ``float`` alone lets ``-1`` (a wait that gives up at once and reports a timeout), ``nan``
    (every comparison false: a wait that never ends) and ``inf`` (an overflow deep inside
    ``threading``) through.
    """
    if not math.isfinite(value) or value < 0:
        raise click.BadParameter(
            f"{value:g} is not a number of seconds (it must be finite, 0 or more).",
            ctx=ctx,
            param=param,
        )
    return value


def timeout_option(
    help: str | None = None, *, default: float = DEFAULT_TIMEOUT_SECONDS
) -> Callable[[F], F]:
    """The ``--timeout SECONDS`` option, passed as ``timeout_seconds``: a finite number of
    seconds, zero or more (:func:`check_seconds`), its default shown in ``--help``."""
    return click.option(
        "--timeout",
        "timeout_seconds",
        type=float,
        callback=check_seconds,
        default=default,
        show_default=True,
        help=help,
    )
