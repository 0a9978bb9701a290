"""Config loading: the full example parses, and every mistake names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.config import Config, PluginConfig, apply_env, config_from, load_config
from coordinator.errors import ConfigError
from coordinator.records import Rule

CONTRACT_EXAMPLE = """
[server]
host = "127.0.0.1"
port = 4096
db = "var/coordinator.sqlite"
token = ""                 # when non-empty, every /api request needs "Authorization: Bearer <token>"
                           # (env COORDINATOR_TOKEN overrides)
lease = 15                 # seconds a claim's heartbeat stays valid for other processes
max_resumes = 5            # resumes of one turn before it is failed instead
shutdown_grace = 10        # seconds a graceful shutdown may take before it is forced

[model]
provider = "openai"        # "openai" (any OpenAI-compatible chat-completions endpoint) or "scripted"
base_url = "http://127.0.0.1:8000/v1"
name = "gpt-4o-mini"
api_key_env = "OPENAI_API_KEY"   # name of the env var holding the key; empty key allowed
script = "path/to/script.json"   # provider "scripted" only (section 8)

[timeouts]                 # seconds; 0 means no limit
tool = 120                 # one tool call, nested calls of execute included
execute = 300              # one execute call as a whole
permission = 0             # waiting for a permission reply
question = 0               # waiting for a question form
step = 300                 # one model request, from send to last chunk
turn = 0                   # one whole turn

[[permission]]             # rules, first match from the bottom wins (the last matching rule)
action = "*"               # tool name or "*"
resource = "*"             # glob over the tool's resource (shell: the command; files: the path)
effect = "allow"           # "allow" | "ask" | "deny"

[[permission]]
action = "shell"
resource = "*"
effect = "ask"

[[plugin]]                 # a tool implemented by the user, loaded at start
entry = "mytools:slow_wait"  # module:attribute, importable from PYTHONPATH or the config file's folder
"""


def write_config(folder: Path, text: str) -> Path:
    path = folder / "coordinator.toml"
    path.write_text(text, encoding="utf-8")
    return path


def config_error(folder: Path, text: str) -> str:
    """The one line a bad config file produces."""
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(folder, text))
    return str(caught.value).replace(f"{folder}/", "")


def test_contract_example_parses_into_every_section(tmp_path: Path) -> None:
    """The file the contract shows must load exactly as written."""
    config = load_config(write_config(tmp_path, CONTRACT_EXAMPLE))
    assert config.server.port == 4096
    assert config.server.lease == 15.0
    assert config.server.max_resumes == 5
    assert config.model.provider == "openai"
    assert config.model.script == "path/to/script.json"
    assert config.timeouts.limit("tool") == 120.0
    assert config.timeouts.limit("turn") is None
    assert config.permission == (
        Rule(action="*", resource="*", effect="allow"),
        Rule(action="shell", resource="*", effect="ask"),
    )
    assert config.plugin == (PluginConfig(entry="mytools:slow_wait"),)
    assert config.base_dir == tmp_path
    assert config.script_path() == tmp_path / "path" / "to" / "script.json"


def test_empty_file_and_none_give_the_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing section means its defaults, so a minimal file is valid."""
    monkeypatch.chdir(tmp_path)
    assert load_config(None) == Config(base_dir=tmp_path)
    sub = tmp_path / "conf"
    sub.mkdir()
    assert load_config(write_config(sub, "")) == Config(base_dir=sub)
    assert load_config(None).script_path() is None


def test_permission_rule_defaults_action_and_resource_to_any(tmp_path: Path) -> None:
    """A rule may give only its effect; it then matches every tool and resource."""
    config = load_config(write_config(tmp_path, '[[permission]]\neffect = "deny"\n'))
    assert config.permission == (Rule(action="*", resource="*", effect="deny"),)


def test_keep_events_days_defaults_to_keeping_everything_and_takes_fractions(tmp_path: Path) -> None:
    """Retention is off unless asked for; a fraction of a day is a valid window (tests, soaks)."""
    assert load_config(write_config(tmp_path, "")).store.keep_events_days == 0
    config = load_config(write_config(tmp_path, "[store]\nkeep_events_days = 0.5\n"))
    assert config.store.keep_events_days == 0.5
    assert (
        load_config(write_config(tmp_path, "[store]\nkeep_events_days = 30\n")).store.keep_events_days == 30.0
    )


def test_resume_policy_defaults_to_auto_and_takes_manual(tmp_path: Path) -> None:
    """An operator who wants sessions paused at start says so in one key; the default changes nothing."""
    assert load_config(write_config(tmp_path, "")).server.resume == "auto"
    assert load_config(write_config(tmp_path, '[server]\nresume = "manual"\n')).server.resume == "manual"
    assert config_from(Config(base_dir=tmp_path), resume="manual").server.resume == "manual"
    with pytest.raises(ConfigError) as caught:
        config_from(Config(base_dir=tmp_path), resume="paused")
    assert str(caught.value) == '[server].resume: expected one of auto, manual, got "paused"'


