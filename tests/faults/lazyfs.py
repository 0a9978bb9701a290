"""A filesystem that forgets what was not synced: the power-cut rig's disk (FUSE, in memory).

Modelled on Jepsen's LazyFS. Every file keeps two contents: what reads see (every write applied at
once, as a page cache would) and what a power cut would leave (the writes up to the file's last
successful ``fsync`` or ``fdatasync``). Between the two lie the file's *pending* writes, in order. A
**cut** (a command on the control socket, sent after every process using the files was killed) decides,
file by file with a seeded choice, what of the pending writes reached the platter:

- ``lose``: none of them;
- ``keep``: all of them;
- ``torn``: a prefix of them, the last one torn at a page boundary (4,096 bytes of the file).

then makes what reads see equal to what survived. Every process's syncs count, since they all reach
this one filesystem: the server's, and its sync helper process's.

Metadata (create, rename, unlink) is durable at once: only file contents are at stake, as they are
for SQLite, which never renames and which syncs its files' contents.

Faults can also be injected: a write that fails (``ENOSPC``, ``EIO``) writes nothing; a sync that
fails *forgets* its file's pending writes, as Linux does with the pages of a failed writeback (it marks
them clean): reads still see them, no later sync makes them durable, and a cut drops them whatever its
mode. Only writing the bytes again puts them back on the way to the disk.

Run as ``python -m tests.faults.lazyfs MOUNTPOINT CONTROL_SOCKET``; ``tests/faults/rig.py`` starts it
and speaks its control protocol (one JSON object a line each way).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import random
import stat
import sys
import time
from typing import Any

import attrs
import pyfuse3
import trio

PAGE = 4096
MODES = ("lose", "keep", "torn")
_FAULTS = {"ENOSPC": errno.ENOSPC, "EIO": errno.EIO}


@attrs.define
class Pending:
    """A write not yet synced: ``data`` at ``offset``, or (``data`` None) a truncation to ``offset``."""

    offset: int
    data: bytes | None


@attrs.define
class Node:
    """A file or a directory."""

    inode: int
    mode: int
    data: bytearray = attrs.field(factory=bytearray)  # what reads see
    durable: bytearray = attrs.field(factory=bytearray)  # what a power cut leaves, but for pending
    pending: list[Pending] = attrs.field(factory=list)
    children: dict[bytes, int] = attrs.field(factory=dict)  # directories only
    links: int = 1
    opened: int = 0

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)


def apply(target: bytearray, write: Pending) -> None:
    if write.data is None:
        del target[write.offset :]
        target.extend(bytes(max(0, write.offset - len(target))))
        return
    end = write.offset + len(write.data)
    if len(target) < write.offset:
        target.extend(bytes(write.offset - len(target)))
    target[write.offset : end] = write.data


def torn(write: Pending, rng: random.Random) -> Pending | None:
    """The part of ``write`` before a page boundary chosen at random (None: none of it)."""
    if write.data is None:
        return None
    first_page = write.offset // PAGE
    last_page = (write.offset + len(write.data) - 1) // PAGE
    boundary = (rng.randint(first_page, last_page + 1)) * PAGE
    kept = max(0, min(len(write.data), boundary - write.offset))
    return Pending(write.offset, write.data[:kept]) if kept else None


def survivors(node: Node, mode: str, rng: random.Random) -> list[Pending]:
    """What of ``node``'s pending writes a cut in ``mode`` leaves on the disk."""
    if mode == "lose":
        return []
    if mode == "keep":
        return list(node.pending)
    count = rng.randint(0, len(node.pending) - 1)
    kept = node.pending[:count]
    part = torn(node.pending[count], rng)
    return [*kept, part] if part is not None else kept


