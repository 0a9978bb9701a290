"""The configuration: frozen values, built from TOML, flags and keywords."""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from coordinator.errors import ConfigError
from coordinator.records import Rule


@attrs.frozen(kw_only=True)
class ServerConfig:
    """``[server]``: where to listen, the database, the token, claims and shutdown."""

    host: str = "127.0.0.1"
    port: int = 4096
    db: str = "var/coordinator.sqlite"
    token: str = ""
    lease: float = 15
    max_resumes: int = 5
    resume: Literal["auto", "manual"] = "auto"
    """``auto``: a start resumes suspended and crashed turns; ``manual``: it parks them, suspended,
    until ``POST /api/session/{sid}/resume`` or an interrupt."""
    shutdown_grace: float = 10
    allowed_hosts: tuple[str, ...] = ()
    """Host names (``agents.example.com``) answered besides the loopback ones; any other gets 421."""
    cors_origins: tuple[str, ...] = ()
    """Origins (``https://app.example.com``) whose web pages may call the API, with CORS headers."""
    node_id: str = ""
    """This node's id among the nodes sharing one database; empty: a new id at each start."""


@attrs.frozen(kw_only=True)
class ModelConfig:
    """``[model]``: which provider answers the steps."""

    provider: Literal["openai", "scripted"] = "scripted"
    base_url: str = "http://127.0.0.1:8000/v1"
    name: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    script: str = ""
    max_streams: int = 1000
    """Model requests streaming at once, across all sessions; a step beyond them waits its turn (within
    its own deadline) without costing CPU."""


@attrs.frozen(kw_only=True)
class TimeoutsConfig:
    """``[timeouts]``: seconds each scope may last; 0 means no limit."""

    tool: float = 120
    execute: float = 300
    permission: float = 0
    question: float = 0
    step: float = 300
    turn: float = 0

    def limit(self, scope: str) -> float | None:
        """The deadline of ``scope`` in seconds, or None when it has no limit."""
        seconds = float(getattr(self, scope))
        return seconds if seconds > 0 else None


@attrs.frozen(kw_only=True)
class StoreConfig:
    """``[store]``: how long the store keeps what it no longer needs."""

    keep_events_days: float = 0
    """Events of settled turns older than this many days are deleted in the background; 0 keeps all."""


@attrs.frozen(kw_only=True)
class PostgresConfig:
    """``[postgres]``: how a node uses a PostgreSQL store (``[server] db = "postgresql://..."``)."""

    pool_size: int = 8
    """Connections (and worker threads) the node uses at most for transactions and reads."""


@attrs.frozen(kw_only=True)
class LimitsConfig:
    """``[limits]``: bounds on what a turn may start."""

    task_depth: int = 3
    """How deep sub-agent sessions nest: a ``task`` call that would make a deeper one fails."""


@attrs.frozen(kw_only=True)
class PrincipalConfig:
    """``[[principal]]``: who may use the server: a name, the SHA-256 of its bearer token (the token
    itself is never stored) and a role (``user``: its own sessions only; ``admin``: every session)."""

    name: str
    token_sha256: str
    role: Literal["user", "admin"] = "user"


@attrs.frozen(kw_only=True)
class PluginConfig:
    """``[[plugin]]``: a user tool, ``module:attribute``."""

    entry: str


@attrs.frozen(kw_only=True)
class McpConfig:
    """``[[mcp]]``: an MCP server whose tools every session may call, as ``NAME__TOOL``.

    It runs as a process speaking on its stdin and stdout (``command``), or is reached over
    Streamable HTTP (``url``, with ``headers``, where ``${env:NAME}`` is read when it connects).
    """

    name: str
    command: tuple[str, ...] = ()
    env: dict[str, str] = attrs.field(factory=dict)
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = attrs.field(factory=dict)
    timeout: float = 0
    """Seconds one call may take; 0: ``[timeouts] tool``."""

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command else "http"


@attrs.frozen(kw_only=True)
class Config:
    """The whole configuration. ``base_dir`` is the config file's folder (for plugins and the script)."""

    server: ServerConfig = ServerConfig()
    model: ModelConfig = ModelConfig()
    timeouts: TimeoutsConfig = TimeoutsConfig()
    store: StoreConfig = StoreConfig()
    limits: LimitsConfig = LimitsConfig()
    postgres: PostgresConfig = PostgresConfig()
    permission: tuple[Rule, ...] = ()
    plugin: tuple[PluginConfig, ...] = ()
    principal: tuple[PrincipalConfig, ...] = ()
    mcp: tuple[McpConfig, ...] = ()
    base_dir: Path = attrs.field(factory=Path.cwd)

    def with_overrides(self, **overrides: Any) -> Config:
        """A copy with ``[server]`` keys (``db``, ``host``, ``port``, ...) replaced where given."""
        server_keys = {f.name for f in attrs.fields(ServerConfig)}
        unknown = set(overrides) - server_keys
        if unknown:
            raise TypeError(f"unknown override(s): {', '.join(sorted(unknown))}")
        given = {k: v for k, v in overrides.items() if v is not None}
        return attrs.evolve(self, server=attrs.evolve(self.server, **given))

    def script_path(self) -> Path | None:
        """The scripted model's script (``[model] script``) resolved against ``base_dir``, if set."""
        if not self.model.script:
            return None
        return self.base_dir / Path(self.model.script).expanduser()


