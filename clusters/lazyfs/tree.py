"""The layer's inode table: FUSE inode numbers for the backing directory's files, and the names
each is known by, so that a path is rebuilt from its parent's inode after any rename.

A file is known by its backing identity (device, inode); the kernel by a number of ours, so
that one backing tree mounted twice, or holding another filesystem, never collides. A
directory has one name; a file may have several (hard links) or none (unlinked while open).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field

from clusters.lazyfs.errors import LazyFSError

ROOT = 1  # the FUSE root inode (pyfuse3.ROOT_INODE)

Key = tuple[int, int]  # (st_dev, st_ino) of the backing file
Link = tuple[int, bytes]  # (parent inode, name)


class Missing(LazyFSError):
    """An inode or name the table does not know, or that has no name left; errno says which (a
    handler answers the kernel with it)."""

    def __init__(self, code: int = errno.ENOENT) -> None:
        super().__init__(os.strerror(code))
        self.errno = code


def key_of(st: os.stat_result) -> Key:
    """Takes a stat result. Returns the backing identity it names."""
    return (st.st_dev, st.st_ino)


@dataclass
class Node:
    """One inode: its backing identity, its names, and how many lookups the kernel holds."""

    key: Key
    links: set[Link] = field(default_factory=set)
    lookups: int = 0
    directory: bool = False


class Tree:
    """Takes the backing directory (bytes). The inode table over it, root inode included."""

    def __init__(self, backing: bytes) -> None:
        self.backing = backing
        root_key = key_of(os.lstat(backing))
        self.nodes: dict[int, Node] = {ROOT: Node(root_key, lookups=1, directory=True)}
        self.by_key: dict[Key, int] = {root_key: ROOT}
        self._next = ROOT + 1

    def path(self, ino: int) -> bytes:
        """Takes an inode. Returns its backing path (any of its names), or raises Missing."""
        if ino == ROOT:
            return self.backing
        node = self.nodes.get(ino)
        if node is None or not node.links:
            raise Missing()
        parent, name = min(node.links)
        return os.path.join(self.path(parent), name)

    def relative(self, ino: int) -> str | None:
        """Takes an inode. Returns its path under the mount's root, or None if it has no name."""
        try:
            return os.fsdecode(os.path.relpath(self.path(ino), self.backing))
        except Missing:
            return None

    def child(self, parent: int, name: bytes) -> bytes:
        """Takes a directory inode and a name. Returns the backing path of that entry."""
        return os.path.join(self.path(parent), name)

    def ino(self, key: Key) -> int:
        """Takes a backing identity. Returns its inode number, making one if it has none."""
        ino = self.by_key.get(key)
        if ino is None:
            ino, self._next = self._next, self._next + 1
            self.by_key[key] = ino
            self.nodes[ino] = Node(key)
        return ino

    def found(self, parent: int, name: bytes, st: os.stat_result) -> int:
        """Takes an entry the kernel is told of (lookup, create, link, readdir). Returns its
        inode, its name noted and the kernel's lookup counted."""
        ino = self.ino(key_of(st))
        node = self.nodes[ino]
        node.links.add((parent, name))
        node.lookups += 1
        node.directory = stat.S_ISDIR(st.st_mode)
        return ino

    def link(self, key: Key, parent: int, name: bytes) -> None:
        """Takes a backing identity and an entry. Notes that name as one of its names."""
        self.nodes[self.ino(key)].links.add((parent, name))

    def unlink(self, key: Key, parent: int, name: bytes) -> None:
        """Takes a backing identity and an entry. Forgets that name of it."""
        ino = self.by_key.get(key)
        if ino is not None:
            self.nodes[ino].links.discard((parent, name))

    def gone(self, key: Key) -> None:
        """Takes a backing identity whose file no longer exists: its number may be reused."""
        ino = self.by_key.pop(key, None)
        if ino is not None and self.nodes[ino].lookups == 0:
            del self.nodes[ino]

    def forget(self, ino: int, count: int, keep: bool) -> None:
        """Takes an inode, how many lookups the kernel drops, and whether the layer still needs
        it (an undo record). Removes a file's inode nobody holds; directories stay (they name
        their children)."""
        node = self.nodes.get(ino)
        if node is None or ino == ROOT:
            return
        node.lookups = max(0, node.lookups - count)
        if node.lookups == 0 and not keep and not node.directory:
            del self.nodes[ino]
            if self.by_key.get(node.key) == ino:
                del self.by_key[node.key]

    def held(self) -> list[int]:
        """Returns the inodes the kernel holds (to invalidate its caches)."""
        return [ino for ino, node in self.nodes.items() if node.lookups > 0]
