"""The registry of live session actors, and the recovery of turns a previous process left behind."""

from __future__ import annotations

import functools

import structlog
import trio

from actors import session
from actors.context import Runtime
from actors.session import SessionHandle, Takeover
from coordinator import decisions
from coordinator.claims import Liveness
from coordinator.reasons import Failure

log = structlog.get_logger()


class Registry:
    """Starts at most one actor per session, in the coordinator's root nursery."""

    def __init__(self, runtime: Runtime, nursery: trio.Nursery) -> None:
        self._runtime = runtime
        self._nursery = nursery
        self._actors: dict[str, SessionHandle] = {}
        self._takeovers: dict[str, Takeover] = {}
        self.closed = False

    def get(self, session_id: str) -> SessionHandle | None:
        return self._actors.get(session_id)

    def ensure_running(self, session_id: str) -> None:
        """Start the session's actor unless it runs; it picks up every unfinished or queued turn.

        Synchronous, so a prompt committed just before is never missed: the actor reads the store
        when it looks for its next turn, and leaves the registry in the same step as it finds none.
        """
        if self.closed or session_id in self._actors:
            return
        handle = SessionHandle(session_id=session_id)
        self._actors[session_id] = handle
        self._nursery.start_soon(functools.partial(self._run, handle), name=f"session {session_id}")

    async def _run(self, handle: SessionHandle) -> None:
        try:
            await session.run(self._runtime, handle, self._takeovers)
        finally:
            if self._actors.get(handle.session_id) is handle:
                del self._actors[handle.session_id]

    def recover(self, liveness: Liveness) -> list[str]:
        """Find turns left unfinished by a shutdown or a crash and start their sessions' actors.

        Returns the session ids started. A turn whose owner is alive (another process) is left alone.
        """
        read = self._runtime.store.read
        started: list[str] = []
        for turn in read.unfinished_turns():
            claim = read.get_claim(turn.session_id)
            owner = None if claim is None or claim.owner is None else read.get_instance(claim.owner)
            # A suspended turn whose claim is held again is being resumed by that owner (between its
            # claim and its resume): taken only if that owner died (design/model/README.md, finding 4).
            suspended = claim is not None and claim.state == "suspended"
            if not suspended and not liveness.owner_is_dead(owner):
                continue
            after = "shutdown" if turn.status == "suspended" else "crash"
            self._takeovers[turn.id] = Takeover(
                previous_owner=None if claim is None else claim.owner, after=after
            )
            log.info(
                "turn_recovered", session_id=turn.session_id, turn_id=turn.id, status=turn.status, after=after
            )
            started.append(turn.session_id)
        for session_id in [*started, *read.sessions_with_queued_turns()]:
            self.ensure_running(session_id)
        return started

    async def serve_watch(self, liveness: Liveness, interval: float) -> None:
        """For ever: take over turns of owners that died, and apply decisions other processes made."""
        while True:
            await trio.sleep(interval)
            if self.closed:
                return
            try:
                self.recover(liveness)
                decisions.apply_remote_decisions(self._runtime)
                await self._runtime.bus.notice_foreign_commits(self._runtime.store)
            except Exception as exc:  # a busy database: look again at the next tick
                log.warning("watch_failed", exc_info=exc)

    async def abandon(self) -> None:
        """Tear every actor down without a settlement (the store refuses writes by now)."""
        self.closed = True
        actors = list(self._actors.values())
        for handle in actors:
            handle.shutting_down = True
            if handle.turn is not None:
                handle.turn.handle.stop(Failure(message="the coordinator was abandoned"))
        for handle in actors:
            await handle.done.wait()

    async def shutdown(self) -> None:
        """Suspend every running turn with reason shutdown and wait for every actor to settle.

        **Cancellation:** the caller bounds this with its grace period; actors settle shielded.
        """
        self.closed = True
        actors = list(self._actors.values())
        for handle in actors:
            handle.shutdown()
        for handle in actors:
            await handle.done.wait()
