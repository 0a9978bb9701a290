"""The power-cut rig's handle: mount ``tests/faults/lazyfs.py`` on a folder, cut the power, inject faults.

``mounted(folder)`` starts the filesystem's process and yields a ``Rig`` once the mount is there; on
the way out it unmounts, lazily if a process still holds a file (never leaving a dead mount behind).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

REPO = Path(__file__).resolve().parents[2]
MOUNT_SECONDS = 10.0


def unavailable() -> str | None:
    """Why the rig cannot run here (None: it can): FUSE's device, its mount helper or pyfuse3 missing."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing (Debian's fuse3)"
    if importlib.util.find_spec("pyfuse3") is None:
        return "pyfuse3 is not installed (pip install pyfuse3, with Debian's libfuse3-dev)"
    return None


@attrs.define
class Rig:
    """A mounted lazy filesystem: ``mount`` is its folder."""

    mount: Path
    control: Path
    pid: int = 0  # the filesystem's process

    def ask(self, **request: Any) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(30)
            conn.connect(str(self.control))
            conn.sendall(json.dumps(request).encode() + b"\n")
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    raise ConnectionError("the lazy filesystem went away")
                answer += chunk
        reply: dict[str, Any] = json.loads(answer)
        if "error" in reply:
            raise ValueError(reply["error"])
        return reply

    def cut(self, seed: int | str, mode: str | None = None) -> dict[str, str]:
        """Cut the power: every file keeps what a seeded choice (or ``mode``) says of its unsynced
        writes. Call it only once every process that wrote to the mount is gone."""
        files: dict[str, str] = self.ask(op="cut", seed=str(seed), mode=mode)["files"]
        return files

    def fail(self, *, write: str | None = None, sync: str | None = None) -> None:
        """From now on writes fail with ``write`` and syncs with ``sync`` ("ENOSPC", "EIO", None: succeed)."""
        self.ask(op="fail", write=write, sync=sync)

    def pending(self) -> dict[str, int]:
        """The files with writes not yet synced, and how many each."""
        files: dict[str, int] = self.ask(op="pending")["files"]
        return files

    def counts(self) -> dict[str, int]:
        return self.ask(op="counts")


@contextlib.contextmanager
def mounted(folder: Path) -> Iterator[Rig]:
    """Mount a lazy filesystem on ``folder / "disk"`` for the block's length."""
    mount = folder / "disk"
    mount.mkdir(parents=True, exist_ok=True)
    control = folder / "lazyfs.sock"
    with (folder / "lazyfs.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.lazyfs", str(mount), str(control)],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        try:
            _wait_mounted(process, mount, control, folder / "lazyfs.log")
            yield Rig(mount=mount, control=control, pid=process.pid)
        finally:
            _unmount(process, mount, control)


def _wait_mounted(process: subprocess.Popen[bytes], mount: Path, control: Path, log: Path) -> None:
    deadline = time.monotonic() + MOUNT_SECONDS
    while not (os.path.ismount(mount) and control.exists()):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the lazy filesystem did not mount: {log.read_text(errors='replace')}")
        time.sleep(0.02)


def _unmount(process: subprocess.Popen[bytes], mount: Path, control: Path) -> None:
    with contextlib.suppress(OSError, ValueError):
        Rig(mount=mount, control=control).ask(op="exit")
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if os.path.ismount(mount):
        subprocess.run(["fusermount3", "-u", "-z", str(mount)], check=False, capture_output=True)
