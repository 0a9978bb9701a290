"""The tools a coordinator offers: the built-ins, then the configured plugins."""

from __future__ import annotations

from coordinator.config import Config
from coordinator.errors import ConfigError
from coordinator.tools.base import Tool
from coordinator.tools.builtin import builtin_tools
from coordinator.tools.plugins import load_plugins


def build_tools(config: Config) -> dict[str, Tool]:
    """Every tool by name.

    Raises:
        ConfigError: a plugin cannot be loaded, or two tools have one name.
    """
    return tools_by_name([*builtin_tools(), *load_plugins(config)])


def tools_by_name(tools: list[Tool]) -> dict[str, Tool]:
    """``tools`` by name. **Raises:** ``ConfigError`` when two of them share a name.

    A duplicate is refused rather than resolved: keeping either one would silently hide the other
    from the model.
    """
    by_name: dict[str, Tool] = {}
    for tool in tools:
        if tool.name in by_name:
            raise ConfigError(f"two tools are named {tool.name!r}", "tools")
        by_name[tool.name] = tool
    return by_name
