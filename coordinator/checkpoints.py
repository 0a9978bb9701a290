"""Named checkpoints, and the injector protocol: the one way a fault-injection rig reaches the core.

The core makes four calls, and only when it was given an injector (``open_coordinator(injector=...)``);
production gives none, and each call site is then one ``is None`` test:

- ``at(name, turn)``: a named checkpoint, an await point where a stop can arrive
  (``TurnScope.checkpoint``); the injector may hold the actor there until it has applied a fault (an
  interrupt, a decline, a deadline, a failing model or tool, a shutdown, a crash);
- ``notice(name, turn)``: a plugin's own await began, where nothing may be held or raised;
- ``observes(tool)``: whether a tool's awaits are checkpoints (the injector decides, by the tool's
  plugin module);
- ``before_commit(read)``: inside every write transaction, right before its commit (the store's
  ``CommitHook``, installed as the coordinator opens its store): it may raise ``StoreError``.

Checkpoint names (``KINDS``) are part of the campaign's table; add a name here when adding one.
Plugin tools add their own, named after the tool (``plugin_checkpoint_name``): every await of the
plugin's coroutine (``plugin.TOOL.await``), and each point it declares with
``coordinator.testing.checkpoint(NAME)`` (``plugin.TOOL.NAME``).
"""

from __future__ import annotations

import contextvars
import re
import types
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import attrs
import outcome
import trio

if TYPE_CHECKING:  # only types: a plugin importing ``checkpoint`` loads neither the store nor the tools
    from coordinator.store import Reader
    from coordinator.tools.base import Tool

KINDS = (
    "turn.start",  # the turn's claim and start are committed
    "model.request",  # a step is about to ask the model
    "model.chunk",  # the model is streaming: between two chunks of its text
    "model.reply",  # the model answered; its reply is not recorded yet
    "tool.start",  # a tool call is permitted and about to run its tool
    "tool.end",  # the tool returned; its settlement is not written yet
    "nested.call",  # execute's script asked for a nested call
    "permission.wait",  # a permission request is pending
    "form.wait",  # a question form is pending
    "settle.tool",  # a stopped tool call is about to write its failure
    "settle.step",  # a stopped step is about to write its failure
    "settle.turn",  # the session is about to write the turn's settlement
)

# A plugin's checkpoints: ``plugin.TOOL.await`` (any await of its coroutine) and ``plugin.TOOL.NAME``.
PLUGIN_AWAIT = "await"
PLUGIN_CHECKPOINT = re.compile(r"^plugin\.[A-Za-z_]\w*\.[A-Za-z0-9_-]+$")
DECLARED_NAME = re.compile(r"^[A-Za-z0-9_-]+$")

T = TypeVar("T")


class Injector(Protocol):
    """Decides, at each checkpoint, whether to inject a fault, and injects it; the core's only caller
    into a fault-injection rig (the module docstring lists the calls)."""

    async def at(self, name: str, turn: Any) -> None:
        """A named checkpoint of ``turn`` (a ``TurnScope``): the actor may be held here until the
        fault is applied, or the fault raised here. **Raises:** what an injected fault raises."""

    def notice(self, name: str, turn: Any) -> None:
        """An await point the actor cannot be held at (a plugin's own await): a fault is only handed
        over, and lands while the plugin awaits. Must not raise."""

    def observes(self, tool: Tool) -> bool:
        """Whether ``tool``'s awaits, and the checkpoints it declares, reach this injector; asked
        as each of its calls starts to run it."""

    def before_commit(self, read: Reader) -> None:
        """Inside every write transaction of the coordinator's store, right before its commit, with
        the transaction's view (``coordinator.store.CommitHook``). **Raises:** ``StoreError`` to fail
        the commit, as a failing disk would; the transaction is then rolled back."""


def plugin_checkpoint_name(tool: str, name: str) -> str:
    return f"plugin.{tool}.{name}"


