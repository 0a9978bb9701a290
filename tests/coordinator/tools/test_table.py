"""The tool table: fixed tools, and providers' tools offered to every session or to one."""

from __future__ import annotations

from typing import Any

from coordinator.models.base import ToolSpec
from coordinator.tools.base import Tool, ToolContext, any_resource
from coordinator.tools.table import ToolTable


async def _run(ctx: ToolContext, input: dict[str, Any]) -> None:
    return None


def tool(name: str, description: str = "") -> Tool:
    return Tool(
        spec=ToolSpec(name=name, description=description, parameters={}), resource=any_resource, run=_run
    )


FIXED = {"shell": tool("shell"), "question": tool("question")}


def test_without_providers_every_session_sees_the_fixed_tools_in_their_order() -> None:
    table = ToolTable(FIXED)
    assert list(table.for_session("ses_a")) == ["shell", "question"]
    assert table.for_session("ses_a") is table.for_session("ses_b")


def test_a_provider_adds_tools_after_the_fixed_ones_and_withdraws_them() -> None:
    table = ToolTable(FIXED)
    table.provide("files", [tool("files__read"), tool("files__write")])
    assert list(table.for_session("ses_a")) == ["shell", "question", "files__read", "files__write"]
    table.provide("files", [tool("files__read")])  # replaces what it offered
    assert list(table.for_session("ses_a")) == ["shell", "question", "files__read"]
    table.withdraw("files")
    assert list(table.for_session("ses_a")) == ["shell", "question"]
    table.withdraw("files")  # nothing left: no change, no error
    assert list(table.for_session("ses_a")) == ["shell", "question"]


def test_a_provided_name_that_is_taken_keeps_the_tool_sessions_already_know() -> None:
    table = ToolTable(FIXED)
    table.provide("first", [tool("notes", "the first")])
    table.provide("second", [tool("shell", "an impostor"), tool("notes", "the second"), tool("extra")])
    tools = table.for_session("ses_a")
    assert list(tools) == ["shell", "question", "notes", "extra"]
    assert tools["shell"] is FIXED["shell"] and tools["notes"].spec.description == "the first"


def test_a_tool_provided_to_one_session_is_that_session_s_alone_until_it_is_forgotten() -> None:
    table = ToolTable(FIXED)
    table.provide("browser", [tool("browse")], session_id="ses_a")
    table.provide("files", [tool("files__read")])
    assert list(table.for_session("ses_a")) == ["shell", "question", "files__read", "browse"]
    assert list(table.for_session("ses_b")) == ["shell", "question", "files__read"]
    table.withdraw("files")  # a change for every session reaches the session's own view too
    assert list(table.for_session("ses_a")) == ["shell", "question", "browse"]
    table.forget_session("ses_a")
    assert list(table.for_session("ses_a")) == ["shell", "question"]


def test_a_view_is_read_only() -> None:
    table = ToolTable(FIXED)
    view: Any = table.for_session("ses_a")
    try:
        view["shell"] = tool("other")
    except TypeError:
        pass
    else:
        raise AssertionError("a session's view of the table could be written")
    assert table.for_session("ses_a")["shell"] is FIXED["shell"]
