"""Opaque ids (a kind prefix, then a time-ordered, random body: ``ses_0192f3...``), and this machine's boot id."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path


def new_id(kind: str) -> str:
    """A new id for ``kind`` (``ses``, ``turn``, ``step``, ``msg``, ``per``, ``frm``, ``ins``).

    The first 12 hex digits are milliseconds since the epoch, so ids sort by creation time; the
    remaining 12 are random.
    """
    return f"{kind}_{int(time.time() * 1000):012x}{os.urandom(6).hex()}"


def boot_id() -> str:
    """This machine's boot id (changes at every reboot), or the hostname where there is none."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return socket.gethostname()
