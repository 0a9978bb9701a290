"""Plugin tools: a user's async function, loaded from ``[[plugin]] entry = "module:attribute"``."""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import types
import typing
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Literal

from coordinator.checkpoints import CURRENT_PROBE, run_observed
from coordinator.config import ENTRY_PATTERN, Config
from coordinator.errors import ConfigError, ToolFailure
from coordinator.models.base import ToolSpec
from coordinator.tools.base import Tool, ToolContext, any_resource
from coordinator.tools.builtin import BUILTIN_TOOL_NAMES

# The keyword a plugin declares to receive ``ToolContext.report_progress``; never part of its input.
PROGRESS_PARAMETER = "progress"

_SIMPLE_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
    type(None): "null",
}

PluginFunction = Callable[..., Coroutine[Any, Any, Any]]


def load_plugins(config: Config) -> list[Tool]:
    """Every ``[[plugin]]`` of ``config`` as a tool, in the file's order.

    Raises:
        ConfigError: an entry cannot be loaded (see ``load_plugin``), a plugin would shadow a
            built-in tool, or two plugins have the same name.
    """
    tools: list[Tool] = []
    taken: set[str] = set()
    for plugin in config.plugin:
        tool = load_plugin(plugin.entry, config.base_dir)
        if tool.name in BUILTIN_TOOL_NAMES:
            message = f"the tool name {tool.name!r} would shadow the built-in tool {tool.name!r}"
            raise ConfigError(message, _where(plugin.entry))
        if tool.name in taken:
            raise ConfigError(f"the tool name {tool.name!r} is already taken", _where(plugin.entry))
        taken.add(tool.name)
        tools.append(tool)
    return tools


def load_plugin(entry: str, base_dir: Path) -> Tool:
    """The tool made of the async function ``entry`` (``module:attribute``) names.

    The module is imported from ``sys.path``, with ``base_dir`` (the config file's folder) put in
    front of it when missing. The function's ``__name__`` is the tool name, its docstring the
    description and its keyword parameters the input schema.

    Args:
        entry: ``module:attribute``; both parts may be dotted.
        base_dir: the folder a plugin module may also be found in.

    Raises:
        ConfigError: the entry is malformed, its module fails to import, the attribute is missing
            or is not an async function, or a parameter cannot become part of a JSON schema.
    """
    function = _import_function(entry, base_dir)
    parameters, accepts_progress, open_ended = _parameters(function, entry)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": parameters,
        "required": [name for name, param in _input_parameters(function) if param.default is param.empty],
        "additionalProperties": open_ended,
    }
    spec = ToolSpec(name=function.__name__, description=inspect.getdoc(function) or "", parameters=schema)

    async def run(ctx: ToolContext, input: dict[str, Any]) -> Any:
        _validate(input, schema)
        keywords = dict(input)
        if accepts_progress:
            keywords[PROGRESS_PARAMETER] = ctx.report_progress
        return _json_result(await _awaited(function(**keywords)), spec.name)

    return Tool(spec=spec, resource=any_resource, run=run, plugin_module=function.__module__)


