"""The tool registry: every tool by its name, and never two tools under one name."""

from __future__ import annotations

import pytest

from coordinator.config import Config
from coordinator.errors import ConfigError
from coordinator.tools.builtin import builtin_tools
from coordinator.tools.registry import build_tools, tools_by_name


def test_build_tools_offers_every_builtin_by_name() -> None:
    """Without plugins, the model is offered exactly the built-in tools."""
    assert list(build_tools(Config())) == ["shell", "question", "execute", "task"]


@pytest.mark.parametrize("name", ["task", "shell", "execute", "question"])
def test_a_duplicate_name_is_refused_not_replaced(name: str) -> None:
    """Keeping the last tool of a name would silently hide the first from the model."""
    tools = builtin_tools()
    duplicate = next(tool for tool in builtin_tools() if tool.name == name)
    with pytest.raises(ConfigError) as caught:
        tools_by_name([*tools, duplicate])
    assert caught.value.message == f"two tools are named {name!r}"
