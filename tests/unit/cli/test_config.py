"""providers.toml: the local model by default, vendor adapters by class, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentkeep.cli.config import (
    LOCAL_MODEL,
    LOCAL_PROVIDER,
    ProviderEntry,
    build_provider,
    check_provider,
    load_agent_config,
    load_providers,
)
from agentkeep.cli.output import CliError
from agentkeep.providers import RespondingModel
from agentkeep.providers.demo import DEMO_MODEL, DEMO_PROVIDER, DemoModel


def test_with_no_file_the_demo_model_is_the_default(tmp_path: Path) -> None:
    config = load_providers(tmp_path)
    assert config.default_provider == DEMO_PROVIDER == "demo"
    assert config.default_model == DEMO_MODEL == "demo-1"
    assert isinstance(config.providers.resolve("demo", "demo-1"), DemoModel)
    # The deterministic test model stays registered, for tests and by name.
    assert isinstance(config.providers.resolve(LOCAL_PROVIDER, LOCAL_MODEL), RespondingModel)
    assert config.providers.kind_of("local") == "gym"
    assert config.providers.kind_of("demo") == "gym"
    assert config.offers_demo_tools(None)
    assert config.offers_demo_tools("local")


def test_a_file_registers_providers_by_kind_without_building_them(tmp_path: Path) -> None:
    (tmp_path / "providers.toml").write_text(
        """
[defaults]
provider = "claude"

[providers.claude]
kind = "claude"
class = "anthropic"
model = "anthropic/claude-sonnet-4-5"
api_key_env = "AGENTKEEP_TEST_UNSET_KEY"

[providers.gym2]
kind = "gym"
"""
    )
    config = load_providers(tmp_path)
    assert config.providers.kind_of("claude") == "claude"
    assert config.providers.kind_of("gym2") == "gym"
    assert config.default_provider == "claude"
    assert config.default_model == "anthropic/claude-sonnet-4-5"
    assert isinstance(config.providers.resolve("gym2", None), RespondingModel)
    with pytest.raises(CliError, match=r"\$AGENTKEEP_TEST_UNSET_KEY, which is unset") as caught:
        check_provider(config, "claude")
    assert caught.value.code == "missing_api_key"


def test_a_key_from_the_environment_reaches_the_adapter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTKEEP_TEST_KEY", "sk-test")
    entry = ProviderEntry(
        id="claude",
        kind="claude",
        class_name="anthropic",
        model="anthropic/claude-x",
        api_key_env="AGENTKEEP_TEST_KEY",
        base_url="http://127.0.0.1:9",
    )
    provider = build_provider(entry)
    assert type(provider).__name__ == "AnthropicProvider"
    assert "sk-test" not in repr(provider)


def test_a_missing_adapter_module_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentkeep.cli import config as config_module

    monkeypatch.setitem(
        config_module.PROVIDER_CLASSES, "openai", ("agentkeep.providers.not_here", "X", "openai")
    )
    entry = ProviderEntry(id="gpt", kind="codex", class_name="openai")
    with pytest.raises(CliError, match=r"not available") as caught:
        build_provider(entry)
    assert caught.value.code == "provider_unavailable"
    assert "pip install agentkeep[openai]" in (caught.value.hint or "")


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("[providers.x\n", "not a valid providers file"),
        ('[providers.x]\nkind = "nope"\n', "kind must be one of"),
        ('[providers.x]\nkind = "claude"\nclass = "magic"\n', "class must be one of"),
        ('[providers.x]\nkind = "codex"\nclass = "openai-compatible"\n', "needs base_url"),
        ('[providers.x]\nkind = "gym"\ncolour = "red"\n', "unknown keys: colour"),
        ('[providers.local]\nkind = "gym"\n', "built in"),
        ('[defaults]\nprovider = "ghost"\n', "is not registered"),
        ("surprise = 1\n", "unknown top-level keys"),
        ('[providers.x]\nkind = "gym"\nlatency_seconds = -1\n', "within 0..60"),
        ('[providers.x]\nkind = "gym"\nlatency_seconds = nan\n', "number of seconds"),
        ('[providers.x]\nkind = "gym"\nmax_retries = 2\n', "for vendor classes only"),
        ('[providers.x]\nkind = "claude"\nclass = "anthropic"\nmax_retries = 1.5\n', "whole"),
        ('[providers.x]\nkind = "claude"\nclass = "anthropic"\nmax_retries = 101\n', "0..100"),
        ('[providers.x]\nkind = "claude"\nclass = "anthropic"\nlatency_seconds = 1\n', "local"),
        ('[providers.x]\nkind = "gym"\ndemo_tools = "yes"\n', "true or false"),
        ('[defaults]\nmodle = "x"\n', "unknown keys: modle"),
    ],
)
def test_a_malformed_file_names_the_problem(tmp_path: Path, content: str, words: str) -> None:
    (tmp_path / "providers.toml").write_text(content)
    with pytest.raises(CliError, match=words) as caught:
        load_providers(tmp_path)
    assert caught.value.exit_code == 2
    assert "providers.toml" in caught.value.message


def test_flags_are_merged_over_a_config_file(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text('{"features": {"memo": {"on": true}}, "metadata": {"title": "t", "k": 1}}')
    config = load_agent_config(path, title="new", metadata={"team": "x"})
    assert config.metadata == {"title": "new", "k": 1, "team": "x"}
    assert config.features == {"memo": {"on": True}}


def test_a_provider_table_configures_latency_retries_and_demo_tools(tmp_path: Path) -> None:
    (tmp_path / "providers.toml").write_text(
        """
[providers.slow]
kind = "gym"
class = "demo"
latency_seconds = 0.25

[providers.claude]
kind = "claude"
class = "anthropic"
model = "anthropic/claude-x"
base_url = "http://127.0.0.1:9"
max_retries = 3
demo_tools = true

[providers.plain]
kind = "claude"
class = "anthropic"
base_url = "http://127.0.0.1:9"
"""
    )
    config = load_providers(tmp_path)
    slow = build_provider(config.entries["slow"])
    assert isinstance(slow, DemoModel)
    assert slow.latency_seconds == 0.25
    assert config.model_for("slow") == DEMO_MODEL  # a local class's own model
    assert config.model_for("claude") == "anthropic/claude-x"
    assert config.model_for("plain") is None
    assert config.model_for("local") == LOCAL_MODEL
    assert config.offers_demo_tools("slow")
    assert config.offers_demo_tools("claude")  # asked for them
    assert not config.offers_demo_tools("plain")  # a vendor gets them only when asked
