"""Fixtures for the HTTP server tests: a running server per test with its model, client and event log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.coordinator.server.harness import (
    QUESTION_CALL,
    SHELL_CALL,
    Api,
    running_api,
    server_config,
    then_done,
)
from tests.model_server import serve_model


@pytest.fixture
async def shell_api(tmp_path: Path) -> AsyncIterator[Api]:
    """A server whose model always asks for one shell call, which the rules make ask permission."""
    async with serve_model([SHELL_CALL]) as mock, running_api(server_config(tmp_path, mock), mock) as api:
        yield api


@pytest.fixture
async def done_api(tmp_path: Path) -> AsyncIterator[Api]:
    """A server whose model asks for a shell call, then answers "done" once it has the result."""
    async with (
        serve_model(then_done(SHELL_CALL)) as mock,
        running_api(server_config(tmp_path, mock), mock) as api,
    ):
        yield api


@pytest.fixture
async def form_api(tmp_path: Path) -> AsyncIterator[Api]:
    """A server whose model asks a question form, then answers "done" once it has the answers."""
    async with (
        serve_model(then_done(QUESTION_CALL)) as mock,
        running_api(server_config(tmp_path, mock), mock) as api,
    ):
        yield api
