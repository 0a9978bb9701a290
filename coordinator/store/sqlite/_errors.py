"""apsw's exceptions as the store's own (``StoreBusy``, ``StoreFull``, ``StoreError``): the one mapping,
used by ``_connection.map_apsw_errors`` around every statement of the SQLite backend."""

from __future__ import annotations

import apsw

from coordinator import errors


def mapped(exc: apsw.Error) -> errors.StoreError:
    """The store error that ``exc`` is, naming apsw's class (``CorruptError: ...``)."""
    if isinstance(exc, apsw.BusyError):
        return errors.StoreBusy(str(exc))
    if isinstance(exc, apsw.FullError):
        return errors.StoreFull(str(exc))
    return errors.StoreError(f"{type(exc).__name__}: {exc}")