def test_int_is_accepted_where_a_float_is_expected(tmp_path: Path) -> None:
    """Seconds may be written as whole numbers or with a fraction."""
    config = load_config(write_config(tmp_path, "[timeouts]\nstep = 2\ntool = 0.5\n"))
    assert config.timeouts.step == 2.0
    assert config.timeouts.tool == 0.5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[server]\nport = "abc"\n',
            'coordinator.toml: [server].port: expected an integer from 0 to 65535, got "abc"',
        ),
        (
            "[server]\nport = true\n",
            "coordinator.toml: [server].port: expected an integer from 0 to 65535, got true",
        ),
        (
            "[server]\nport = 70000\n",
            "coordinator.toml: [server].port: expected an integer from 0 to 65535, got 70000",
        ),
        (
            "[server]\nport = 4096.0\n",
            "coordinator.toml: [server].port: expected an integer from 0 to 65535, got 4096.0",
        ),
        (
            "[server]\nlease = 0\n",
            "coordinator.toml: [server].lease: expected a number greater than 0, got 0",
        ),
        ("[server]\nhost = 1\n", "coordinator.toml: [server].host: expected a string, got 1"),
        (
            "[server]\nmax_resumes = -1\n",
            "coordinator.toml: [server].max_resumes: expected an integer 0 or more, got -1",
        ),
        (
            '[server]\nresume = "later"\n',
            'coordinator.toml: [server].resume: expected one of auto, manual, got "later"',
        ),
        (
            "[server]\nresume = true\n",
            "coordinator.toml: [server].resume: expected one of auto, manual, got true",
        ),
        ("[timeouts]\nstep = -1\n", "coordinator.toml: [timeouts].step: expected a number 0 or more, got -1"),
        (
            "[timeouts]\nstep = nan\n",
            "coordinator.toml: [timeouts].step: expected a number 0 or more, got nan",
        ),
        (
            "[timeouts]\nturn = false\n",
            "coordinator.toml: [timeouts].turn: expected a number 0 or more, got false",
        ),
        (
            "[store]\nkeep_events_days = -1\n",
            "coordinator.toml: [store].keep_events_days: expected a number 0 or more, got -1",
        ),
        (
            '[store]\nkeep_events_days = "30"\n',
            'coordinator.toml: [store].keep_events_days: expected a number 0 or more, got "30"',
        ),
        (
            "[store]\nkeep = 30\n",
            "coordinator.toml: [store].keep: unknown key (expected one of keep_events_days)",
        ),
        (
            '[model]\nprovider = "gpt"\n',
            'coordinator.toml: [model].provider: expected one of openai, scripted, got "gpt"',
        ),
        (
            '[[permission]]\neffect = "allow"\n[[permission]]\neffect = "ask"\n'
            '[[permission]]\neffect = "maybe"\n',
            'coordinator.toml: [[permission]][2].effect: expected one of allow, ask, deny, got "maybe"',
        ),
        (
            '[[permission]]\naction = "shell"\n',
            "coordinator.toml: [[permission]][0].effect: missing required key",
        ),
        ("[[plugin]]\nentry = 3\n", "coordinator.toml: [[plugin]][0].entry: expected a string, got 3"),
        (
            '[[plugin]]\nentry = "nocolon"\n',
            'coordinator.toml: [[plugin]][0].entry: expected "module:attribute", got "nocolon"',
        ),
    ],
)
def test_wrong_type_range_or_word_names_the_key(tmp_path: Path, text: str, expected: str) -> None:
    """The operator must learn from one line which key is wrong and why."""
    assert config_error(tmp_path, text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "[server]\nprot = 1\n",
            "coordinator.toml: [server].prot: unknown key (expected one of host, port, db, token, lease, "
            "max_resumes, resume, shutdown_grace, allowed_hosts, cors_origins, node_id)",
        ),
        (
            '[[permission]]\neffect = "ask"\ntool = "shell"\n',
            "coordinator.toml: [[permission]][0].tool: unknown key "
            "(expected one of action, resource, effect)",
        ),
        (
            "[logging]\nlevel = 1\n",
            "coordinator.toml: [logging]: unknown section (expected one of [server], [model], [timeouts], "
            "[store], [limits], [postgres], [[permission]], [[plugin]], "
            "[[principal]], [[mcp]])",
        ),
        (
            "verbose = true\n",
            "coordinator.toml: verbose: unknown section (expected one of [server], [model], "
            "[timeouts], [store], [limits], [postgres], [[permission]], [[plugin]], "
            "[[principal]], [[mcp]])",
        ),
        ("[[server]]\nport = 1\n", "coordinator.toml: [server]: expected a table, got an array"),
        (
            '[permission]\neffect = "ask"\n',
            "coordinator.toml: permission: expected an array of tables [[permission]], got a table",
        ),
    ],
)
def test_unknown_or_misshapen_section_or_key_names_it(tmp_path: Path, text: str, expected: str) -> None:
    """A typo must not be silently ignored: it would leave a default the operator meant to change."""
    assert config_error(tmp_path, text) == expected


