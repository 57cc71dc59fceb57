"""The vendor SDKs are optional extras: agentkeep imports without them and names the extra."""

from __future__ import annotations

import json
import subprocess
import sys

BLOCKED_IMPORT = """
import json, sys
sys.modules["anthropic"] = None  # an import of a None entry raises ImportError
sys.modules["openai"] = None
import agentkeep
import agentkeep.providers
from agentkeep.errors import MissingExtraError
from agentkeep.providers.anthropic import AnthropicProvider
from agentkeep.providers.openai_chat import OpenAICompatibleProvider
from agentkeep.providers.openai_responses import OpenAIProvider

found = {}
for name, make in [
    ("anthropic", lambda: AnthropicProvider(api_key="k")),
    ("responses", lambda: OpenAIProvider(api_key="k")),
    ("chat", lambda: OpenAICompatibleProvider(base_url="http://127.0.0.1:9/v1", model="m")),
]:
    try:
        make()
    except MissingExtraError as error:
        found[name] = [error.package, error.extra, error.code, str(error)]
print(json.dumps(found))
"""


def test_agentkeep_imports_without_the_sdks_and_asking_for_one_names_its_extra():
    result = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORT],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["anthropic"][:3] == ["anthropic", "anthropic", "missing_extra"]
    assert "pip install agentkeep[anthropic]" in found["anthropic"][3]
    assert found["responses"][:2] == ["openai", "openai"]
    assert found["chat"][:2] == ["openai", "openai"]
