"""The stored history as the model sees it (``conversation_for_model``): every tool call answered,
partial results included, and each session's settled turns kept converted so that a step does not
rebuild them."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs

from coordinator import wire
from coordinator.models.base import ChatMessage, ModelToolCall
from coordinator.reasons import REASON_CLASSES, Timeout
from coordinator.records import Message, TextPart, ToolPart
from coordinator.store import Reader
from coordinator.store.rows import StoredMessage

NO_RESULT = {"error": {"type": "interrupted", "message": "the tool call ended without a recorded result"}}


# What the model is told about a call a stop cut off, by whether its tool had begun.
STOPPED_WHILE_RUNNING = (
    "This tool call was stopped while it was running: it may have taken effect (check before "
    "repeating it). What it had produced so far is in partial."
)
STOPPED_BEFORE_RUNNING = (
    "This tool call did not run: it was stopped before its tool began. Nothing of it was done."
)
EDITED_NOTE = "Note: the user changed this call's input before it ran; it ran with this input instead: "
# The error types of a call cut off by a stop (or its own deadline): those the stop reasons give
# their calls, but a failure's (a tool's own error is reported as it is).
_STOPPED_TYPES = frozenset(cls.tool_error for cls in REASON_CLASSES if not cls.is_failure) | {
    Timeout.tool_error
}


def tool_result_text(part: ToolPart) -> str:
    """What the model receives for a call: its output, or its error with the partial result; for a
    call a stop cut off, whether it had begun; and the input a person changed it to, if they did."""
    if part.state == "succeeded":
        text = part.output if isinstance(part.output, str) else _json(part.output)
    elif part.state == "failed" and part.error is not None:
        body: dict[str, Any] = {"error": wire.unstructure(part.error)}
        if part.error.started is not None and part.error.type in _STOPPED_TYPES:
            body["note"] = STOPPED_WHILE_RUNNING if part.error.started else STOPPED_BEFORE_RUNNING
        if part.partial is not None:
            body["partial"] = wire.unstructure(part.partial)
        text = _json(body)
    else:
        text = _json(NO_RESULT)
    if part.edited_input is not None:
        text += "\n\n" + EDITED_NOTE + _json(part.edited_input)
    return text


def to_chat(messages: Sequence[Message], model_call_ids: Mapping[str, str | None]) -> tuple[ChatMessage, ...]:
    """Convert the stored messages to the model's conversation.

    An assistant message's tool calls are followed by one ``tool`` message each, so the history is
    valid even after a stop: a call without a settlement is answered as interrupted.
    """
    chat: list[ChatMessage] = []
    for message in messages:
        text = "".join(p.text for p in message.parts if isinstance(p, TextPart))
        if message.role == "user":
            chat.append(ChatMessage(role="user", content=text))
            continue
        tools = [p for p in message.parts if isinstance(p, ToolPart)]
        calls = tuple(
            ModelToolCall(id=model_call_ids.get(p.call_id) or p.call_id, name=p.name, input=p.input)
            for p in tools
        )
        chat.append(ChatMessage(role="assistant", content=text or None, tool_calls=calls))
        for part, model_call in zip(tools, calls, strict=True):
            chat.append(ChatMessage(role="tool", tool_call_id=model_call.id, content=tool_result_text(part)))
    return tuple(chat)


def conversation_for_model(reader: Reader, session_id: str) -> tuple[ChatMessage, ...]:
    """The session's whole conversation as the model is sent it, read and converted from scratch.

    The reference: a step sends the same messages (``Conversations`` keeps the settled turns
    converted and reads only the rest), and the chaos checker and the tests compare against this.
    """
    return to_chat(*reader.history_with_model_ids(session_id))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


HistoryTail = Callable[[int], Awaitable[tuple[list[StoredMessage], dict[str, str | None]]]]
"""Reads a session's messages after the ``ord`` given, and their calls' model ids, from the store
(``Reader.history_after``)."""


# The budget of every session's kept conversation together, in estimated bytes, and the estimate's
# parts: an attrs ChatMessage with its slots, a tool call with its input's dict, measured with
# tracemalloc on the benchmark's sessions (design/benchmarks.md).
CONVERSATIONS_BUDGET_BYTES = 32 * 2**20
MESSAGE_BYTES = 150
TOOL_CALL_BYTES = 200
# What a kept session costs with nothing in it: its record, its list, its place in the table. A
# session whose first turn is running keeps an empty conversation; without this cost, a server that
# saw millions of sessions would keep every one of them, none counted against the budget.
SESSION_BYTES = 300


@attrs.define(kw_only=True)
class SettledConversation:
    """A session's settled turns as the model is sent them, up to the message ``last_ord``.

    ``epoch`` is the claim epoch of the last turn that used it: a turn whose epoch is neither that
    one nor the next took the claim after another owner held it, and starts again from the store.
    """

    messages: list[ChatMessage] = attrs.Factory(list)
    last_ord: int = -1
    epoch: int
    # The estimated bytes kept: the session's own, its messages', its title's.
    size: int = SESSION_BYTES
    # The session's title, as the model is sent it (a title never changes): None until a step read it.
    title: str | None = None


class Conversations:
    """Each session's conversation of its settled turns, kept so that a step reads from the store and
    converts only the messages after them (the running turn's, and any turn not settled yet).

    A settled turn's messages, parts and calls are never written again, and a message's ``ord`` only
    grows, so the kept part stays what a read from scratch would give. The sessions used least
    recently are dropped beyond ``budget`` estimated bytes; a dropped one is read again in full.
    """

    def __init__(self, budget: int | None = None) -> None:
        self._budget = CONVERSATIONS_BUDGET_BYTES if budget is None else budget
        self._size = 0
        self._sessions: OrderedDict[str, SettledConversation] = OrderedDict()

    @property
    def size(self) -> int:
        """The estimated bytes kept, every session together."""
        return self._size

    def kept_until(self, session_id: str, epoch: int) -> int:
        """The ``ord`` of the last message kept for a step of a turn holding the claim at ``epoch``
        (-1: none): a step reads the messages after it (``Reader.history_after``, in the transaction
        that begins the step) and hands them to ``messages_after``."""
        kept = self._sessions.get(session_id)
        return kept.last_ord if kept is not None and _continues(kept, epoch) else -1

    def messages_after(
        self,
        session_id: str,
        epoch: int,
        after_ord: int,
        stored: list[StoredMessage],
        model_ids: Mapping[str, str | None],
    ) -> tuple[ChatMessage, ...] | None:
        """The session's conversation as a step of a turn holding the claim at ``epoch`` sends it,
        given the messages stored after ``after_ord`` (``kept_until``) and their calls' model ids.

        None when what is kept changed since ``kept_until`` (nothing else is changed then): read again.
        """
        kept = self._take(session_id, epoch)
        if kept.last_ord != after_ord:
            self._keep(session_id, kept)
            return None
        settled = 0
        while settled < len(stored) and stored[settled].turn_settled:
            settled += 1
        if settled:
            newly_settled = to_chat([s.message for s in stored[:settled]], model_ids)
            kept.messages.extend(newly_settled)
            kept.last_ord = stored[settled - 1].ord
            kept.size += estimated_bytes(newly_settled)
        rest = to_chat([s.message for s in stored[settled:]], model_ids)
        self._keep(session_id, kept)
        return (*kept.messages, *rest)

    async def request_messages(
        self, tail: HistoryTail, session_id: str, epoch: int
    ) -> tuple[ChatMessage, ...]:
        """As ``messages_after``, reading the messages after what is kept with ``tail``.

        **Cancellation:** safe: nothing kept changes before the read returned.
        """
        while True:
            after_ord = self.kept_until(session_id, epoch)
            stored, model_ids = await tail(after_ord)
            messages = self.messages_after(session_id, epoch, after_ord, stored, model_ids)
            if messages is not None:
                return messages

    def title(self, session_id: str) -> str | None:
        """The session's title if kept (beside its conversation), else None."""
        kept = self._sessions.get(session_id)
        return None if kept is None else kept.title

    def keep_title(self, session_id: str, title: str) -> None:
        """Keep the session's title beside its conversation, if one is kept."""
        kept = self._sessions.get(session_id)
        if kept is not None and kept.title is None:
            kept.title = title
            kept.size += len(title)
            self._size += len(title)

    def kept_messages(self, session_id: str) -> int:
        """How many messages of the session's conversation are kept (0 when none is)."""
        kept = self._sessions.get(session_id)
        return 0 if kept is None else len(kept.messages)

    def forget(self, session_id: str) -> None:
        """Drop what is kept of a session (deleted, or rewritten other than by its turns)."""
        dropped = self._sessions.pop(session_id, None)
        if dropped is not None:
            self._size -= dropped.size

    def _take(self, session_id: str, epoch: int) -> SettledConversation:
        kept = self._sessions.pop(session_id, None)
        if kept is not None:
            self._size -= kept.size
            if _continues(kept, epoch):
                kept.epoch = epoch
                return kept
        return SettledConversation(epoch=epoch)

    def _keep(self, session_id: str, kept: SettledConversation) -> None:
        self._sessions[session_id] = kept
        self._size += kept.size
        while self._size > self._budget:
            _, dropped = self._sessions.popitem(last=False)
            self._size -= dropped.size


def _continues(kept: SettledConversation, epoch: int) -> bool:
    """Whether a turn at ``epoch`` follows the one that used ``kept``, with no other owner between."""
    return epoch in (kept.epoch, kept.epoch + 1)


def estimated_bytes(messages: Sequence[ChatMessage]) -> int:
    """About what ``messages`` hold in memory: each object, its text, its calls' names and inputs."""
    total = 0
    for message in messages:
        total += MESSAGE_BYTES + len(message.content or "")
        for call in message.tool_calls:
            total += TOOL_CALL_BYTES + len(call.id) + len(call.name) + len(_json(call.input))
    return total
