"""Checks shared by the commands' options."""

from __future__ import annotations

import math

import click


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