# A plugin entry is ``module:attribute``; both sides may be dotted (``pkg.tools:Group.run``).
ENTRY_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

_TABLES: dict[str, type[Any]] = {
    "server": ServerConfig,
    "model": ModelConfig,
    "timeouts": TimeoutsConfig,
    "store": StoreConfig,
    "limits": LimitsConfig,
    "postgres": PostgresConfig,
}
_ARRAYS: dict[str, type[Any]] = {
    "permission": Rule,
    "plugin": PluginConfig,
    "principal": PrincipalConfig,
    "mcp": McpConfig,
}
_SECTION_NAMES = (
    "[server], [model], [timeouts], [store], [limits], [postgres], [[permission]], [[plugin]], "
    "[[principal]], [[mcp]]"
)
MCP_NAME = re.compile(r"^[a-z0-9_-]{1,24}$")
PRINCIPAL_NAME = re.compile(r"^[a-z0-9_.-]{1,64}$")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_TOKEN_ENV = "COORDINATOR_TOKEN"


@attrs.frozen
class _Bound:
    """A range a numeric key must lie in, with the words that name it in an error."""

    holds: Callable[[float], bool]
    words: str


_NON_NEGATIVE = _Bound(lambda v: v >= 0, "0 or more")
_BOUNDS: dict[tuple[type[Any], str], _Bound] = {
    (ServerConfig, "port"): _Bound(lambda v: 0 <= v <= 65535, "from 0 to 65535"),
    (ServerConfig, "lease"): _Bound(lambda v: v > 0, "greater than 0"),
    (ServerConfig, "max_resumes"): _NON_NEGATIVE,
    (ServerConfig, "shutdown_grace"): _NON_NEGATIVE,
    (LimitsConfig, "task_depth"): _NON_NEGATIVE,
    (ModelConfig, "max_streams"): _Bound(lambda v: v >= 1, "1 or more"),
    (PostgresConfig, "pool_size"): _Bound(lambda v: 1 <= v <= 1000, "from 1 to 1000"),
    **{(TimeoutsConfig, f.name): _NON_NEGATIVE for f in attrs.fields(TimeoutsConfig)},
    (StoreConfig, "keep_events_days"): _NON_NEGATIVE,
    (McpConfig, "timeout"): _NON_NEGATIVE,
}


def load_config(path: str | Path | None) -> Config:
    """Read and check a TOML config file; ``None`` gives the defaults.

    ``base_dir`` becomes the file's folder (the defaults use the current directory).

    Args:
        path: the config file, or None.

    Raises:
        ConfigError: the file cannot be read, is not TOML, or has an unknown section or key, a value
            of the wrong type or out of range, or an invalid word; ``where`` names the file and key.
    """
    if path is None:
        return Config()
    file = Path(path)
    label = str(path)
    table = _read_toml(file, label)
    return _config_from_table(table, label, base_dir=file.absolute().parent)


def config_from(value: str | Path | Config | None, **overrides: Any) -> Config:
    """The config an embedder or the CLI asked for: a file, a ready ``Config`` or the defaults.

    Overrides are ``[server]`` keys (``db``, ``host``, ``port``, ...); ``None`` values are ignored, the
    others are checked like the file's values.

    Args:
        value: a config file path, a ``Config`` used as is, or None for the defaults.
        **overrides: ``[server]`` keys that replace the file's values.

    Raises:
        ConfigError: the file is bad (see ``load_config``) or an override has a wrong type or range.
        TypeError: an override is not a ``[server]`` key (a programming error).
    """
    if isinstance(value, Config):
        config = value
    else:
        config = load_config(value)
    hints = typing.get_type_hints(ServerConfig)
    checked: dict[str, Any] = {}
    for key, given in overrides.items():
        if given is None or key not in hints:
            checked[key] = given  # with_overrides drops None and rejects unknown keys
            continue
        if isinstance(given, os.PathLike):
            given = os.fspath(given)
        checked[key] = _check_value(given, hints[key], _BOUNDS.get((ServerConfig, key)), f"[server].{key}")
        if key == "db":
            check_db(checked[key], "[server].db")
    return config.with_overrides(**checked)


