"""Plugin tools: a user's async function becomes a tool with a checked input."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from coordinator.config import Config, PluginConfig
from coordinator.errors import ConfigError, ToolFailure
from coordinator.tools.base import Tool, ToolContext
from coordinator.tools.builtin import BUILTIN_TOOL_NAMES, builtin_tools
from coordinator.tools.plugins import load_plugin, load_plugins

REPO = Path(__file__).resolve().parents[3]

PLUGIN_SOURCE = '''
from __future__ import annotations

import trio


async def slow_wait(seconds: float, label: str = "wait", progress=None) -> dict:
    """Wait for some seconds, reporting each one."""
    for second in range(int(seconds)):
        await trio.sleep(1)
        progress({"waited": second + 1, "label": label})
    return {"label": label, "waited": seconds, "steps": (1, 2)}


async def describe(name: str, tags: list[str], limit: int | None = None, verbose: bool = False) -> str:
    return f"{name}:{','.join(tags)}:{limit}:{verbose}"


async def open_ended(first: str, **rest) -> dict:
    """Takes any extra keys."""
    return {"first": first, **rest}


async def not_json() -> object:
    return object()


def not_async(x: int) -> int:
    return x


class Group:
    @staticmethod
    async def nested(value: int) -> int:
        return value * 2
'''


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder holding a fresh plugin module; sys.path and sys.modules are restored afterwards."""
    # pytest makes each tmp_path name unique in a session; the module name must be too.
    module = "plugin_" + re.sub(r"\W", "_", tmp_path.name)
    (tmp_path / f"{module}.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
    saved_path = list(sys.path)
    saved_modules = set(sys.modules)
    yield tmp_path, module
    sys.path[:] = saved_path
    for name in set(sys.modules) - saved_modules:
        del sys.modules[name]


def context(tmp_path: Path, progress: list[Any]) -> ToolContext:
    return ToolContext(session_id="s1", call_id="c1", workdir=tmp_path, report_progress=progress.append)


async def run(tool: Tool, tmp_path: Path, input: dict[str, Any], progress: list[Any] | None = None) -> Any:
    return await tool.run(context(tmp_path, [] if progress is None else progress), input)


def test_function_name_docstring_and_parameters_make_the_spec(plugin_dir: tuple[Path, str]) -> None:
    """The model sees the plugin exactly as the contract describes: name, docstring, keyword schema."""
    folder, module = plugin_dir
    tool = load_plugin(f"{module}:slow_wait", folder)
    assert tool.name == "slow_wait"
    assert tool.spec.description == "Wait for some seconds, reporting each one."
    assert tool.spec.parameters == {
        "type": "object",
        "properties": {"seconds": {"type": "number"}, "label": {"type": "string", "default": "wait"}},
        "required": ["seconds"],
        "additionalProperties": False,
    }
    assert tool.resource({"seconds": 1}) == "*"


def test_list_optional_and_bool_annotations_become_schema(plugin_dir: tuple[Path, str]) -> None:
    """Common annotations, including ``X | None``, map to the JSON schema a model understands."""
    folder, module = plugin_dir
    tool = load_plugin(f"{module}:describe", folder)
    assert tool.spec.description == ""
    assert tool.spec.parameters["properties"] == {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
        "verbose": {"type": "boolean", "default": False},
    }
    assert tool.spec.parameters["required"] == ["name", "tags"]


async def test_run_passes_input_and_progress_and_returns_json(
    plugin_dir: tuple[Path, str], autojump_clock: trio.testing.MockClock
) -> None:
    """A plugin reports progress through the context, and its result is stored as plain JSON."""
    folder, module = plugin_dir
    tool = load_plugin(f"{module}:slow_wait", folder)
    progress: list[Any] = []
    result = await run(tool, folder, {"seconds": 2, "label": "x"}, progress)
    assert result == {"label": "x", "waited": 2, "steps": [1, 2]}
    assert progress == [{"waited": 1, "label": "x"}, {"waited": 2, "label": "x"}]
    assert trio.current_time() == 2


async def test_string_result_is_returned_as_is(plugin_dir: tuple[Path, str]) -> None:
    """A str result is the tool's text, not a JSON-quoted string."""
    folder, module = plugin_dir
    tool = load_plugin(f"{module}:describe", folder)
    assert await run(tool, folder, {"name": "n", "tags": ["a", "b"], "limit": 3}) == "n:a,b:3:False"


@pytest.mark.parametrize(
    ("input", "message"),
    [
        ({"tags": []}, "missing required parameter(s): name"),
        (
            {"name": "n", "tags": [], "colour": "red"},
            "unknown parameter(s): colour (expected: name, tags, limit, verbose)",
        ),
        (
            {"name": "n", "tags": [1]},
            'parameter tags: [1] does not match {"type": "array", "items": {"type": "string"}}',
        ),
        (
            {"name": "n", "tags": [], "verbose": 1},
            'parameter verbose: 1 does not match {"type": "boolean", "default": false}',
        ),
        (
            {"name": "n", "tags": [], "progress": 1},
            "unknown parameter(s): progress (expected: name, tags, limit, verbose)",
        ),
    ],
)
async def test_bad_input_fails_the_call_with_type_error(
    plugin_dir: tuple[Path, str], input: dict[str, Any], message: str
) -> None:
    """The model gets a message it can correct, and the plugin never sees input it did not declare."""
    folder, module = plugin_dir
    tool = load_plugin(f"{module}:describe", folder)
    with pytest.raises(ToolFailure) as caught:
        await run(tool, folder, input)
    assert (caught.value.type, caught.value.message) == ("error", message)


async def test_var_keyword_plugin_accepts_extra_keys(plugin_dir: tuple[Path, str]) -> None:
    """A plugin that declares ``**rest`` opts into keys it did not name."""
    folder, module = plugin_dir
    tool = load_plugin(f"{module}:open_ended", folder)
    assert tool.spec.parameters["additionalProperties"] is True
    assert await run(tool, folder, {"first": "a", "second": 2}) == {"first": "a", "second": 2}


async def test_non_json_result_fails_the_call(plugin_dir: tuple[Path, str]) -> None:
    """A result that cannot be stored or sent to the model is a failure, not a crash later."""
    folder, module = plugin_dir
    tool = load_plugin(f"{module}:not_json", folder)
    with pytest.raises(ToolFailure) as caught:
        await run(tool, folder, {})
    assert caught.value.type == "error"
    assert caught.value.message.startswith("not_json returned a value that is not JSON-able (object)")


async def test_dotted_attribute_is_followed(plugin_dir: tuple[Path, str]) -> None:
    """``module:Class.method`` reaches a function inside a namespace."""
    folder, module = plugin_dir
    tool = load_plugin(f"{module}:Group.nested", folder)
    assert tool.name == "nested"
    assert await run(tool, folder, {"value": 4}) == 8


def test_module_on_sys_path_is_found_without_base_dir(
    plugin_dir: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """An entry importable from PYTHONPATH loads whatever the config file's folder is."""
    folder, module = plugin_dir
    sys.path.insert(0, str(folder))
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    assert load_plugin(f"{module}:describe", elsewhere).name == "describe"
    assert str(elsewhere) in sys.path


@pytest.mark.parametrize(
    ("attribute", "message"),
    [
        ("missing", "{module} has no attribute missing"),
        ("not_async", "not_async is not an async function"),
        ("PLUGIN", "{module} has no attribute PLUGIN"),
    ],
)
def test_unloadable_attribute_is_a_config_error_naming_the_entry(
    plugin_dir: tuple[Path, str], attribute: str, message: str
) -> None:
    """A start-up error (exit 2) must say which ``[[plugin]]`` entry is wrong."""
    folder, module = plugin_dir
    with pytest.raises(ConfigError) as caught:
        load_plugin(f"{module}:{attribute}", folder)
    assert caught.value.where == f'[[plugin]] entry "{module}:{attribute}"'
    assert caught.value.message == message.format(module=module)


def test_missing_or_broken_module_is_a_config_error(plugin_dir: tuple[Path, str]) -> None:
    """An import failure of any kind is reported against the entry, with the cause."""
    folder, module = plugin_dir
    (folder / f"{module}_broken.py").write_text("raise RuntimeError('boom')\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_plugin(f"{module}_broken:x", folder)
    assert (
        str(caught.value)
        == f'[[plugin]] entry "{module}_broken:x": cannot import {module}_broken: RuntimeError: boom'
    )
    with pytest.raises(ConfigError) as caught:
        load_plugin("no_such_plugin_module:x", folder)
    assert caught.value.message.startswith("cannot import no_such_plugin_module: ModuleNotFoundError")
    with pytest.raises(ConfigError) as caught:
        load_plugin("no-colon", folder)
    assert str(caught.value) == '[[plugin]] entry "no-colon": expected "module:attribute"'


def test_unsupported_annotation_is_a_config_error(plugin_dir: tuple[Path, str]) -> None:
    """A parameter the model cannot be told how to fill is caught at start, not at the first call."""
    folder, module = plugin_dir
    (folder / f"{module}_paths.py").write_text(
        textwrap.dedent(
            """
            from pathlib import Path

            async def read(path: Path) -> str:
                return str(path)
            """
        ),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        load_plugin(f"{module}_paths:read", folder)
    assert caught.value.message.startswith("parameter path: unsupported annotation")


def test_load_plugins_keeps_the_file_order(plugin_dir: tuple[Path, str]) -> None:
    """Every ``[[plugin]]`` becomes a tool, found from the config file's folder."""
    folder, module = plugin_dir
    config = Config(
        plugin=(PluginConfig(entry=f"{module}:slow_wait"), PluginConfig(entry=f"{module}:describe")),
        base_dir=folder,
    )
    assert [tool.name for tool in load_plugins(config)] == ["slow_wait", "describe"]


def test_duplicate_plugin_name_is_a_config_error(plugin_dir: tuple[Path, str]) -> None:
    """Two tools with one name would make the model's calls ambiguous."""
    folder, module = plugin_dir
    second = f"{module}:describe"
    config = Config(
        plugin=(PluginConfig(entry=f"{module}:describe"), PluginConfig(entry=second)), base_dir=folder
    )
    with pytest.raises(ConfigError) as caught:
        load_plugins(config)
    assert caught.value.where == f'[[plugin]] entry "{second}"'
    assert caught.value.message == "the tool name 'describe' is already taken"


def _shadowing_plugin(folder: Path, module: str, builtin: str) -> str:
    """The entry of a plugin module whose only function is named like the built-in tool ``builtin``."""
    source = f"async def {builtin}(text: str) -> str:\n    return text\n"
    (folder / f"{module}_{builtin}.py").write_text(source, encoding="utf-8")
    return f"{module}_{builtin}:{builtin}"


@pytest.mark.parametrize("builtin", ["task", "shell", "execute", "question"])
def test_plugin_named_like_a_builtin_is_a_config_error(plugin_dir: tuple[Path, str], builtin: str) -> None:
    """A plugin must not silently replace a built-in tool the model and the actors rely on."""
    folder, module = plugin_dir
    entry = _shadowing_plugin(folder, module, builtin)
    config = Config(
        plugin=(PluginConfig(entry=f"{module}:describe"), PluginConfig(entry=entry)), base_dir=folder
    )
    with pytest.raises(ConfigError) as caught:
        load_plugins(config)
    assert caught.value.where == f'[[plugin]] entry "{entry}"'
    assert caught.value.message == f"the tool name {builtin!r} would shadow the built-in tool {builtin!r}"


def test_every_builtin_tool_name_is_guarded() -> None:
    """The guard is read from the built-in tool table, so a new built-in cannot be left out of it."""
    assert BUILTIN_TOOL_NAMES == {tool.name for tool in builtin_tools()}
    assert BUILTIN_TOOL_NAMES == {"shell", "question", "execute", "task"}


def test_serve_with_a_shadowing_plugin_exits_2_with_one_line(plugin_dir: tuple[Path, str]) -> None:
    """The start stops with one line that names the plugin entry and the built-in it would shadow."""
    folder, module = plugin_dir
    entry = _shadowing_plugin(folder, module, "task")
    (folder / "coordinator.toml").write_text(f'[[plugin]]\nentry = "{entry}"\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "COORDINATOR_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    command = ["serve", "--config", "coordinator.toml", "--db", "db.sqlite", "--port", "0"]
    result = subprocess.run(
        [sys.executable, "-m", "coordinator", *command],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"coordinator: error: [[plugin]] entry \"{entry}\": the tool name 'task' would shadow the built-in "
        "tool 'task'"
    ]
