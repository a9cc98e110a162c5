"""The durability model: what is durable, what a sync makes durable, and what a power loss takes.

Data (both models): a file's bytes and size are durable as of its last fsync or fdatasync (or
as the layer found them at mount). A write or truncation since is visible at once and dropped
by a power loss (`record.FileRecord`). A write through a descriptor opened O_SYNC or O_DSYNC is
synced as it is made, as an fsync of the whole file would be.

Namespace (creations, removals, renames, hard links; `journal.Journal`), by `METADATA`:

- "ext4" (the default): ext4 with data=ordered and no periodic commit, the worst case of what a
  RabbitMQ node on ext4 sees. jbd2 commits every metadata change in one ordered journal, and
  an fsync or fdatasync of any file or directory forces that commit: every namespace change
  made before any sync is durable after it. A file's data is not (delayed allocation: another
  file's fsync does not write it), and neither is a truncation (it is modelled as data).
- "strict": POSIX's promise only. A namespace change is durable once a directory it changes is
  fsynced (a rename across directories: either one); fsyncing a file makes its data durable,
  never its name.

Attribute changes (chmod, chown, times) and extended attributes are durable at once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Literal

from clusters.lazyfs.journal import Journal, Trash, Vanished
from clusters.lazyfs.record import FileRecord
from clusters.lazyfs.report import DroppedFile, DroppedReport
from clusters.lazyfs.tree import Key, Link, Tree

log = logging.getLogger(__name__)

Metadata = Literal["ext4", "strict"]
METADATA: tuple[Metadata, ...] = ("ext4", "strict")


class Durability:
    """Takes the inode table, the trash and the metadata model. Holds every unsynced change."""

    def __init__(self, tree: Tree, trash: Trash, metadata: Metadata) -> None:
        self.tree = tree
        self.trash = trash
        self.metadata = metadata
        self.journal = Journal(tree)
        self.records: dict[Key, FileRecord] = {}
        self.epoch = 0  # counts power losses: a sync that began before one commits nothing

    def before_write(self, key: Key, fd: int, offset: int, length: int) -> None:
        """Takes a file, a descriptor of it and a write about to be made. Records the write."""
        self._record(key, fd).before_write(offset, length)

    def before_truncate(self, key: Key, fd: int, size: int) -> None:
        """Takes a file, a descriptor of it and the size it is about to be cut or grown to."""
        self._record(key, fd).before_truncate(size)

    def _record(self, key: Key, fd: int) -> FileRecord:
        record = self.records.get(key)
        if record is None:
            record = self.records[key] = FileRecord.open(fd)
        return record

    def file_pending(self, key: Key) -> bool:
        """Takes a file. Returns whether an fsync of it has anything to make durable."""
        return key in self.records or (self.metadata == "ext4" and bool(self.journal.entries))

    def dir_pending(self, directory: int) -> bool:
        """Takes a directory inode. Returns whether an fsync of it has anything to make durable."""
        if self.metadata == "ext4":
            return bool(self.journal.entries)
        return any(directory in e.dirs() for e in self.journal.entries)

    def file_synced(self, key: Key, upto: int) -> None:
        """Takes a file just fsynced on the backing filesystem and the journal's `seq` when the
        sync began. Makes its changes durable (under ext4, the journal up to there too)."""
        record = self.records.pop(key, None)
        if record is not None:
            record.close()
        if self.metadata == "ext4":
            self.journal.commit(None, upto)

    def dir_synced(self, directory: int, upto: int) -> None:
        """Takes a directory inode just fsynced and the journal's `seq` when the sync began.
        Makes the namespace changes it covers durable."""
        self.journal.commit(None if self.metadata == "ext4" else directory, upto)

    def pending(self) -> dict[str, int]:
        """Returns what a power loss would drop now: files, bytes, namespace changes, and the
        memory the saved durable bytes take."""
        return {"files": len(self.records),
                "bytes": sum(r.written.total() for r in self.records.values()),
                "namespace": len(self.journal.entries),
                "saved_bytes": sum(r.saved_bytes() for r in self.records.values())}

    def power_loss(self) -> tuple[DroppedReport, list[Link]]:
        """Drops every unsynced change: namespace changes newest first, then each file's data.
        Returns what was dropped, and the names whose meaning changed (for the kernel's cache)."""
        self.epoch += 1
        at_fault = {key: self._path(key) for key in self.records}
        undone, vanished = self.journal.undo()
        files = list(self._rolled_back(at_fault, {v.key: v for v in vanished}))
        files += [DroppedFile(v.path, 0, v.size, None) for v in vanished
                  if v.key not in at_fault]
        self.records = {}
        names = [(e.parent, e.name) for e in undone]
        names += [(e.new_parent, e.new_name) for e in undone if e.new_parent]
        report = DroppedReport(tuple(sorted(files, key=lambda f: f.path)),
                               tuple(e.text for e in undone))
        return report, names

    def _rolled_back(self, at_fault: dict[Key, str | None],
                     vanished: dict[Key, Vanished]) -> Iterator[DroppedFile]:
        for key, record in self.records.items():
            try:
                yield from self._roll_back_one(key, record, at_fault[key], vanished.get(key))
            finally:
                record.close()

    def _roll_back_one(self, key: Key, record: FileRecord, path: str | None,
                       vanished: Vanished | None) -> Iterator[DroppedFile]:
        if vanished is not None:
            yield DroppedFile(vanished.path, record.written.total(), vanished.size, None)
            return
        path = path or self._path(key)
        if path is None:  # removed for good (its removal was durable): nothing to restore
            return
        if os.fstat(record.fd).st_nlink == 0:  # its directory's creation was taken back
            yield DroppedFile(path, record.written.total(), os.fstat(record.fd).st_size, None)
            return
        done = record.rollback()
        if done.bytes or done.size_before != done.size_after or record.saved:
            yield DroppedFile(path, done.bytes, done.size_before, done.size_after)

    def _path(self, key: Key) -> str | None:
        ino = self.tree.by_key.get(key)
        return None if ino is None else self.tree.relative(ino)

    def close(self) -> None:
        """Closes every record's descriptor (after a power loss, nothing is left)."""
        for record in self.records.values():
            record.close()
        self.records = {}
        log.debug("durability model closed")
