"""The built-in tools: the one list of them, from which the names a plugin may not take are read."""

from __future__ import annotations

from collections.abc import Callable

from coordinator.tools.base import Tool
from coordinator.tools.execute import execute_tool
from coordinator.tools.question import question_tool
from coordinator.tools.shell import shell_tool
from coordinator.tools.task import task_tool

# Every built-in tool's factory, in the order a model is offered them.
BUILTIN_TOOLS: tuple[Callable[[], Tool], ...] = (shell_tool, question_tool, execute_tool, task_tool)


def builtin_tools() -> list[Tool]:
    """A fresh instance of every built-in tool, in ``BUILTIN_TOOLS`` order."""
    return [make() for make in BUILTIN_TOOLS]


# A plugin may not take these names: it would shadow a built-in tool.
BUILTIN_TOOL_NAMES = frozenset(tool.name for tool in builtin_tools())
