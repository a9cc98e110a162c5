"""The FUSE side of the layer: a passthrough filesystem over the backing directory (pyfuse3's
low-level, inode-based API) that tells the durability model of each change before making it.

Reads, writes and namespace changes go straight to the backing directory, so the broker sees
its own writes at once (as it would through a page cache); the model keeps what a power loss
must restore. The kernel may cache pages, attributes and names (writes are written through,
never cached: no writeback cache), because nothing but the layer changes the backing
directory; after a power loss the layer invalidates what the kernel holds.

Every handler runs to its end without yielding, so a power loss never sees half of one, except
an fsync (or a synchronous write) when the layer syncs in worker threads (`SYNC_MODES`):
"inline" (the default) calls fsync in the event loop, which holds every other request of this
mount until the disk answers, as one thread; "thread" lets other requests go on meanwhile, at
the price of a thread hand-over (on a loaded 2-core machine it tripled the daemon's CPU per
fsync, about 350 us inline against 800-1000 us in a thread; bench/lazyfs.py). A sync that a
power loss overtook commits nothing.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

import pyfuse3
import trio

from clusters.lazyfs.journal import TRASH, Entry, Trash
from clusters.lazyfs.model import Clock, Durability, Metadata
from clusters.lazyfs.report import DroppedReport
from clusters.lazyfs.tree import ROOT, Key, Link, Missing, Tree, key_of

log = logging.getLogger(__name__)

TIMEOUT = 1.0  # seconds the kernel may keep attributes and names (a power loss invalidates both)
# Open flags the layer handles itself instead of handing them to the backing file: the kernel
# gives every write its offset (O_APPEND), truncation goes through the model (O_TRUNC), and a
# synchronous write is synced by the layer (O_SYNC, O_DSYNC).
OWN_FLAGS = (os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_APPEND | os.O_SYNC | os.O_DSYNC
             | os.O_DIRECT | os.O_NOCTTY)
STAT_FIELDS = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_rdev", "st_size", "st_blksize",
               "st_blocks", "st_atime_ns", "st_mtime_ns", "st_ctime_ns")
STATVFS_FIELDS = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                  "f_ffree", "f_favail", "f_namemax")

Handler = TypeVar("Handler", bound=Callable[..., Awaitable[Any]])
SyncMode = Literal["inline", "thread"]
SYNC_MODES: tuple[SyncMode, ...] = ("inline", "thread")


def translated(handler: Handler) -> Handler:
    """Takes a request handler. Returns it running the model's due ticks first (writeback, the
    periodic commit), and answering an OSError with its errno, a name the table lacks with
    ENOENT, and anything unforeseen with EIO (logged), so the daemon never stops."""
    @functools.wraps(handler)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            if isinstance(args[0], LazyOps):
                args[0].model.catch_up()
            return await handler(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except Missing as exc:
            raise pyfuse3.FUSEError(exc.errno) from None
        except OSError as exc:
            raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None
        except Exception:
            log.exception("%s failed", handler.__name__)
            raise pyfuse3.FUSEError(errno.EIO) from None
    return cast(Handler, wrapper)


def attributes(ino: int, st: os.stat_result) -> pyfuse3.EntryAttributes:
    """Takes an inode number and the backing file's stat. Returns them as FUSE attributes."""
    attrs = pyfuse3.EntryAttributes()
    attrs.st_ino = cast(pyfuse3.InodeT, ino)
    attrs.entry_timeout = attrs.attr_timeout = TIMEOUT
    for name in STAT_FIELDS:
        setattr(attrs, name, getattr(st, name))
    return attrs


def _lstat(path: bytes) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _check_replace(old: os.stat_result, new: os.stat_result, new_path: bytes) -> None:
    """Raises the errno rename(2) gives when `old` may not replace `new`."""
    if stat.S_ISDIR(new.st_mode) and not stat.S_ISDIR(old.st_mode):
        raise pyfuse3.FUSEError(errno.EISDIR)
    if stat.S_ISDIR(old.st_mode) and not stat.S_ISDIR(new.st_mode):
        raise pyfuse3.FUSEError(errno.ENOTDIR)
    if stat.S_ISDIR(new.st_mode) and os.listdir(new_path):
        raise pyfuse3.FUSEError(errno.ENOTEMPTY)


@dataclass
class Handle:
    """An open file: the backing descriptor (also the FUSE file handle), its inode and backing
    identity, and whether each write is synced as it is made (O_SYNC, O_DSYNC)."""

    fd: int
    ino: int
    key: Key
    sync: bool


