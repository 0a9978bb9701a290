"""The tool table: which tools each session may call now.

Built-in and plugin tools are fixed for the coordinator's life. A provider (an MCP server once it is
ready, a resource a session holds) adds tools while the coordinator runs and withdraws them when it
goes away, for every session or for one session only. A step reads the session's tools as it asks
the model, a call looks its tool up as it starts, and a settlement reads what each tool declares:
each sees the table as it is at that moment, so a tool withdrawn between the model's request and
the call fails the call as an unknown tool would.

A session's view is a read-only mapping built once per change of the table, so the hot path (a step
asking for the tools, a call finding its tool) is a dictionary lookup.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping

import trio

from coordinator.logs import get_logger
from coordinator.tools.base import Tool

log = get_logger(__name__)

EVERY_SESSION = ""
"""The scope of a provider whose tools every session has."""


class ToolTable:
    """Tools by name for each session: the fixed ones, then each provider's, first come first kept."""

    def __init__(self, fixed: Mapping[str, Tool]) -> None:
        self._fixed = types.MappingProxyType(dict(fixed))
        # Providers' tools by scope (a session id, or EVERY_SESSION), then by provider name.
        self._provided: dict[str, dict[str, tuple[Tool, ...]]] = {}
        # What every session without tools of its own sees, and the views of those with some: built
        # when first read after a change.
        self._shared: Mapping[str, Tool] | None = None
        self._own: dict[str, Mapping[str, Tool]] = {}
        # What a provider says of a name it does not offer now (its server is not ready), by provider.
        self._explainers: dict[str, Callable[[str], str | None]] = {}
        self._changes = trio.Event()

    def for_session(self, session_id: str) -> Mapping[str, Tool]:
        """The tools ``session_id`` may call now, by name, in the order the model is offered them."""
        if session_id not in self._provided:
            if self._shared is None:
                self._shared = self._build(EVERY_SESSION)
            return self._shared
        view = self._own.get(session_id)
        if view is None:
            view = self._own[session_id] = self._build(session_id)
        return view

    def provide(self, provider: str, tools: Iterable[Tool], *, session_id: str = EVERY_SESSION) -> None:
        """Offer ``tools`` from ``provider`` (replacing what it offered before) to one session, or to
        every session by default.

        A provided tool whose name is taken (a fixed tool's, or an earlier provider's) is not offered:
        the tool the sessions already know keeps its name, and the refusal is logged.
        """
        self._provided.setdefault(session_id, {})[provider] = tuple(tools)
        self._changed(session_id)

    def withdraw(self, provider: str, *, session_id: str = EVERY_SESSION) -> None:
        """Take back every tool ``provider`` offered in that scope; nothing when it offered none."""
        scope = self._provided.get(session_id)
        if scope is None or scope.pop(provider, None) is None:
            return
        if not scope:
            del self._provided[session_id]
        self._changed(session_id)

    def explain_absence(self, provider: str, explain: Callable[[str], str | None]) -> None:
        """Let ``provider`` say why a tool name it may offer is not offered now (``why_missing``)."""
        self._explainers[provider] = explain

    def why_missing(self, name: str) -> str | None:
        """Why no tool is called ``name`` now, when a provider knows (its server is not ready)."""
        for explain in self._explainers.values():
            if (why := explain(name)) is not None:
                return why
        return None

    def forget_session(self, session_id: str) -> None:
        """Drop what was provided to ``session_id`` alone (the session was deleted)."""
        self._provided.pop(session_id, None)
        self._own.pop(session_id, None)

    async def wait_offered(self, session_id: str, name: str, seconds: float) -> Tool | None:
        """The tool ``name`` once ``session_id`` may call it, waiting up to ``seconds`` while its
        provider says why it is missing (a server still connecting); None if it never comes."""
        with trio.move_on_after(seconds):
            while (tool := self.for_session(session_id).get(name)) is None:
                if self.why_missing(name) is None:
                    return None  # no provider will offer it
                await self._changes.wait()
            return tool
        return None

    def _changed(self, session_id: str) -> None:
        self._changes.set()
        self._changes = trio.Event()
        if session_id == EVERY_SESSION:
            self._shared = None
            self._own.clear()
        else:
            self._own.pop(session_id, None)

    def _build(self, session_id: str) -> Mapping[str, Tool]:
        provided = self._scope(EVERY_SESSION)
        if session_id != EVERY_SESSION:
            provided += self._scope(session_id)
        if not provided:
            return self._fixed
        tools = dict(self._fixed)
        for provider, tool in provided:
            if tool.name in tools:
                log.warning("provided_tool_name_taken", provider=provider, tool=tool.name)
                continue
            tools[tool.name] = tool
        return types.MappingProxyType(tools)

    def _scope(self, session_id: str) -> list[tuple[str, Tool]]:
        providers = self._provided.get(session_id, {})
        return [(provider, tool) for provider, tools in providers.items() for tool in tools]
