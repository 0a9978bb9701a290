"""The tools a coordinator offers: the built-ins, then the configured plugins."""

from __future__ import annotations

from coordinator.config import Config
from coordinator.tools.base import Tool
from coordinator.tools.execute import execute_tool
from coordinator.tools.plugins import load_plugins
from coordinator.tools.question import question_tool
from coordinator.tools.shell import shell_tool
from coordinator.tools.task import task_tool


def build_tools(config: Config) -> dict[str, Tool]:
    """Every tool by name. **Raises:** ``ConfigError`` for a plugin that cannot be loaded."""
    tools = [shell_tool(), question_tool(), execute_tool(), task_tool(), *load_plugins(config)]
    return {tool.name: tool for tool in tools}
