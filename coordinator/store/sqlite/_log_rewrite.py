"""Making the write-ahead log durable again after a failed sync: read it back, check it, write it again.

When ``fsync`` fails, Linux marks the pages it could not write clean: reads still return them, and no
later ``fsync`` writes them, so a later sync that succeeds proves nothing about them. A log whose
middle never reached the disk is worse than a short one: SQLite's recovery stops at the first frame
whose checksum fails, so every commit appended after the hole, acknowledged or not, would be lost at
the next start. Writing the bytes again makes the pages dirty again; a sync that succeeds after that
proves they are on the disk.

The bytes are checked before they are written: every frame of the log SQLite is using (up to its
last valid commit frame) must carry the log's salt and a valid running checksum, and there must be
at least as many as this process knows were written. A log that reads back otherwise (a filesystem
that dropped the pages rather than keeping them) cannot be made whole in this process: ``LogLost``.

The frame format is SQLite's own (https://www.sqlite.org/fileformat.html#the_write_ahead_log): a
32-byte header, then frames of a 24-byte header and one page each.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from array import array

from coordinator import errors

HEADER_BYTES = 32
FRAME_HEADER_BYTES = 24
MAGIC_LITTLE_ENDIAN = 0x377F0682
MAGIC_BIG_ENDIAN = 0x377F0683
CHUNK_BYTES = 1 << 20


class LogLost(errors.StoreError):
    """The write-ahead log read back is not the log SQLite wrote: what a failed sync lost cannot be
    written again by this process."""


def rewrite_log(wal_path: str, frames_written: int) -> int:
    """Check the log at ``wal_path``, write all its bytes again, ``fdatasync`` it and sync its folder.

    ``frames_written``: frames this process knows the log holds (the count SQLite last reported);
    the valid log must reach at least that far. Returns the valid frames found.

    **Raises:** ``LogLost`` when the log does not check out; ``StoreError`` when the disk refuses.
    Call it while holding SQLite's write lock, so no frame is appended meanwhile.
    """
    try:
        fd = os.open(wal_path, os.O_RDWR)
    except FileNotFoundError:
        if frames_written:
            raise LogLost(f"the write-ahead log {wal_path} is gone") from None
        return 0
    except OSError as exc:
        raise errors.StoreError(f"opening the write-ahead log failed: {exc}") from exc
    try:
        data = _read_all(fd)
        valid = valid_frames(data)
        if valid < frames_written:
            raise LogLost(
                f"the write-ahead log reads back with {valid} valid frames, not the {frames_written} "
                "written: the disk dropped what it failed to sync"
            )
        _write_again(fd, data)
        sync_folder(os.path.dirname(os.path.abspath(wal_path)))
    except OSError as exc:
        raise errors.StoreError(f"writing the write-ahead log again failed: {exc}") from exc
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return valid


def rewrite_file(path: str) -> None:
    """Write every byte of the file at ``path`` again and ``fdatasync`` it (the database file, after
    a WAL checkpoint whose sync failed). **Raises:** ``StoreError`` when the disk refuses."""
    try:
        fd = os.open(path, os.O_RDWR)
        try:
            _write_again(fd, _read_all(fd))
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
    except OSError as exc:
        raise errors.StoreError(f"writing the database file again failed: {exc}") from exc


def _write_again(fd: int, data: bytes) -> None:
    for offset in range(0, len(data), CHUNK_BYTES):
        os.pwrite(fd, data[offset : offset + CHUNK_BYTES], offset)
    os.fdatasync(fd)


def valid_frames(log: bytes) -> int:
    """How many frames of ``log`` SQLite would use: up to the last commit frame of the unbroken run of
    frames with the header's salt and a valid running checksum (0 for an empty or unknown log)."""
    if len(log) < HEADER_BYTES:
        return 0
    magic, _version, page_size, _seq, salt1, salt2, sum1, sum2 = struct.unpack(">8I", log[:HEADER_BYTES])
    if magic not in (MAGIC_LITTLE_ENDIAN, MAGIC_BIG_ENDIAN):
        return 0
    big_endian = magic == MAGIC_BIG_ENDIAN
    s0, s1 = _checksum(log[:24], 0, 0, big_endian)
    if (s0, s1) != (sum1, sum2):
        return 0
    frame_bytes = FRAME_HEADER_BYTES + page_size
    valid = frames = 0
    offset = HEADER_BYTES
    while offset + frame_bytes <= len(log):
        _page, commit_size, f_salt1, f_salt2, f_sum1, f_sum2 = struct.unpack(
            ">6I", log[offset : offset + FRAME_HEADER_BYTES]
        )
        if (f_salt1, f_salt2) != (salt1, salt2):
            break
        s0, s1 = _checksum(log[offset : offset + 8], s0, s1, big_endian)
        s0, s1 = _checksum(log[offset + FRAME_HEADER_BYTES : offset + frame_bytes], s0, s1, big_endian)
        if (s0, s1) != (f_sum1, f_sum2):
            break
        frames += 1
        if commit_size:
            valid = frames
        offset += frame_bytes
    return valid


def _checksum(data: bytes, s0: int, s1: int, big_endian: bool) -> tuple[int, int]:
    """SQLite's running checksum of the log over ``data`` (a multiple of 8 bytes), from ``s0, s1``."""
    words = array("I", data)
    if big_endian != (sys.byteorder == "big"):
        words.byteswap()
    mask = 0xFFFFFFFF
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & mask
        s1 = (s1 + words[i + 1] + s0) & mask
    return s0, s1


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    parts = []
    offset = 0
    while offset < size:
        part = os.pread(fd, min(CHUNK_BYTES, size - offset), offset)
        if not part:
            break
        parts.append(part)
        offset += len(part)
    return b"".join(parts)


def sync_folder(folder: str) -> None:
    """``fsync`` a folder: the names in it (a file's creation) survive a power loss."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
