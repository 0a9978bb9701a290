"""Opaque ids: a kind prefix, then a time-ordered, random body (``ses_0192f3...``)."""

from __future__ import annotations

import os
import time


def new_id(kind: str) -> str:
    """A new id for ``kind`` (``ses``, ``turn``, ``step``, ``msg``, ``per``, ``frm``, ``ins``).

    The first 12 hex digits are milliseconds since the epoch, so ids sort by creation time; the
    remaining 12 are random.
    """
    return f"{kind}_{int(time.time() * 1000):012x}{os.urandom(6).hex()}"