async def _awaited(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """The plugin's result; when a fault injector observes the tool, each of its awaits is a checkpoint.

    Without one (no probe), this is ``await coroutine``.
    """
    probe = CURRENT_PROBE.get()
    if probe is None:
        return await coroutine
    return await run_observed(coroutine, probe.noticed)


def _where(entry: str) -> str:
    return f"[[plugin]] entry {json.dumps(entry)}"


def _import_function(entry: str, base_dir: Path) -> PluginFunction:
    if not ENTRY_PATTERN.match(entry):
        raise ConfigError('expected "module:attribute"', _where(entry))
    module_name, attribute = entry.split(":")
    folder = str(base_dir)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    # The finders cache folder listings; a module written since the last import would be missed.
    importlib.invalidate_caches()
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:  # a plugin's import may raise anything; the entry is what is wrong
        raise ConfigError(f"cannot import {module_name}: {type(exc).__name__}: {exc}", _where(entry)) from exc
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError as exc:
            raise ConfigError(f"{module_name} has no attribute {attribute}", _where(entry)) from exc
    if not inspect.iscoroutinefunction(found):
        raise ConfigError(f"{attribute} is not an async function", _where(entry))
    return typing.cast(PluginFunction, found)


def _input_parameters(function: PluginFunction) -> list[tuple[str, inspect.Parameter]]:
    """The parameters a model's input fills: keyword-able ones except ``progress``."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [
        (name, param)
        for name, param in inspect.signature(function).parameters.items()
        if param.kind in kinds and name != PROGRESS_PARAMETER
    ]


def _parameters(function: PluginFunction, entry: str) -> tuple[dict[str, Any], bool, bool]:
    """The input schema's properties, whether ``progress`` is wanted, whether ``**kwargs`` is open."""
    try:
        hints = typing.get_type_hints(function)
    except Exception as exc:  # an annotation naming something the module never imported
        raise ConfigError(f"cannot resolve the annotations: {exc}", _where(entry)) from exc
    signature = inspect.signature(function).parameters
    for name, param in signature.items():
        if param.kind is inspect.Parameter.POSITIONAL_ONLY and param.default is param.empty:
            raise ConfigError(f"parameter {name} is positional-only; it cannot take input", _where(entry))
    properties: dict[str, Any] = {}
    for name, param in _input_parameters(function):
        schema = _schema_of(hints.get(name, Any), f"parameter {name}", entry)
        if param.default is not param.empty:
            schema = {**schema, **_default_of(param.default)}
        properties[name] = schema
    accepts_progress = PROGRESS_PARAMETER in signature and signature[PROGRESS_PARAMETER].kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.values())
    return properties, accepts_progress, open_ended


def _default_of(default: Any) -> dict[str, Any]:
    """``{"default": value}`` when the default can be shown to the model as JSON."""
    try:
        json.dumps(default, allow_nan=False)
    except (TypeError, ValueError):
        return {}
    return {"default": default}


def _schema_of(annotation: Any, what: str, entry: str) -> dict[str, Any]:
    """The JSON schema of one annotation: simple types, their lists and dicts, Optional, Literal."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return {}
    if annotation in _SIMPLE_TYPES:
        return {"type": _SIMPLE_TYPES[annotation]}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is list:
        return {"type": "array", "items": _schema_of(args[0], what, entry)} if args else {"type": "array"}
    if origin is dict:
        return {"type": "object"}
    if origin is Literal and all(isinstance(a, str | int | bool) for a in args):
        return {"enum": list(args)}
    if origin is typing.Union or origin is types.UnionType:
        return {"anyOf": [_schema_of(arg, what, entry) for arg in args]}
    raise ConfigError(f"{what}: unsupported annotation {annotation!r}", _where(entry))


def _validate(input: dict[str, Any], schema: dict[str, Any]) -> None:
    """Fail the call when ``input`` misses a required key, has an unknown one, or a wrong type."""
    properties: dict[str, Any] = schema["properties"]
    missing = [name for name in schema["required"] if name not in input]
    if missing:
        raise ToolFailure(type="error", message=f"missing required parameter(s): {', '.join(missing)}")
    unknown = [name for name in input if name not in properties]
    if unknown and not schema["additionalProperties"]:
        expected = ", ".join(properties) or "none"
        message = f"unknown parameter(s): {', '.join(unknown)} (expected: {expected})"
        raise ToolFailure(type="error", message=message)
    for name, value in input.items():
        if name in properties and not _matches(value, properties[name]):
            message = f"parameter {name}: {json.dumps(value)} does not match {json.dumps(properties[name])}"
            raise ToolFailure(type="error", message=message)


def _matches(value: Any, schema: dict[str, Any]) -> bool:
    """Whether a JSON value fits a schema made by ``_schema_of``."""
    if "anyOf" in schema:
        return any(_matches(value, option) for option in schema["anyOf"])
    if "enum" in schema:
        return any(value == word and type(value) is type(word) for word in schema["enum"])
    kind = schema.get("type")
    if kind is None:
        return True
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    python_type = next(t for t, name in _SIMPLE_TYPES.items() if name == kind)
    if not isinstance(value, python_type):
        return False
    items = schema.get("items")
    return items is None or all(_matches(item, items) for item in value)


def _json_result(result: Any, name: str) -> Any:
    """The plugin's result as JSON holds it (tuples become lists), or a failure naming its type."""
    if isinstance(result, str):
        return result
    try:
        return json.loads(json.dumps(result, allow_nan=False))
    except (TypeError, ValueError) as exc:
        message = f"{name} returned a value that is not JSON-able ({type(result).__name__}): {exc}"
        raise ToolFailure(type="error", message=message) from exc
