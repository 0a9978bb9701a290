"""The person at the keyboard: answers each permission request and form the injector hands over."""

from __future__ import annotations

import trio

from coordinator import Coordinator, errors
from coordinator.chaos.injector import Job


async def respond(coord: Coordinator, jobs: trio.MemoryReceiveChannel[Job], scope: trio.CancelScope) -> None:
    """Answer each job, each in its own time, until ``scope`` is cancelled."""
    with scope:
        async with trio.open_nursery() as nursery:
            async for job in jobs:
                nursery.start_soon(_answer, coord, job)


async def _answer(coord: Coordinator, job: Job) -> None:
    await trio.sleep(job.think)
    for _ in range(3):
        try:
            await _answer_once(coord, job)
            return
        except errors.StoreError:
            await trio.lowlevel.checkpoint()  # the injected failure fails one commit: try again
        except errors.ClientError:
            return  # settled meanwhile (revoked by a stop), or the coordinator closed


async def _answer_once(coord: Coordinator, job: Job) -> None:
    if job.kind == "permission":
        if job.choice == "feedback":
            await coord.reply_permission(job.session_id, job.wait_id, "reject", "chaos: try something else")
        else:
            await coord.reply_permission(job.session_id, job.wait_id, job.choice)
        return
    if job.choice == "feedback":
        await coord.dismiss_form(job.session_id, job.wait_id, "chaos: ask me later")
        return
    form = await coord.store.read(lambda reader: reader.get_form(job.wait_id))
    if form is not None:
        answers = {q.id: (q.options[0] if q.options else "because") for q in form.questions}
        await coord.submit_form(job.session_id, job.wait_id, answers)
