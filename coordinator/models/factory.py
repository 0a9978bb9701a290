"""Build the model a config names: the scripted model, the demo model, or an OpenAI-compatible one."""

from __future__ import annotations

from coordinator.config import Config
from coordinator.errors import ConfigError
from coordinator.models.base import Model
from coordinator.models.scripted import DemoModel, ScriptedModel


def build_model(config: Config) -> Model:
    """The model of ``config.model``: ``scripted`` with a script, the demo without one, or ``openai``.

    Args:
        config: the whole config; a script path is resolved against its ``base_dir``.

    Raises:
        ConfigError: the script is unreadable or malformed, or the provider is unknown.
    """
    provider = config.model.provider
    if provider == "scripted":
        script = config.script_path()
        return DemoModel() if script is None else ScriptedModel.from_file(script)
    if provider == "openai":
        # Imported here so that an offline coordinator never loads the HTTP client stack.
        from coordinator.models.openai import OpenAIModel

        return OpenAIModel.from_config(config.model)
    raise ConfigError(f'expected one of openai, scripted, got "{provider}"', "[model].provider")
