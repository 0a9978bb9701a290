"""``coordinator demo`` tells its six stories, each ending as the contract says."""

from __future__ import annotations

import io
import re

from coordinator.demo import run_demo


async def test_the_demo_tells_six_stories_with_the_right_endings() -> None:
    """A newcomer's first look must show each stop with its reason."""
    out = io.StringIO()
    await run_demo(out, colour=False)
    text = out.getvalue()
    stories = re.split(r"\n\d\. ", text)[1:]
    assert len(stories) == 6
    assert "session.idle                     outcome succeeded" in stories[0]
    # The model's last answer arrives in pieces, before the step's end.
    assert stories[0].count("session.text.delta") >= 2
    assert stories[0].index("session.text.delta") < stories[0].index("session.execution.succeeded")
    assert '"type": "declined", "via": "permission"' in stories[1]
    assert "outcome declined" in stories[1]
    assert "permission.revoked" in stories[2] and "outcome interrupted" in stories[2]
    assert "session.execution.suspended" in stories[3]
    assert "(restored, same id)" in stories[3] and "outcome succeeded" in stories[3]
    assert "session.text.delta" in stories[4] and "outcome interrupted" in stories[4]
    assert 'partial_text "Once ' in stories[4] and "status 'interrupted'" in stories[4]
    sub_agent = stories[5]
    assert "task {" in sub_agent and "  ↳ " in sub_agent
    assert sub_agent.index("↳") < sub_agent.index("permission.revoked")
    assert '"parent": {"session_id": ' in sub_agent and "last outcome interrupted" in sub_agent
    assert sub_agent.rindex("↳") < sub_agent.rindex("session.tool.failed")
    assert "\x1b[" not in text
