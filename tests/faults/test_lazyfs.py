"""The lazy filesystem keeps what was synced and, at a cut, forgets what was not, as a power cut would."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.lazyfs import PAGE
from tests.faults.rig import Rig

pytestmark = pytest.mark.timeout(60)


def write_at(path: Path, offset: int, data: bytes, *, sync: bool = False) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.pwrite(fd, data, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def test_a_cut_loses_what_was_written_after_the_last_sync(rig: Rig) -> None:
    path = rig.mount / "file"
    write_at(path, 0, b"a" * 5000, sync=True)
    write_at(path, 1000, b"b" * 10000)
    assert path.read_bytes() == b"a" * 1000 + b"b" * 10000  # reads see every write at once
    cut = rig.cut(seed=1, mode="lose")

    assert list(cut) == ["file"]
    assert cut["file"].startswith("lose: 0 of")

    assert path.read_bytes() == b"a" * 5000


def test_a_cut_may_keep_every_unsynced_write(rig: Rig) -> None:
    path = rig.mount / "file"
    write_at(path, 0, b"a" * 100)
    write_at(path, 100, b"b" * 100)

    rig.cut(seed=1, mode="keep")

    assert path.read_bytes() == b"a" * 100 + b"b" * 100


def test_a_torn_cut_keeps_a_prefix_of_the_writes_torn_at_a_page_boundary(rig: Rig) -> None:
    writes = [(index * PAGE * 3, bytes([65 + index]) * (PAGE * 3)) for index in range(4)]
    # Every state a torn cut may leave: k whole writes, then the next one's first p pages.
    possible = set()
    for whole in range(len(writes)):
        for pages in range(4):
            kept = [*writes[:whole], (writes[whole][0], writes[whole][1][: pages * PAGE])]
            possible.add(b"".join(data for _, data in kept))
    seen = set()
    for seed in range(12):
        path = rig.mount / f"file-{seed}"
        for offset, data in writes:
            write_at(path, offset, data)
        rig.cut(seed=seed, mode="torn")
        left = path.read_bytes()
        assert left in possible
        seen.add(left)
    assert len(seen) > 3  # the seeds choose different prefixes, torn inside a write too


def test_a_sync_by_another_process_makes_the_writes_durable(rig: Rig) -> None:
    """The server's sync helper syncs the WAL that the server wrote: that sync must count."""
    path = rig.mount / "wal"
    write_at(path, 0, b"committed")
    sync = "import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fdatasync(fd)"
    subprocess.run([sys.executable, "-c", sync, str(path)], check=True)
    write_at(path, 9, b" and not synced")

    rig.cut(seed=1, mode="lose")

    assert path.read_bytes() == b"committed"


def test_a_failed_sync_forgets_its_writes_as_linux_does(rig: Rig) -> None:
    path = rig.mount / "file"
    write_at(path, 0, b"before", sync=True)
    write_at(path, 0, b"after!")
    rig.fail(sync="EIO")
    fd = os.open(path, os.O_WRONLY)
    try:
        with pytest.raises(OSError) as failed:
            os.fsync(fd)
        assert failed.value.errno == errno.EIO
        rig.fail()
        assert path.read_bytes() == b"after!"  # still what reads see
        os.fsync(fd)  # succeeds, and proves nothing about the forgotten write
    finally:
        os.close(fd)

    rig.cut(seed=1, mode="keep")

    assert path.read_bytes() == b"before"
    assert rig.counts()["failed_syncs"] == 1


def test_bytes_written_again_after_a_failed_sync_reach_the_disk_at_the_next_sync(rig: Rig) -> None:
    path = rig.mount / "file"
    write_at(path, 0, b"before", sync=True)
    write_at(path, 0, b"after!")
    rig.fail(sync="EIO")
    with pytest.raises(OSError):
        write_at(path, 6, b"", sync=True)
    rig.fail()

    write_at(path, 0, path.read_bytes(), sync=True)
    rig.cut(seed=1, mode="lose")

    assert path.read_bytes() == b"after!"


def test_a_failed_write_writes_nothing(rig: Rig) -> None:
    path = rig.mount / "file"
    write_at(path, 0, b"kept", sync=True)
    rig.fail(write="ENOSPC")
    with pytest.raises(OSError) as failed:
        write_at(path, 4, b" more")
    assert failed.value.errno == errno.ENOSPC
    rig.fail()

    assert path.read_bytes() == b"kept"
