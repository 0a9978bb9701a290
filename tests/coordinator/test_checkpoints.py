"""``run_observed``: a plugin's coroutine runs exactly as under ``await``, each suspension reported."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from coordinator.checkpoints import run_observed


async def test_what_trio_sends_and_raises_reaches_the_coroutine_untouched(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Values received, the coroutine's own cancel scopes and its exceptions behave as without observation."""
    send, receive = trio.open_memory_channel[str](1)
    seen: list[str] = []

    async def plugin() -> tuple[str, bool]:
        item = await receive.receive()
        with trio.move_on_after(1) as own:  # its own deadline fires inside it, as usual
            await trio.sleep_forever()
        return item, own.cancelled_caught

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send.send, "hello")
        result = await run_observed(plugin(), lambda: seen.append("await"))
    assert result == ("hello", True)
    assert len(seen) >= 2  # the receive and the sleep, at least

    async def failing() -> None:
        await trio.lowlevel.checkpoint()
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        await run_observed(failing(), lambda: None)


async def test_a_cancellation_from_outside_lands_in_the_await_and_its_cleanup_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A stop while the plugin awaits reaches it there; its ``finally`` (shielded) completes."""
    events: list[str] = []

    async def plugin() -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(0.5)
                events.append("cleaned up")

    with trio.move_on_after(1) as outer:
        await run_observed(plugin(), lambda: events.append("await"))
    assert outer.cancelled_caught
    assert events == ["await", "await", "cleaned up"]
