"""The user's side of a campaign: their config (plugins, rules, timeouts), their script, their scenario.

``coordinator chaos --config FILE --script FILE`` and ``coordinator.testing.run_chaos`` build a
``Setup``; ``world.make_user_world`` draws each run's world from it. Everything is checked once, before
the first run, so that a bad file is one line and exit 2, not a failure in every run.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs

from coordinator.config import Config, config_from
from coordinator.errors import ConfigError
from coordinator.models.scripted import ScriptedModel
from coordinator.tools.registry import build_tools

# The user's scenario (``run_chaos``): drives a coordinator as their program does.
Scenario = Callable[[Any], Awaitable[None]]


@attrs.frozen(kw_only=True)
class Setup:
    """What the user gave: a loaded config and script, and how they named them (for the replay line)."""

    config: Config
    script: tuple[dict[str, Any], ...] | None  # None: the built-in programs
    config_label: str | None = None
    script_label: str | None = None
    # Python only (``run_chaos``): runs in this process, never pickled to a worker.
    scenario: Scenario | None = attrs.field(default=None, eq=False, repr=False)

    @classmethod
    def load(
        cls,
        config: str | Path | Config | None,
        script: str | Path | list[Any] | None = None,
        *,
        scenario: Scenario | None = None,
    ) -> Setup:
        """Load and check the config (its plugins import) and the script.

        The script is ``script``, else the config's ``[model] script``, else None (the built-in
        programs). **Raises:** ``ConfigError`` naming the file and what is wrong in it.
        """
        loaded = config_from(config)
        build_tools(loaded)  # every plugin imports and has a usable signature, or exit 2 now
        items: Any = None
        label = None
        if isinstance(script, list):
            items, label = script, None
        elif script is not None or loaded.script_path() is not None:
            path = Path(script) if script is not None else loaded.script_path()
            assert path is not None
            items, label = _read_script(path), str(script) if script is not None else None
        if items is not None:
            _check_script(items, label or "the script")
        return cls(
            config=loaded,
            script=None if items is None else tuple(items),
            config_label=str(config) if isinstance(config, str | Path) else None,
            script_label=label,
            scenario=scenario,
        )

    def flags(self) -> str:
        """``--config F --script S`` as the replay line repeats them (empty for the built-in campaign)."""
        parts = []
        if self.config_label is not None:
            parts += ["--config", shlex.quote(self.config_label)]
        if self.script_label is not None:
            parts += ["--script", shlex.quote(self.script_label)]
        return " ".join(parts)


def _read_script(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the script: {exc.strerror or exc}", str(path)) from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"invalid JSON: {exc}", str(path)) from exc


def _check_script(items: Any, label: str) -> None:
    ScriptedModel.from_json(items, label)  # the scripted model's own check of the script's format
    if items[-1].get("tool_calls"):
        # Request i gets item min(i, len-1): a last item that calls tools calls them for ever.
        message = "the last item calls tools, so every turn would call them until its step limit; end with a text item"
        raise ConfigError(message, label)