@dataclass
class Listing:
    """An open directory, and its names as listed when the listing began."""

    ino: int
    names: list[bytes] | None = None


class LazyOps(pyfuse3.Operations):
    """Takes the backing directory (bytes), the metadata model, where fsync runs, whether
    ext4's auto_da_alloc is modelled, the writeback expiry (None: none) and the model's clock
    (model.Durability). The filesystem's handlers."""

    supports_dot_lookup = False
    enable_writeback_cache = False  # every write must reach the layer before the call returns

    def __init__(self, backing: bytes, metadata: Metadata, sync: SyncMode = "inline",
                 auto_da_alloc: bool = True, writeback_expire_s: float | None = None,
                 clock: Clock = time.monotonic) -> None:
        super().__init__()
        self.sync_mode = sync
        self.tree = Tree(backing)
        self.model = Durability(self.tree, Trash(backing), metadata, auto_da_alloc,
                                writeback_expire_s, clock)
        self.handles: dict[int, Handle] = {}
        self.listings: dict[int, Listing] = {}
        self._next_listing = 0

    # -- the power loss and the end ---------------------------------------------------------

    def power_loss(self) -> tuple[DroppedReport, list[int], list[Link]]:
        """Drops every unsynced change. Returns what was dropped, and the inodes and names
        whose kernel caches `invalidate` must then clear (outside the event loop)."""
        report, names = self.model.power_loss()
        return report, self.tree.held(), names

    @staticmethod
    def invalidate(inodes: list[int], names: list[Link]) -> None:
        """Takes inodes and names. Makes the kernel forget its pages, attributes and entries for
        them. Blocks until the kernel is done: run it in a thread."""
        for ino in inodes:
            with contextlib.suppress(OSError):  # the kernel no longer holds it
                pyfuse3.invalidate_inode(cast(pyfuse3.InodeT, ino))
        for parent, name in names:
            with contextlib.suppress(OSError):
                pyfuse3.invalidate_entry(cast(pyfuse3.InodeT, parent),
                                         cast(pyfuse3.FileNameT, name))

    def close(self) -> None:
        """Closes what the layer holds and removes its trash (call after a power loss)."""
        for handle in self.handles.values():
            os.close(handle.fd)
        self.handles = {}
        self.model.close()
        self.model.trash.close()

    # -- names ----------------------------------------------------------------------------

    def _name(self, parent: int, name: bytes) -> bytes:
        """Takes an entry to make, remove or rename. Returns its backing path; the trash's own
        name is never the broker's."""
        if parent == ROOT and name == TRASH:
            raise pyfuse3.FUSEError(errno.EPERM)
        return self.tree.child(parent, name)

    def _rel(self, parent: int, name: bytes) -> str:
        return os.fsdecode(os.path.relpath(self.tree.child(parent, name), self.tree.backing))

    def _key(self, ino: int) -> Key:
        node = self.tree.nodes.get(ino)
        if node is None:
            raise Missing()
        return node.key

    def _stat(self, ino: int) -> os.stat_result:
        try:
            return os.lstat(self.tree.path(ino))
        except Missing:  # unlinked while open: its descriptor still knows it
            for handle in self.handles.values():
                if handle.ino == ino:
                    return os.fstat(handle.fd)
            raise

    def _made(self, parent: int, name: bytes, path: bytes,
              ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        os.chown(path, ctx.uid, ctx.gid, follow_symlinks=False)
        st = os.lstat(path)
        ino = self.tree.found(parent, name, st)
        rel = self._rel(parent, name)
        self.model.noted(Entry("create", key_of(st), parent, name, rel, f"create {rel}"))
        return attributes(ino, st)

    @translated
    async def lookup(self, parent_inode: int, name: bytes,
                     ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        if parent_inode == ROOT and name == TRASH:
            raise pyfuse3.FUSEError(errno.ENOENT)
        st = os.lstat(self.tree.child(parent_inode, name))
        return attributes(self.tree.found(parent_inode, name, st), st)

    async def forget(self, inode_list: Any) -> None:
        for ino, count in inode_list:
            node = self.tree.nodes.get(ino)
            self.tree.forget(ino, count, keep=node is not None and self.model.holds(node.key))

    @translated
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return attributes(inode, self._stat(inode))

    @translated
    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        return os.readlink(self.tree.path(inode))

    @translated
    async def mknod(self, parent_inode: int, name: bytes, mode: int, rdev: int,
                    ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        path = self._name(parent_inode, name)
        os.mknod(path, mode, rdev)
        return self._made(parent_inode, name, path, ctx)

    @translated
    async def mkdir(self, parent_inode: int, name: bytes, mode: int,
                    ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        path = self._name(parent_inode, name)
        os.mkdir(path, mode)
        return self._made(parent_inode, name, path, ctx)

    @translated
    async def symlink(self, parent_inode: int, name: bytes, target: bytes,
                      ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        path = self._name(parent_inode, name)
        os.symlink(target, path)
        return self._made(parent_inode, name, path, ctx)

    @translated
    async def link(self, inode: int, new_parent_inode: int, new_name: bytes,
                   ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        path = self._name(new_parent_inode, new_name)
        os.link(self.tree.path(inode), path, follow_symlinks=False)
        st = os.lstat(path)
        ino = self.tree.found(new_parent_inode, new_name, st)
        rel = self._rel(new_parent_inode, new_name)
        self.model.noted(Entry("link", key_of(st), new_parent_inode, new_name, rel,
                               f"link {rel}"))
        return attributes(ino, st)

    @translated
    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        path = self._name(parent_inode, name)
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            raise pyfuse3.FUSEError(errno.EISDIR)
        self._remove(parent_inode, name, path, st)

    @translated
    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        path = self._name(parent_inode, name)
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        if os.listdir(path):
            raise pyfuse3.FUSEError(errno.ENOTEMPTY)
        self._remove(parent_inode, name, path, st)

    def _remove(self, parent: int, name: bytes, path: bytes, st: os.stat_result) -> None:
        rel = self._rel(parent, name)
        trash = self.model.trash.put(path)
        self.tree.unlink(key_of(st), parent, name)
        self.model.noted(Entry("remove", key_of(st), parent, name, rel, f"remove {rel}",
                               trash=trash))

    @translated
    async def rename(self, parent_inode_old: int, name_old: bytes, parent_inode_new: int,
                     name_new: bytes, flags: int, ctx: pyfuse3.RequestContext) -> None:
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise pyfuse3.FUSEError(errno.EINVAL)
        old = self._name(parent_inode_old, name_old)
        new = self._name(parent_inode_new, name_new)
        st_old, st_new = os.lstat(old), _lstat(new)
        if st_new is not None:
            if flags & pyfuse3.RENAME_NOREPLACE:
                raise pyfuse3.FUSEError(errno.EEXIST)
            if key_of(st_new) == key_of(st_old):
                return
            _check_replace(st_old, st_new, new)
        self._rename((parent_inode_old, name_old), (parent_inode_new, name_new), st_old, st_new)

    def _rename(self, source: Link, target: Link, st_old: os.stat_result,
                st_new: os.stat_result | None) -> None:
        old, new = self.tree.child(*source), self.tree.child(*target)
        rel_old, rel_new = self._rel(*source), self._rel(*target)
        trash = None if st_new is None else self.model.trash.put(new)
        try:
            os.rename(old, new)
        except OSError:
            if trash is not None:
                os.rename(trash, new)
            raise
        key = key_of(st_old)
        self.tree.unlink(key, *source)
        self.tree.link(key, *target)
        replaced = None if st_new is None else key_of(st_new)
        if replaced is not None:
            self.tree.unlink(replaced, *target)
        self.model.noted(Entry("rename", key, *source, rel_old, f"rename {rel_old} -> {rel_new}",
                               *target, trash=trash, replaced=replaced))
        if replaced is not None and stat.S_ISREG(st_old.st_mode):
            self.model.renamed_over(key)

    @translated
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        self.tree.path(inode)
        self._next_listing += 1
        self.listings[self._next_listing] = Listing(inode)
        return self._next_listing

    @translated
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        listing = self.listings[fh]
        path = self.tree.path(listing.ino)
        if listing.names is None or start_id == 0:
            listing.names = sorted(set(os.listdir(path)) - ({TRASH} if listing.ino == ROOT
                                                             else set()))
        for index in range(start_id, len(listing.names)):
            name = listing.names[index]
            st = _lstat(os.path.join(path, name))
            if st is None:
                continue
            ino = self.tree.ino(key_of(st))
            if not pyfuse3.readdir_reply(token, cast(pyfuse3.FileNameT, name),
                                         attributes(ino, st), index + 1):
                return
            self.tree.found(listing.ino, name, st)

    @translated
    async def releasedir(self, fh: int) -> None:
        self.listings.pop(fh, None)

    @translated
    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        ino = self.listings[fh].ino
        self.model.dir_sync_asked(ino)
        if not self.model.dir_pending(ino):
            return
        epoch, upto = self.model.epoch, self.model.journal.seq
        fd = os.open(self.tree.path(ino), os.O_RDONLY | os.O_DIRECTORY)
        try:
            await self._fsync(os.fsync, fd)
        finally:
            os.close(fd)
        if self.model.epoch == epoch:
            self.model.dir_synced(ino, upto)

    @translated
    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        found = os.statvfs(self.tree.backing)
        data = pyfuse3.StatvfsData()
        for name in STATVFS_FIELDS:
            setattr(data, name, getattr(found, name))
        return data

    # -- files ----------------------------------------------------------------------------

    @translated
    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int,
                     ctx: pyfuse3.RequestContext) -> tuple[pyfuse3.FileInfo,
                                                           pyfuse3.EntryAttributes]:
        path = self._name(parent_inode, name)
        fd = os.open(path, (flags & ~OWN_FLAGS) | os.O_CREAT | os.O_EXCL, mode)
        try:
            attrs = self._made(parent_inode, name, path, ctx)
        except BaseException:
            os.close(fd)
            raise
        return self._opened(fd, attrs.st_ino, flags), attrs

    @translated
    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        path = self.tree.path(inode)
        fd = os.open(path, flags & ~OWN_FLAGS)
        info = self._opened(fd, inode, flags)
        if flags & os.O_TRUNC:
            self._truncate(inode, fd if flags & os.O_ACCMODE else path, 0)
        return info

    def _opened(self, fd: int, ino: int, flags: int) -> pyfuse3.FileInfo:
        self.handles[fd] = Handle(fd, ino, self._key(ino), bool(flags & os.O_DSYNC))
        return pyfuse3.FileInfo(fh=cast(pyfuse3.FileHandleT, fd), keep_cache=True)

    @translated
    async def setattr(self, inode: int, attr: pyfuse3.EntryAttributes,
                      fields: pyfuse3.SetattrFields, fh: int | None,
                      ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        target: int | bytes = self.tree.path(inode) if fh is None else fh
        if fields.update_size:
            self._truncate(inode, target, attr.st_size)
        if fields.update_mode:
            os.chmod(target, stat.S_IMODE(attr.st_mode))
        if fields.update_uid or fields.update_gid:
            os.chown(target, attr.st_uid if fields.update_uid else -1,
                     attr.st_gid if fields.update_gid else -1,
                     follow_symlinks=isinstance(target, int))
        if fields.update_atime or fields.update_mtime:
            st = self._stat(inode)
            times = (attr.st_atime_ns if fields.update_atime else st.st_atime_ns,
                     attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns)
            os.utime(target, ns=times, follow_symlinks=isinstance(target, int))
        return attributes(inode, self._stat(inode))

    def _truncate(self, inode: int, target: int | bytes, size: int) -> None:
        fd = target if isinstance(target, int) else os.open(target, os.O_WRONLY)
        try:
            self.model.before_truncate(self._key(inode), fd, size)
            os.ftruncate(fd, size)
        finally:
            if fd is not target:
                os.close(fd)

    @translated
    async def read(self, fh: int, off: int, size: int) -> bytes:
        return os.pread(fh, size, off)

    @translated
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        handle = self.handles[fh]
        self.model.before_write(handle.key, fh, off, len(buf))
        written = os.pwrite(fh, buf, off)
        if handle.sync:
            await self._sync_file(handle, datasync=True)
        return written

    @translated
    async def flush(self, fh: int) -> None:
        # Every close(2) of a descriptor (release comes later, and asynchronously).
        handle = self.handles.get(fh)
        if handle is not None:
            self.model.closed(handle.key)

    @translated
    async def release(self, fh: int) -> None:
        if self.handles.pop(fh, None) is not None:
            os.close(fh)

    @translated
    async def fsync(self, fh: int, datasync: bool) -> None:
        await self._sync_file(self.handles[fh], datasync)

    async def _sync_file(self, handle: Handle, datasync: bool) -> None:
        self.model.sync_asked(handle.key)
        if not self.model.file_pending(handle.key):
            return
        epoch, upto = self.model.epoch, self.model.journal.seq
        await self._fsync(os.fdatasync if datasync else os.fsync, handle.fd)
        if self.model.epoch == epoch:
            self.model.file_synced(handle.key, upto)

    async def _fsync(self, sync: Callable[[int], None], fd: int) -> None:
        if self.sync_mode == "thread":
            await trio.to_thread.run_sync(sync, fd)
        else:
            sync(fd)
