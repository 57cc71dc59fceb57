"""Agent creation config: the environment the agent works on, per-feature settings, metadata."""

from __future__ import annotations

import os
import platform
from typing import Any

import msgspec

from agentkeep.errors import InvalidConfigError
from agentkeep.types import AgentEnvironment


class AgentConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What an agent is created with.

    ``environment`` is all of it or none of it, so nothing the agent is told about its machine
    is ever half-true. ``features`` holds one opaque settings map per feature name (each
    feature validates its own). Only ``metadata`` may change after creation.
    """

    environment: AgentEnvironment | None = None
    features: dict[str, dict[str, Any]] = {}
    metadata: dict[str, Any] = {}

    def validated(self) -> AgentConfig:
        """A checked copy (raises :class:`InvalidConfigError` naming what is wrong)."""
        env = self.environment
        if env is not None:
            missing = [
                name
                for name in ("os_version", "platform", "working_directory", "shell")
                if not isinstance(getattr(env, name), str) or not getattr(env, name)
            ]
            if missing:
                raise InvalidConfigError(
                    f"environment must be complete or absent; missing: {', '.join(missing)}"
                )
        for name, settings in self.features.items():
            if not isinstance(settings, dict):
                raise InvalidConfigError(f"settings of feature {name!r} must be a JSON object")
        try:
            return msgspec.json.decode(msgspec.json.encode(self), type=AgentConfig)
        except (msgspec.ValidationError, TypeError) as error:
            raise InvalidConfigError(f"agent config is not JSON-serializable: {error}") from error


def current_environment() -> AgentEnvironment:
    """The complete environment of the running process, ready to hand to ``create``."""
    return AgentEnvironment(
        os_version=platform.platform(),
        platform=platform.system().lower() or "unknown",
        working_directory=os.getcwd(),
        shell=os.environ.get("SHELL", "/bin/sh"),
    )