def apply_env(config: Config, environ: Mapping[str, str]) -> Config:
    """``config`` with the environment's overrides: a non-empty ``COORDINATOR_TOKEN`` replaces the token.

    An empty variable is ignored rather than switching authentication off, because an unset shell
    variable expands to the empty string.
    """
    token = environ.get(_TOKEN_ENV, "")
    if not token:
        return config
    return attrs.evolve(config, server=attrs.evolve(config.server, token=token))


def _read_toml(file: Path, label: str) -> dict[str, Any]:
    try:
        text = file.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc.strerror or exc}", label) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"invalid TOML: not UTF-8 text (byte {exc.start})", label) from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {_locate(str(exc), text)}", label) from exc


def _locate(message: str, text: str) -> str:
    """tomllib's message, led by the line it names; "end of document" becomes the last line."""
    at = re.fullmatch(r"(.*) \(at line (\d+), column (\d+)\)", message, re.DOTALL)
    if at:
        return f"line {at[2]}, column {at[3]}: {at[1]}"
    at_end = re.fullmatch(r"(.*) \(at end of document\)", message, re.DOTALL)
    if at_end:
        return f"line {max(len(text.splitlines()), 1)} (end of file): {at_end[1]}"
    return message


def _config_from_table(table: dict[str, Any], label: str, *, base_dir: Path) -> Config:
    for key, value in table.items():
        if key not in _TABLES and key not in _ARRAYS:
            shown = f"[{key}]" if isinstance(value, dict) else key
            raise ConfigError(f"unknown section (expected one of {_SECTION_NAMES})", f"{label}: {shown}")
    server, model, timeouts, store, limits, postgres = (
        _build(table.get(name, {}), cls, f"{label}: [{name}]") for name, cls in _TABLES.items()
    )
    permission = tuple(_build_array(table, "permission", label))
    plugin = tuple(_build_array(table, "plugin", label))
    for index, entry in enumerate(plugin):
        if not ENTRY_PATTERN.match(entry.entry):
            where = f"{label}: [[plugin]][{index}].entry"
            raise ConfigError(f'expected "module:attribute", got {_describe(entry.entry)}', where)
    principal = tuple(_build_array(table, "principal", label))
    _check_principals(principal, label)
    mcp = tuple(_build_array(table, "mcp", label))
    _check_mcp(mcp, label)
    return Config(
        server=server,
        model=model,
        timeouts=timeouts,
        store=store,
        limits=limits,
        postgres=postgres,
        permission=permission,
        plugin=plugin,
        principal=principal,
        mcp=mcp,
        base_dir=base_dir,
    )


def _check_principals(principals: tuple[PrincipalConfig, ...], label: str) -> None:
    seen: set[str] = set()
    for index, entry in enumerate(principals):
        where = f"{label}: [[principal]][{index}]"
        if not PRINCIPAL_NAME.match(entry.name):
            raise ConfigError(
                f"expected a name of [a-z0-9_.-], 1 to 64 characters, got {_describe(entry.name)}",
                f"{where}.name",
            )
        if entry.name in seen or entry.name == TOKEN_PRINCIPAL:
            raise ConfigError(f"the name {entry.name!r} is taken", f"{where}.name")
        seen.add(entry.name)
        if not SHA256_HEX.match(entry.token_sha256):
            raise ConfigError(
                "expected the hex SHA-256 of the token (64 characters 0-9a-f)", f"{where}.token_sha256"
            )


def _check_mcp(servers: tuple[McpConfig, ...], label: str) -> None:
    seen: set[str] = set()
    for index, entry in enumerate(servers):
        where = f"{label}: [[mcp]][{index}]"
        if not MCP_NAME.match(entry.name) or "__" in entry.name:
            raise ConfigError(
                f"expected a name of [a-z0-9_-], 1 to 24 characters, without '__', got {_describe(entry.name)}",
                f"{where}.name",
            )
        if entry.name in seen:
            raise ConfigError(f"two [[mcp]] servers are named {entry.name!r}", f"{where}.name")
        seen.add(entry.name)
        if bool(entry.command) == bool(entry.url):
            raise ConfigError("expected either command (a process) or url (Streamable HTTP)", where)
        if entry.url and not re.match(r"^https?://", entry.url):
            raise ConfigError(
                f"expected an http:// or https:// URL, got {_describe(entry.url)}", f"{where}.url"
            )
        if entry.headers and not entry.url:
            raise ConfigError(
                "headers are sent over HTTP only: give url, or drop headers", f"{where}.headers"
            )
        if entry.env and entry.url:
            raise ConfigError("env is a process's: give command, or drop env", f"{where}.env")