def test_toml_syntax_error_names_the_line(tmp_path: Path) -> None:
    """A syntax error points at the line to fix."""
    message = config_error(tmp_path, "[server]\nport = 4096\nport = 1\n")
    assert message == "coordinator.toml: invalid TOML: line 3, column 9: Cannot overwrite a value"


def test_toml_error_at_end_of_file_names_the_last_line(tmp_path: Path) -> None:
    """tomllib reports some errors "at end of document"; the message still names a line."""
    message = config_error(tmp_path, "[server]\nhost = [1,\n")
    assert message == "coordinator.toml: invalid TOML: line 2 (end of file): Invalid value"


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    """A wrong --config path is reported as such, not as a crash."""
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "absent.toml")
    assert caught.value.where == str(tmp_path / "absent.toml")
    assert "cannot read the config file" in caught.value.message


def test_where_holds_the_file_and_key(tmp_path: Path) -> None:
    """The CLI prints ``where`` and ``message``; both parts are kept apart for it."""
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, "[server]\nport = -1\n"))
    assert caught.value.where == f"{tmp_path / 'coordinator.toml'}: [server].port"
    assert caught.value.message == "expected an integer from 0 to 65535, got -1"


def test_config_from_accepts_a_path_a_config_or_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedding API takes any of the three and applies keyword overrides on top."""
    monkeypatch.chdir(tmp_path)
    path = write_config(tmp_path, '[server]\nport = 5000\nhost = "0.0.0.0"\n')
    from_path = config_from(str(path), db=tmp_path / "app.sqlite", port=None)
    assert from_path.server.port == 5000
    assert from_path.server.host == "0.0.0.0"
    assert from_path.server.db == str(tmp_path / "app.sqlite")
    ready = Config(base_dir=tmp_path)
    assert config_from(ready) == ready
    assert config_from(None, port=0) == Config(base_dir=tmp_path).with_overrides(port=0)


def test_config_from_checks_overrides_like_the_file(tmp_path: Path) -> None:
    """A flag is held to the same rules as the key it replaces."""
    with pytest.raises(ConfigError) as caught:
        config_from(Config(base_dir=tmp_path), port=-5)
    assert str(caught.value) == "[server].port: expected an integer from 0 to 65535, got -5"
    with pytest.raises(TypeError):
        config_from(Config(base_dir=tmp_path), colour="red")


def test_env_token_overrides_the_file_token(tmp_path: Path) -> None:
    """An operator keeps the secret out of the file with COORDINATOR_TOKEN."""
    config = load_config(write_config(tmp_path, '[server]\ntoken = "from-file"\n'))
    assert apply_env(config, {"COORDINATOR_TOKEN": "from-env"}).server.token == "from-env"
    assert apply_env(config, {}).server.token == "from-file"
    assert apply_env(config, {"COORDINATOR_TOKEN": ""}).server.token == "from-file"


def test_script_path_is_resolved_against_the_config_folder(tmp_path: Path) -> None:
    """A script named in the file is found next to it, wherever the server is started."""
    config = load_config(write_config(tmp_path, '[model]\nprovider = "scripted"\nscript = "s.json"\n'))
    assert config.model.script == "s.json"
    assert config.script_path() == tmp_path / "s.json"
    absolute = load_config(write_config(tmp_path, f'[model]\nscript = "{tmp_path / "x" / "s.json"}"\n'))
    assert absolute.script_path() == tmp_path / "x" / "s.json"


def test_allowed_hosts_and_cors_origins_are_arrays_of_strings(tmp_path: Path) -> None:
    """The edge's lists (the Host names and CORS origins it accepts) are checked like every other key,
    naming the bad entry."""
    good = tmp_path / "good.toml"
    good.write_text(
        '[server]\nallowed_hosts = ["agents.example.com"]\ncors_origins = ["https://app.example.com"]\n'
    )
    config = load_config(good)
    assert (config.server.allowed_hosts, config.server.cors_origins) == (
        ("agents.example.com",),
        ("https://app.example.com",),
    )
    for text, where in (
        ('[server]\nallowed_hosts = "agents.example.com"\n', "[server].allowed_hosts: expected an array"),
        (
            '[server]\ncors_origins = ["https://a.example", 3]\n',
            "[server].cors_origins[1]: expected a non-empty",
        ),
    ):
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(ConfigError) as caught:
            load_config(bad)
        assert where in str(caught.value)
