"""The agent config of ``agent create`` / ``create``: a ``--config FILE.json`` merged with the
flags, validated as an :class:`~agentkeep.config.AgentConfig`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from agentkeep.cli.output import EXIT_BAD_INPUT, CliError
from agentkeep.config import AgentConfig
from agentkeep.errors import AgentkeepError


def load_agent_config(
    path: Path | None, *, title: str | None, metadata: dict[str, Any]
) -> AgentConfig:
    """An agent config from ``--config FILE.json`` and flags (flags win for metadata).

    Raises:
        CliError: The file is missing, not JSON, or not an agent config.
    """
    base: dict[str, Any] = {}
    if path is not None:
        try:
            base = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as error:
            raise CliError(
                f"Config file {path} does not exist.",
                code="config_file_missing",
                hint="Pass the path of a JSON agent config.",
                exit_code=EXIT_BAD_INPUT,
            ) from error
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise CliError(
                f"Config file {path} is not valid JSON: {error}",
                code="invalid_config_file",
                hint='Fix the file; it looks like {"metadata": {"title": "..."}}.',
                exit_code=EXIT_BAD_INPUT,
            ) from error
        if not isinstance(base, dict):
            raise CliError(
                f"Config file {path} must hold a JSON object, not {type(base).__name__}.",
                code="invalid_config_file",
                hint='It looks like {"environment": {...}, "features": {}, "metadata": {}}.',
                exit_code=EXIT_BAD_INPUT,
            )
    unknown = sorted(set(base) - {"environment", "features", "metadata"})
    if unknown:
        raise CliError(
            f"Config file {path} has unknown keys: {', '.join(unknown)}.",
            code="invalid_config_file",
            hint="Allowed keys: environment (complete or absent), features, metadata.",
            exit_code=EXIT_BAD_INPUT,
        )
    source = f"Config file {path}" if path is not None else "The agent config"
    if not isinstance(base.get("metadata") or {}, dict):
        raise CliError(
            f"{source} is not a valid agent config: metadata must be a JSON object.",
            code="invalid_config",
            hint='Write metadata as {"title": "..."}.',
            exit_code=EXIT_BAD_INPUT,
        )
    merged_metadata = dict(base.get("metadata") or {})
    merged_metadata.update(metadata)
    if title is not None:
        merged_metadata["title"] = title
    base = {**base, "metadata": merged_metadata}
    try:
        config = msgspec.convert(base, type=AgentConfig)
        return config.validated()
    except (msgspec.ValidationError, AgentkeepError) as error:
        raise CliError(
            f"{source} is not a valid agent config: {error}",
            code="invalid_config",
            hint="Allowed keys: environment (complete or absent), features, metadata.",
            exit_code=EXIT_BAD_INPUT,
        ) from error