class LazyFS(pyfuse3.Operations):
    """The filesystem: nodes in memory, the control commands, and counts of what happened."""

    def __init__(self) -> None:
        super().__init__()
        root = Node(inode=pyfuse3.ROOT_INODE, mode=stat.S_IFDIR | 0o755, links=2)
        self.nodes: dict[int, Node] = {root.inode: root}
        self.next_inode = root.inode + 1
        self.write_fault: int | None = None
        self.sync_fault: int | None = None
        self.counts = {"writes": 0, "syncs": 0, "failed_writes": 0, "failed_syncs": 0, "cuts": 0}

    # The control commands.

    def command(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if op == "cut":
            return {"files": self.cut(random.Random(request["seed"]), request.get("mode"))}
        if op == "fail":
            self.write_fault = _FAULTS.get(request.get("write") or "")
            self.sync_fault = _FAULTS.get(request.get("sync") or "")
            return {}
        if op == "counts":
            return dict(self.counts)
        if op == "pending":
            return {
                "files": {
                    name: len(self.nodes[inode].pending)
                    for name, inode in self._names()
                    if self.nodes[inode].pending
                }
            }
        raise ValueError(f"unknown op {op!r}")

    def cut(self, rng: random.Random, mode: str | None) -> dict[str, str]:
        """The power cut: each file with pending writes keeps what ``mode`` (else a seeded one) says."""
        self.counts["cuts"] += 1
        report = {}
        names = {
            inode: name.decode(errors="replace")
            for d in self.nodes.values()
            for name, inode in d.children.items()
        }
        for node in self.nodes.values():
            if node.is_dir:
                continue
            if node.pending:
                chosen = mode or rng.choice(MODES)
                kept = survivors(node, chosen, rng)
                for write in kept:
                    apply(node.durable, write)
                report[names.get(node.inode, str(node.inode))] = (
                    f"{chosen}: {len(kept)} of {len(node.pending)} writes"
                )
                node.pending.clear()
            node.data = bytearray(node.durable)
            try:
                pyfuse3.invalidate_inode(node.inode)
            except OSError:
                pass  # the kernel no longer knows the inode: nothing of it is cached
        return report

    def _names(self) -> list[tuple[str, int]]:
        return [
            (name.decode(errors="replace"), inode)
            for directory in self.nodes.values()
            for name, inode in directory.children.items()
            if inode in self.nodes
        ]

    # Files.

    def _entry(self, node: Node) -> pyfuse3.EntryAttributes:
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = node.inode
        entry.st_mode = node.mode
        entry.st_nlink = node.links
        entry.st_uid = os.getuid()
        entry.st_gid = os.getgid()
        entry.st_size = len(node.data)
        entry.st_blksize = PAGE
        entry.st_blocks = (len(node.data) + 511) // 512
        now = time.time_ns()
        entry.st_atime_ns = entry.st_mtime_ns = entry.st_ctime_ns = now
        # Nothing cached by the kernel: after a cut, the next look must see what survived.
        entry.attr_timeout = 0
        entry.entry_timeout = 0
        return entry

    def _node(self, inode: int) -> Node:
        node = self.nodes.get(inode)
        if node is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return node

    def _child(self, parent: int, name: bytes) -> Node:
        inode = self._node(parent).children.get(name)
        if inode is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self.nodes[inode]

    async def lookup(self, parent_inode: int, name: bytes, ctx: Any = None) -> pyfuse3.EntryAttributes:
        if name == b".":
            return self._entry(self._node(parent_inode))
        return self._entry(self._child(parent_inode, name))

    async def getattr(self, inode: int, ctx: Any = None) -> pyfuse3.EntryAttributes:
        return self._entry(self._node(inode))

    async def setattr(self, inode: int, attr: Any, fields: Any, fh: Any, ctx: Any) -> pyfuse3.EntryAttributes:
        node = self._node(inode)
        if fields.update_size:
            self._change(node, Pending(attr.st_size, None))
        if fields.update_mode:
            node.mode = (node.mode & ~0o7777) | (attr.st_mode & 0o7777)
        return self._entry(node)

    async def opendir(self, inode: int, ctx: Any) -> int:
        return inode

    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        names = sorted(self._node(fh).children.items())
        for index, (name, inode) in enumerate(names[start_id:], start=start_id + 1):
            if not pyfuse3.readdir_reply(token, name, self._entry(self.nodes[inode]), index):
                return

    async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx: Any) -> pyfuse3.EntryAttributes:
        return self._entry(self._add(parent_inode, name, stat.S_IFDIR | (mode & 0o7777)))

    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: Any) -> Any:
        node = self._add(parent_inode, name, stat.S_IFREG | (mode & 0o7777))
        node.opened += 1
        return pyfuse3.FileInfo(fh=node.inode), self._entry(node)

    def _add(self, parent: int, name: bytes, mode: int) -> Node:
        directory = self._node(parent)
        if name in directory.children:
            raise pyfuse3.FUSEError(errno.EEXIST)
        node = Node(inode=self.next_inode, mode=mode, links=2 if stat.S_ISDIR(mode) else 1)
        self.next_inode += 1
        self.nodes[node.inode] = node
        directory.children[name] = node.inode
        return node

    async def unlink(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        node = self._child(parent_inode, name)
        del self._node(parent_inode).children[name]
        node.links = 0
        self._forget_if_unused(node)

    async def rmdir(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        node = self._child(parent_inode, name)
        if node.children:
            raise pyfuse3.FUSEError(errno.ENOTEMPTY)
        del self._node(parent_inode).children[name]
        del self.nodes[node.inode]

    async def rename(
        self, parent_old: int, name_old: bytes, parent_new: int, name_new: bytes, flags: int, ctx: Any
    ) -> None:
        node = self._child(parent_old, name_old)
        replaced = self._node(parent_new).children.get(name_new)
        del self._node(parent_old).children[name_old]
        self._node(parent_new).children[name_new] = node.inode
        if replaced is not None and replaced != node.inode:
            self.nodes[replaced].links = 0
            self._forget_if_unused(self.nodes[replaced])

    def _forget_if_unused(self, node: Node) -> None:
        if node.links == 0 and node.opened == 0:
            self.nodes.pop(node.inode, None)

    async def open(self, inode: int, flags: int, ctx: Any) -> pyfuse3.FileInfo:
        node = self._node(inode)
        node.opened += 1
        if flags & os.O_TRUNC:
            self._change(node, Pending(0, None))
        # keep_cache off: every open drops the kernel's cached pages of the file.
        return pyfuse3.FileInfo(fh=inode, keep_cache=False)

    async def release(self, fh: int) -> None:
        node = self.nodes.get(fh)
        if node is not None:
            node.opened -= 1
            self._forget_if_unused(node)

    async def flush(self, fh: int) -> None:
        pass  # a close is not a sync

    async def read(self, fh: int, off: int, size: int) -> bytes:
        return bytes(self._node(fh).data[off : off + size])

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        if self.write_fault is not None:
            self.counts["failed_writes"] += 1
            raise pyfuse3.FUSEError(self.write_fault)
        self._change(self._node(fh), Pending(off, bytes(buf)))
        self.counts["writes"] += 1
        return len(buf)

    def _change(self, node: Node, write: Pending) -> None:
        apply(node.data, write)
        node.pending.append(write)

    async def fsync(self, fh: int, datasync: bool) -> None:
        if self.sync_fault is not None:
            self.counts["failed_syncs"] += 1
            self._node(fh).pending.clear()  # the kernel's pages are clean now: never written back
            raise pyfuse3.FUSEError(self.sync_fault)
        node = self._node(fh)
        for write in node.pending:
            apply(node.durable, write)
        node.pending.clear()
        self.counts["syncs"] += 1

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        pass  # metadata is durable at once

    async def statfs(self, ctx: Any) -> pyfuse3.StatvfsData:
        data = pyfuse3.StatvfsData()
        data.f_bsize = data.f_frsize = PAGE
        data.f_blocks = data.f_bfree = data.f_bavail = 1 << 20
        data.f_files = data.f_ffree = data.f_favail = 1 << 16
        data.f_namemax = 255
        return data


async def serve_control(fs: LazyFS, path: str) -> None:
    """Answer control commands, one JSON line each, on the Unix socket ``path``, until cancelled."""
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await listener.bind(path)
    listener.listen()
    await trio.serve_listeners(functools.partial(_converse, fs), [trio.SocketListener(listener)])


async def _converse(fs: LazyFS, stream: trio.SocketStream) -> None:
    buffer = b""
    async with stream:
        while True:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                if request["op"] == "exit":
                    await stream.send_all(b"{}\n")
                    pyfuse3.terminate()
                    return
                try:
                    answer = fs.command(request)
                except (KeyError, ValueError) as error:
                    answer = {"error": str(error)}
                await stream.send_all(json.dumps(answer).encode() + b"\n")


async def run(fs: LazyFS, control: str) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_control, fs, control)
        nursery.start_soon(_end_with_parent, os.getppid())
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


async def _end_with_parent(parent: int) -> None:
    """Unmount when the process that mounted us is gone (killed before it could unmount)."""
    while True:
        if os.getppid() != parent:  # adopted: the parent died
            pyfuse3.terminate()
            return
        await trio.sleep(0.5)


def main() -> None:
    mountpoint, control = sys.argv[1], sys.argv[2]
    fs = LazyFS()
    options = set(pyfuse3.default_options)
    options.add("fsname=lazyfs")
    options.discard("default_permissions")
    pyfuse3.init(fs, mountpoint, options)
    try:
        trio.run(run, fs, control)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    main()