def is_plugin_checkpoint(name: str) -> bool:
    return PLUGIN_CHECKPOINT.match(name) is not None


def is_declared_checkpoint(name: str) -> bool:
    """A checkpoint a plugin declared with ``checkpoint(NAME)``, not one of its implicit awaits."""
    return is_plugin_checkpoint(name) and not name.endswith(f".{PLUGIN_AWAIT}")


@attrs.define(eq=False, kw_only=True)
class PluginProbe:
    """What a plugin tool's checkpoints report to, set (``CURRENT_PROBE``) only while a campaign runs."""

    injector: Injector
    turn: Any
    tool: str
    task: trio.lowlevel.Task
    declaring: bool = False  # inside a declared checkpoint: its own awaits are not the plugin's

    async def declared(self, name: str) -> None:
        if not DECLARED_NAME.match(name) or name == PLUGIN_AWAIT:
            raise ValueError(f"a checkpoint name is letters, digits, '_' and '-' (not 'await'): {name!r}")
        own = trio.lowlevel.current_task() is self.task
        self.declaring = self.declaring or own
        try:
            await self.injector.at(plugin_checkpoint_name(self.tool, name), self.turn)
        finally:
            if own:
                self.declaring = False

    def noticed(self) -> None:
        if not self.declaring:
            self.injector.notice(plugin_checkpoint_name(self.tool, PLUGIN_AWAIT), self.turn)


CURRENT_PROBE: contextvars.ContextVar[PluginProbe | None] = contextvars.ContextVar(
    "coordinator_plugin_probe", default=None
)


async def checkpoint(name: str) -> None:
    """Declare an await point of a plugin tool, where the chaos campaign injects faults too.

    Published as ``coordinator.testing.checkpoint``. Under a campaign (``coordinator chaos``,
    ``run_chaos``) the tool may be held here until a fault is applied (an interrupt, a shutdown, a
    crash... then ``trio.Cancelled`` is raised here as at any await), or a ``RuntimeError`` is raised
    here (the ``tool_error`` fault: what your tool does when something it awaits fails). Its row in
    the campaign's table is ``plugin.TOOL.NAME``.

    Without a campaign it returns at once, doing nothing (it neither yields to trio nor can be
    cancelled): one function call and one context variable read.

    Args:
        name: letters, digits, ``_`` and ``-`` (not ``await``), unique within the tool.

    **Raises:** ``ValueError`` under a campaign for a malformed name; what an injected fault raises.
    """
    probe = CURRENT_PROBE.get()
    if probe is not None:
        await probe.declared(name)


@types.coroutine
def _forward(message: Any) -> Generator[Any, Any, Any]:
    """Pass one suspension of the observed coroutine to trio, and trio's answer back."""
    return (yield message)


async def run_observed(coroutine: Coroutine[Any, Any, T], on_await: Callable[[], None]) -> T:
    """Run ``coroutine`` exactly as ``await coroutine`` would, calling ``on_await`` each time it suspends.

    ``on_await`` runs when the coroutine has just yielded to trio (its await has begun, whatever it
    registered is in place), before trio sees the suspension; it must not await or raise. What trio
    sends back (an outcome) or throws in goes to the coroutine untouched, so trio's guarantees (an
    operation that completed is never reported cancelled) hold for the plugin as without observation.

    **Cancellation:** as the coroutine's own. **Raises:** what the coroutine raises.
    """
    sent: Any = None
    thrown: BaseException | None = None
    try:
        while True:
            try:
                message = coroutine.send(sent) if thrown is None else coroutine.throw(thrown)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            thrown = None
            on_await()
            # What trio throws in (only for a yield it does not know) belongs to the coroutine, which
            # gets it and raises it, or handles it, as it would have under a plain await.
            answer = await outcome.acapture(_forward, message)
            if isinstance(answer, outcome.Value):
                sent = answer.value
            else:
                sent, thrown = None, answer.error
    finally:
        coroutine.close()
