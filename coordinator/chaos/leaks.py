"""No process a tool started outlives its call: which call started each process, and which were left.

The campaign runs as the *child subreaper* of what it starts, so every process a tool starts stays
below it in the process tree, even one in a new session whose parent died. ``/proc`` is read at each
call's start and settlement (``CommitWatch.on_commit``, right after the commit): a process first seen
is attributed to the calls that ran since the previous look (its *suspects*: usually one; several
when calls overlap). Once every suspect has settled, the process must be gone: one still alive a
short grace later (the time a kill takes to land, since a tool that SIGKILLs and does not wait is not
reaped yet) is a leak, named by its tool and call. Leaked processes are killed when the run ends.

A process seen before the run, or started while no call ran, has no suspect and is not judged here
(``processes.leftovers`` still reports our children left at the end of a run).
"""

from __future__ import annotations

import time

import attrs

from coordinator.chaos import processes
from coordinator.chaos.processes import Seen
from coordinator.chaos.record import Violation

# Wall seconds a process may take to end after its last suspect settled (a kill being delivered).
LEAK_GRACE = 0.2
KILL_WAIT = 2.0  # wall seconds for the killed leaks to end, so that no later check sees them

CallKey = tuple[str, str]  # (session id, call id)
MCP_SERVER = "chaos/mcp_server.py"  # in the command line of the campaign's MCP server
ProcessKey = tuple[int, int]  # (pid, start time)


@attrs.define
class ProcessLedger:
    """Owned by one run of the campaign, across its coordinators (a call may settle after a restart)."""

    names: dict[CallKey, str] = attrs.Factory(dict)
    running: set[CallKey] = attrs.Factory(set)
    settled_calls: set[CallKey] = attrs.Factory(set)
    recent: set[CallKey] = attrs.Factory(set)  # the calls that ran since the last look
    seen: dict[ProcessKey, Seen] = attrs.Factory(dict)
    suspects: dict[ProcessKey, frozenset[CallKey]] = attrs.Factory(dict)
    alive: dict[ProcessKey, Seen] = attrs.Factory(dict)
    candidates: dict[ProcessKey, float] = attrs.Factory(dict)  # -> when its last suspect settled
    leaked: dict[ProcessKey, Violation] = attrs.Factory(dict)

    def baseline(self) -> None:
        """What runs before the first call belongs to no call."""
        self._look()

    def started(self, session_id: str, call_id: str, name: str) -> None:
        self._look()
        key = (session_id, call_id)
        self.names[key] = name
        self.running.add(key)
        self.recent.add(key)

    def settled(self, session_id: str, call_id: str) -> None:
        key = (session_id, call_id)
        self._look()  # what it started and left is seen now, with it among the suspects
        self.running.discard(key)
        self.recent.discard(key)
        self.settled_calls.add(key)
        now = time.monotonic()
        for process in self.alive:
            if process not in self.candidates and self._judged(process):
                self.candidates[process] = now

    def finish(self) -> list[Violation]:
        """After the run: confirm the leaks (a last look after the grace), kill them, and return them."""
        self._look()
        for process in self.alive:
            if self.suspects.get(process) and process not in self.candidates:
                self.candidates[process] = time.monotonic()  # its call never settled: it outlived the run
        if self.candidates:
            time.sleep(LEAK_GRACE)
            self._look(final=True)
        for process in self.leaked:
            processes.kill(self.seen[process])
        deadline = time.monotonic() + KILL_WAIT
        while time.monotonic() < deadline and any(processes.is_alive(self.seen[p]) for p in self.leaked):
            time.sleep(0.01)
        return list(self.leaked.values())

    def _judged(self, process: ProcessKey) -> bool:
        suspects = self.suspects.get(process, frozenset())
        return bool(suspects) and suspects <= self.settled_calls

    def _look(self, *, final: bool = False) -> None:
        self.alive = processes.descendants()
        servers = {
            seen.pgid for seen in self.alive.values() if seen.pid == seen.pgid and MCP_SERVER in seen.command
        }
        for process, seen in self.alive.items():
            if process not in self.seen:
                self.seen[process] = seen
                # An MCP server's group is the coordinator's, not a call's: judged at the run's end.
                self.suspects[process] = frozenset() if seen.pgid in servers else frozenset(self.recent)
        self.recent = set(self.running)
        now = time.monotonic()
        for process, since in list(self.candidates.items()):
            if process not in self.alive:
                del self.candidates[process]
            elif final or now - since >= LEAK_GRACE:
                del self.candidates[process]
                self.leaked[process] = self._violation(process)

    def _violation(self, process: ProcessKey) -> Violation:
        # Read again: a process first seen between its fork and its exec showed its parent's command.
        command = processes.command_of(self.seen[process])
        calls = sorted(self.suspects[process])
        tools = sorted({self.names[c] for c in calls})
        if len(calls) == 1:
            what = f"tool {tools[0]} left a process running after its call {calls[0][1]} settled"
        else:
            names = ", ".join(tools)
            what = f"a process started while {len(calls)} calls (tools {names}) ran outlived them all"
        return Violation(6, f"{what}: {command}")
