"""Example harnesses for the process driver (standard library only, run by path or with
``python -m``): :mod:`~agentkeep.drivers.harnesses.echo`."""
