"""The namespace journal: creations, removals, renames and links not yet durable, in order, and
how to take each back after a power loss.

Every namespace change is made on the backing directory at once (the broker sees it, as it
would in a page cache), and noted here. A removed file, or a file a rename replaces, is moved
into the trash (a hidden directory of the backing filesystem) instead of being deleted, so that
taking the removal back restores the very same file. Committing an entry (its directory, or
under the ext4 model any file, was fsynced) deletes what it put in the trash.

Taking entries back runs newest first; each undo checks that the name still refers to the file
it expects, so that an entry committed after an older one that is not (the strict model commits
one directory's entries only) is never undone by accident: that name keeps its durable state.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace

from clusters.lazyfs.tree import Key, Missing, Tree, key_of

log = logging.getLogger(__name__)

TRASH = b".lazyfs-trash"


class Trash:
    """Takes the backing directory. The hidden directory holding removed files until their
    removal is durable; emptied when made (what a crashed daemon left was removed for good)."""

    def __init__(self, backing: bytes) -> None:
        self.root = os.path.join(backing, TRASH)
        if os.path.lexists(self.root):
            log.warning("removing %s left by an earlier daemon", os.fsdecode(self.root))
            _delete(self.root)
        os.mkdir(self.root, 0o700)
        self._count = 0

    def put(self, path: bytes) -> bytes:
        """Takes a backing path. Moves it into the trash and returns where it now lies."""
        self._count += 1
        place = os.path.join(self.root, b"%d" % self._count)
        os.rename(path, place)
        return place

    def close(self) -> None:
        """Removes the trash directory (and anything left in it)."""
        _delete(self.root)


def _delete(path: bytes) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _key_at(path: bytes) -> Key | None:
    try:
        return key_of(os.lstat(path))
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class Entry:
    """One namespace change: what (`kind`), which file (`key`), where it was or went, and what of
    it lies in the trash. `text` describes it as the broker saw it."""

    kind: str  # "create", "remove", "rename" or "link"
    key: Key
    parent: int
    name: bytes
    path: str  # the name under the mount's root when the change was made
    text: str
    new_parent: int = 0
    new_name: bytes = b""
    trash: bytes | None = None  # the removed file, or the file a rename replaced
    replaced: Key | None = None
    seq: int = 0  # its place in the journal, set by `Journal.add`

    def dirs(self) -> set[int]:
        """Returns the directories whose listing this entry changes."""
        return {self.parent, self.new_parent} - {0}


@dataclass(frozen=True)
class Vanished:
    """A file (not a directory) whose creation a power loss took back: its path and size at the
    fault."""

    key: Key
    path: str
    size: int


def _undo_create(entry: Entry, tree: Tree) -> Vanished | None:
    path = tree.child(entry.parent, entry.name)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if key_of(st) != entry.key:
        return None
    _delete(path)
    tree.unlink(entry.key, entry.parent, entry.name)
    tree.gone(entry.key)
    if stat.S_ISDIR(st.st_mode):  # a directory is a namespace change, not a file dropped
        return None
    return Vanished(entry.key, entry.path, st.st_size)


def _restore(trash: bytes, tree: Tree, key: Key, parent: int, name: bytes) -> None:
    path = tree.child(parent, name)
    if os.path.lexists(path):  # a later, durable change took the name: it stays
        _delete(trash)
        return
    os.rename(trash, path)
    tree.link(key, parent, name)


def _undo_remove(entry: Entry, tree: Tree) -> None:
    assert entry.trash is not None
    _restore(entry.trash, tree, entry.key, entry.parent, entry.name)


def _undo_rename(entry: Entry, tree: Tree) -> None:
    new = tree.child(entry.new_parent, entry.new_name)
    old = tree.child(entry.parent, entry.name)
    if _key_at(new) == entry.key and not os.path.lexists(old):
        os.rename(new, old)
        tree.unlink(entry.key, entry.new_parent, entry.new_name)
        tree.link(entry.key, entry.parent, entry.name)
    if entry.trash is not None and entry.replaced is not None:
        _restore(entry.trash, tree, entry.replaced, entry.new_parent, entry.new_name)


def _undo_link(entry: Entry, tree: Tree) -> None:
    path = tree.child(entry.parent, entry.name)
    if _key_at(path) == entry.key:
        os.unlink(path)
        tree.unlink(entry.key, entry.parent, entry.name)


UNDO: dict[str, Callable[[Entry, Tree], Vanished | None]] = {
    "create": _undo_create,
    "remove": _undo_remove,
    "rename": _undo_rename,
    "link": _undo_link,
}


class Journal:
    """Takes the inode table. The namespace changes not yet durable, oldest first."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.entries: list[Entry] = []
        self.seq = 0  # the last entry's place

    def add(self, entry: Entry) -> None:
        """Takes a change just made on the backing directory. Notes it as not yet durable."""
        self.seq += 1
        self.entries.append(replace(entry, seq=self.seq))

    def commit(self, directory: int | None, upto: int) -> int:
        """Takes a directory inode (None: every directory) and a place in the journal (`seq` when
        the sync began). Makes durable every entry up to that place that changes that directory.
        Returns how many it committed."""
        def covered(entry: Entry) -> bool:
            return entry.seq <= upto and (directory is None or directory in entry.dirs())

        done = [e for e in self.entries if covered(e)]
        self.entries = [e for e in self.entries if not covered(e)]
        for entry in done:
            self._finish(entry)
        return len(done)

    def _finish(self, entry: Entry) -> None:
        if entry.trash is None:
            return
        st = os.lstat(entry.trash)
        _delete(entry.trash)
        if stat.S_ISDIR(st.st_mode) or st.st_nlink <= 1:
            self.tree.gone(entry.replaced or entry.key)

    def undo(self) -> tuple[list[Entry], list[Vanished]]:
        """Takes every entry back, newest first. Returns the entries taken back (newest first)
        and the files whose creation was taken back."""
        undone: list[Entry] = []
        vanished: list[Vanished] = []
        for entry in reversed(self.entries):
            try:
                gone = UNDO[entry.kind](entry, self.tree)
            except (Missing, OSError) as exc:  # its directory went first: nothing to restore
                log.info("not undone: %s (%s)", entry.text, exc)
                continue
            undone.append(entry)
            if gone is not None:
                vanished.append(gone)
        self.entries = []
        return undone, vanished