TOKEN_PRINCIPAL = "token"
"""The admin that ``[server] token`` (or ``COORDINATOR_TOKEN``) acts as beside ``[[principal]]`` entries."""


def _build_array(table: dict[str, Any], name: str, label: str) -> list[Any]:
    items = table.get(name, [])
    if not isinstance(items, list):
        raise ConfigError(
            f"expected an array of tables [[{name}]], got {_describe(items)}", f"{label}: {name}"
        )
    return [_build(item, _ARRAYS[name], f"{label}: [[{name}]][{i}]") for i, item in enumerate(items)]


def _build(value: Any, cls: type[Any], where: str) -> Any:
    """An instance of the attrs class ``cls`` from one TOML table, every key checked."""
    if not isinstance(value, dict):
        raise ConfigError(f"expected a table, got {_describe(value)}", where)
    hints = typing.get_type_hints(cls)
    fields = attrs.fields_dict(cls)
    values: dict[str, Any] = {}
    for key, item in value.items():
        if key not in fields:
            raise ConfigError(f"unknown key (expected one of {', '.join(fields)})", f"{where}.{key}")
        values[key] = _check_value(item, hints[key], _BOUNDS.get((cls, key)), f"{where}.{key}")
        if (cls, key) == (ServerConfig, "db"):
            check_db(values[key], f"{where}.{key}")
    for name, field in fields.items():
        if field.default is attrs.NOTHING and name not in values:
            raise ConfigError("missing required key", f"{where}.{name}")
    return cls(**values)


def _check_value(value: Any, hint: Any, bound: _Bound | None, where: str) -> Any:
    """``value`` as the field typed ``hint`` holds it (ints widen to floats), or a ConfigError."""
    if typing.get_origin(hint) is Literal:
        words = typing.get_args(hint)
        if not isinstance(value, str) or value not in words:
            raise ConfigError(f"expected one of {', '.join(words)}, got {_describe(value)}", where)
        return value
    if typing.get_origin(hint) is tuple:
        return _check_words(value, where)
    if typing.get_origin(hint) is dict:
        return _check_strings(value, where)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"expected a string, got {_describe(value)}", where)
        return value
    # bool is a subclass of int in Python, but `port = true` is never what was meant.
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if hint is int:
        noun = "an integer"
        ok = is_int
    else:
        noun = "a number"
        ok = is_int or (isinstance(value, float) and math.isfinite(value))
    if not ok or (bound is not None and not bound.holds(value)):
        range_words = f" {bound.words}" if bound is not None else ""
        raise ConfigError(f"expected {noun}{range_words}, got {_describe(value)}", where)
    return value if hint is int else float(value)


# A URL's scheme as RFC 3986 spells it, of two letters or more (``C:`` is a Windows drive, not one).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
_DB_SCHEMES = ("postgresql://", "postgres://", "sqlite://")
DB_ACCEPTED = (
    "a filesystem path (a SQLite file, made with its folder) or a postgresql:// (or postgres://) URL"
)


def check_db(value: str, where: str) -> None:
    """**Raises:** ``ConfigError`` naming ``value`` when it is neither a path nor a database URL the
    coordinator opens: another scheme (``mysql://``, ``postgresql+psycopg://``), or ``postgresql:``
    without ``//`` (a typo that would otherwise be a folder named ``postgresql:``)."""
    if not value.strip():
        raise ConfigError(f"expected {DB_ACCEPTED}, got an empty string", where)
    scheme = _SCHEME.match(value)
    if scheme is not None and not value.startswith(_DB_SCHEMES):
        raise ConfigError(
            f"{value!r} is not a path nor a database URL it opens; expected {DB_ACCEPTED}", where
        )


def _check_words(value: Any, where: str) -> tuple[str, ...]:
    """An array of non-empty strings, as a tuple (``allowed_hosts``, ``cors_origins``)."""
    if not isinstance(value, list | tuple):
        raise ConfigError(f"expected an array of strings, got {_describe(value)}", where)
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f"expected a non-empty string, got {_describe(item)}", f"{where}[{index}]")
    return tuple(value)


def _check_strings(value: Any, where: str) -> dict[str, str]:
    """A table of strings (``env``, ``headers``)."""
    if not isinstance(value, dict):
        raise ConfigError(f"expected a table of strings, got {_describe(value)}", where)
    for key, item in value.items():
        if not isinstance(item, str):
            raise ConfigError(f"expected a string, got {_describe(item)}", f"{where}.{key}")
    return dict(value)


def _describe(value: Any) -> str:
    """A value as the TOML file spelled it, or what kind of value it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"a {type(value).__name__}"
