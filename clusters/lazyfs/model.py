"""The durability model: what is durable, what a sync makes durable, and what a power loss takes.

Data (both models): a file's bytes and size are durable as of its last fsync or fdatasync (or
as the layer found them at mount; under "ext4" with writeback, also as of its last writeback
once committed: below). A write or truncation since is visible at once and dropped by a power
loss (`record.FileRecord`). A write through a descriptor opened O_SYNC or O_DSYNC is
synced as it is made, as an fsync of the whole file would be.

Namespace (creations, removals, renames, hard links; `journal.Journal`), by `METADATA`:

- "ext4" (the default): ext4 with data=ordered; its periodic commit and Linux's writeback are
  modelled when writeback is on (below), and without it this is the worst case of what a
  RabbitMQ node on ext4 sees. jbd2 commits every metadata change in one ordered journal, and
  an fsync or fdatasync of any file or directory forces that commit: every namespace change
  made before any sync is durable after it. A file's data is not (delayed allocation: another
  file's fsync does not write it), and neither is a truncation (it is modelled as data).
- "strict": POSIX's promise only. A namespace change is durable once a directory it changes is
  fsynced (a rename across directories: either one); fsyncing a file makes its data durable,
  never its name.

Attribute changes (chmod, chown, times) and extended attributes are durable at once.

A sync of the whole layer (`Durability.sync_all`, the daemon's `sync`: what sync(2) does on
ext4) makes every file's data and every namespace change durable at once, in either model.

`auto_da_alloc` (under "ext4" only; on by default, as ext4 mounts it): ext4's heuristic for
programs that replace a file without fsync. A file truncated to size 0 (ftruncate, or an open
with O_TRUNC) has its data flushed when it is closed, and a file renamed over an existing
file has its data flushed at the rename; in data=ordered mode the journal commit that follows
writes that data before it commits, so the next commit (any fsync, as above, or with writeback
the periodic one) makes the file's data as of the close (or the rename) durable, where without the
heuristic a power loss after that commit leaves it empty or short. What the file is given after
the close or the rename is data as before, durable with its own fsync. Nothing is durable
before that commit: a power loss before it takes back the truncation and the rewrite, or the
rename, as ever. The layer acts when the broker closes the descriptor (FUSE's flush, sent
synchronously at every close(2)); ext4 acts at the last close of the open file, so a program
closing one of several duplicated descriptors sees the flush begin a little early here.

Writeback (`writeback_expire_s`, under "ext4" only; the daemon and `mount` default to 30 s,
Linux's dirty_expire_centisecs; None, `Durability`'s default and the daemon's `off`: none, the
worst case, where an unsynced byte is lost however old it is). Linux writes dirty pages back
in the background: the flusher wakes every 5 s (dirty_writeback_centisecs) and writes every
inode dirty for at least the expiry; under data=ordered with delayed allocation that writeback
allocates the blocks and updates the on-disk size in the running jbd2 transaction, and the
transaction's commit makes it durable.
Modelled on the model's clock (monotonic; injectable), by two timers:
1. ext4's periodic commit (commit=5): jbd2 commits the running transaction 5 s after it began,
   that is after the first change it holds (a namespace change, or data tied to the journal by
   auto_da_alloc or by a writeback) since the last commit; the whole journal, as an fsync
   commits it, and any fsync commits it earlier, as ever.
2. the flusher's pass, every `TICK_S` (5 s) from the mount: every file whose record (its
   unsynced changes since its last sync, writeback or power loss: data and truncations alike)
   was begun at least the expiry before the pass has its data as of the pass tied to the
   journal, as auto_da_alloc ties it (joining, or beginning, the running transaction): durable
   at the next commit, dropped by a power loss before it. Its later writes begin a new record,
   with the time of the first.
So data written at t (its record begun at t) and never fsynced is durable at the first commit
after the first pass at or after t + expiry: that pass plus at most 5 s (exactly 5 s when the
pass begins the transaction), or earlier when anything is fsynced; the expiry is counted per
record as Linux counts it per inode, from its first dirtying. A commit and a pass due at the
same time run commit first. Both are run lazily, in time order, before each request and before
a power loss, on the state as it stood (nothing changes between requests), so they are exact to
the request.

Times (`FileTimes`, on the model's clock): per file, its last write or truncation, its last
fsync or fdatasync (asked, whether or not it had anything to make durable), and when and how its
data last became durable (an fsync, the commit of data tied to the journal by writeback or
auto_da_alloc, or a sync of the whole layer); per directory (by its path under the root), its
last fsync; the journal's last commit. A power loss reports them as ages at the cut (report.Timing) for each file it dropped,
with the age of the oldest write it dropped and, if tied to the journal, when it was tied, and
for each file written since the mount (or the last power loss) that it kept whole.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from clusters.lazyfs.journal import Entry, Journal, Trash, Vanished
from clusters.lazyfs.record import FileRecord
from clusters.lazyfs.report import (
    DroppedFile,
    DroppedReport,
    KeptFile,
    SyncedFile,
    SyncedReport,
    Timing,
)
from clusters.lazyfs.tree import Key, Link, Missing, Tree

log = logging.getLogger(__name__)

Metadata = Literal["ext4", "strict"]
METADATA: tuple[Metadata, ...] = ("ext4", "strict")
WRITEBACK_EXPIRE_S = 30.0  # Linux's dirty_expire_centisecs (3000)
TICK_S = 5.0  # the flusher's interval: Linux's dirty_writeback_centisecs (500)
COMMIT_S = 5.0  # jbd2's commit interval: ext4's commit=5
Clock = Callable[[], float]


def describe(metadata: Metadata, writeback_expire_s: float | None) -> str:
    """Takes the metadata model and the writeback expiry. Returns the model in words, as a
    report names it (e.g. "ext4, writeback 30 s")."""
    if metadata != "ext4":
        return metadata
    if writeback_expire_s is None:
        return "ext4, no writeback"
    return f"ext4, writeback {writeback_expire_s:g} s"


@dataclass
class FileTimes:
    """What the model saw of one file, on its clock (None: not since the mount): its last write
    or truncation, its last fsync or fdatasync, and when and how its data last became durable
    ("fsync", "writeback", "auto_da_alloc", "sync")."""

    last_write: float | None = None
    last_sync: float | None = None
    durable: float | None = None
    durable_by: str = ""


def _directory(path: str) -> str:
    """Takes a path under the root. Returns its directory's, as `Durability.dir_syncs` keys it."""
    return os.path.normpath(os.path.dirname(path) or ".")


class Durability:
    """Takes the inode table, the trash, the metadata model, whether auto_da_alloc is modelled,
    the writeback expiry (None: no writeback) and the clock. Holds every unsynced change."""

    def __init__(self, tree: Tree, trash: Trash, metadata: Metadata,
                 auto_da_alloc: bool = True, writeback_expire_s: float | None = None,
                 clock: Clock = time.monotonic) -> None:
        self.tree = tree
        self.trash = trash
        self.metadata = metadata
        self.auto_da_alloc = auto_da_alloc and metadata == "ext4"
        self.writeback = writeback_expire_s if metadata == "ext4" else None
        self.clock = clock
        self.next_tick = clock() + TICK_S
        self.began: float | None = None  # when the running jbd2 transaction began (commit=5)
        self.journal = Journal(tree)
        self.records: dict[Key, FileRecord] = {}
        # auto_da_alloc: files truncated to 0 since their last close (ext4's
        # EXT4_STATE_DA_ALLOC_CLOSE), and the data the next journal commit makes durable: per
        # file, the journal's seq when it was tied and its records, oldest first (a record per
        # tie: each undoes what came after the one before).
        self.replacing: set[Key] = set()
        self.ordered: dict[Key, tuple[int, list[FileRecord]]] = {}
        self.epoch = 0  # counts power losses: a sync that began before one commits nothing
        # When things happened (module docstring, "Times"), for the power loss's report.
        self.mounted_at = clock()
        self.times: dict[Key, FileTimes] = {}
        self.dir_syncs: dict[str, float] = {}
        self.committed_at: float | None = None
        self.written_since: set[Key] = set()  # files written since the mount or the last loss

    def before_write(self, key: Key, fd: int, offset: int, length: int) -> None:
        """Takes a file, a descriptor of it and a write about to be made. Records the write."""
        self._record(key, fd).before_write(offset, length)
        self._wrote(key)

    def before_truncate(self, key: Key, fd: int, size: int) -> None:
        """Takes a file, a descriptor of it and the size it is about to be cut or grown to."""
        self._record(key, fd).before_truncate(size)
        self._wrote(key)
        if self.auto_da_alloc and size == 0:
            self.replacing.add(key)

    def _wrote(self, key: Key) -> None:
        self._times(key).last_write = self.clock()
        self.written_since.add(key)

    def _times(self, key: Key) -> FileTimes:
        times = self.times.get(key)
        if times is None:
            times = self.times[key] = FileTimes()
        return times

    def sync_asked(self, key: Key) -> None:
        """Takes a file whose fsync or fdatasync (or O_SYNC write) was just asked. Notes when."""
        self._times(key).last_sync = self.clock()

    def dir_sync_asked(self, directory: int) -> None:
        """Takes a directory inode whose fsync was just asked. Notes when, by its path."""
        path = self.tree.relative(directory)
        if path is not None:
            self.dir_syncs[os.path.normpath(path)] = self.clock()

    def closed(self, key: Key) -> None:
        """Takes a file whose descriptor was just closed. Under auto_da_alloc, a file truncated
        to 0 since its last close has its data as of now made durable by the next commit."""
        if key in self.replacing:
            self.replacing.discard(key)
            self._tie(key, self.journal.seq, self.clock(), "auto_da_alloc")

    def renamed_over(self, key: Key) -> None:
        """Takes a regular file just renamed over an existing file (the journal's last entry).
        Under auto_da_alloc, its data as of now is made durable by the commit of that rename."""
        if self.auto_da_alloc:
            self._tie(key, self.journal.seq, self.clock(), "auto_da_alloc")

    def noted(self, entry: Entry) -> None:
        """Takes a namespace change just made. Journals it (the running transaction)."""
        self.journal.add(entry)
        self._join(self.clock())

    def _join(self, at: float) -> None:
        if self.began is None:
            self.began = at

    def _tie(self, key: Key, seq: int, at: float, by: str) -> None:
        record = self.records.pop(key, None)
        if record is not None:
            record.tied_at, record.tied_by = at, by
            _, older = self.ordered.get(key, (seq, []))
            self.ordered[key] = (seq, [*older, record])
            self._join(at)

    def holds(self, key: Key) -> bool:
        """Takes a file. Returns whether the model keeps an undo record of it."""
        return key in self.records or key in self.ordered

    def _record(self, key: Key, fd: int) -> FileRecord:
        record = self.records.get(key)
        if record is None:
            record = self.records[key] = FileRecord.open(fd)
            record.dirtied_at = self.clock()
        return record

    def describe(self) -> str:
        """Returns the model in force in words (e.g. "ext4, writeback 30 s")."""
        return describe(self.metadata, self.writeback)

    def catch_up(self) -> None:
        """Runs the periodic commits and the flusher's passes due by now, oldest first, a commit
        before a pass due at the same time (see the module's docstring). Does nothing without
        writeback."""
        if self.writeback is None:
            return
        now = self.clock()
        while True:
            due = math.inf if self.began is None else self.began + COMMIT_S
            if min(due, self.next_tick) > now:
                return
            if due <= self.next_tick:
                self._commit(self.journal.seq, due)
            else:
                self.next_tick = self._pass(self.next_tick, self.writeback, now)

    def _pass(self, tick: float, expiry: float, now: float) -> float:
        """The flusher's pass at `tick`. Returns when the next one is due."""
        for key, record in list(self.records.items()):
            if record.dirtied_at <= tick - expiry:
                self._tie(key, self.journal.seq, tick, "writeback")
        if self.records:
            return tick + TICK_S
        # Nothing left dirty: the passes until `now` have nothing to do.
        return tick + (math.floor((now - tick) / TICK_S) + 1) * TICK_S

    def file_pending(self, key: Key) -> bool:
        """Takes a file. Returns whether an fsync of it has anything to make durable."""
        return self.holds(key) or (self.metadata == "ext4" and self._commit_pending())

    def dir_pending(self, directory: int) -> bool:
        """Takes a directory inode. Returns whether an fsync of it has anything to make durable."""
        if self.metadata == "ext4":
            return self._commit_pending()
        return any(directory in e.dirs() for e in self.journal.entries)

    def _commit_pending(self) -> bool:
        return bool(self.journal.entries) or bool(self.ordered)

    def file_synced(self, key: Key, upto: int) -> None:
        """Takes a file just fsynced on the backing filesystem and the journal's `seq` when the
        sync began. Makes its changes durable (under ext4, the journal up to there too)."""
        self._data_durable(key, "fsync")
        if self.metadata == "ext4":
            self._commit(upto)

    def _data_durable(self, key: Key, by: str) -> int:
        """Takes a file and what makes its data durable now ("fsync", "sync"). Forgets its undo
        records (its own and those tied to the journal) and notes when. Returns the unsynced
        bytes they held."""
        stack = [*self.ordered.pop(key, (0, []))[1]]
        record = self.records.pop(key, None)
        stack += [record] if record is not None else []
        written = sum(r.written.total() for r in stack)
        for held in stack:
            held.close()
        times = self._times(key)
        times.durable, times.durable_by = self.clock(), by
        return written

    def sync_all(self) -> SyncedReport:
        """As sync(2) on ext4 (the flusher writing back every dirty inode, then a journal
        commit), in either metadata model: makes every file's unsynced data and every namespace
        change durable, after the writeback and commits already due. Returns what it made
        durable; a power loss after it drops only what is changed since. The backing directory
        is not synced to the real disk: the model is the disk."""
        self.catch_up()
        files = [SyncedFile(self._path(key), self._data_durable(key, "sync"))
                 for key in {*self.records, *self.ordered}]
        namespace = tuple(e.text for e in self.journal.entries)
        if files or namespace:
            self._commit(self.journal.seq)
        return SyncedReport(tuple(sorted(files, key=lambda f: (f.path is None, f.path or ""))),
                            namespace, self.describe())

    def dir_synced(self, directory: int, upto: int) -> None:
        """Takes a directory inode just fsynced and the journal's `seq` when the sync began.
        Makes the namespace changes it covers durable."""
        if self.metadata == "ext4":
            self._commit(upto)
        else:
            self.journal.commit(directory, upto)

    def _commit(self, upto: int, at: float | None = None) -> None:
        """The ext4 journal's commit up to `upto`, at `at` (None: now): every namespace change,
        and the data tied to it by auto_da_alloc or writeback."""
        at = self.clock() if at is None else at
        self.committed_at = at
        self.journal.commit(None, upto)
        for key, (seq, stack) in list(self.ordered.items()):
            if seq <= upto:
                del self.ordered[key]
                times = self._times(key)
                times.durable, times.durable_by = at, stack[-1].tied_by
                for record in stack:
                    record.close()
        # What a sync that began earlier left is in the transaction that begins now.
        self.began = self.clock() if self.journal.entries or self.ordered else None

    def pending(self) -> dict[str, int]:
        """Returns what a power loss would drop now: files, bytes, namespace changes, and the
        memory the saved durable bytes take."""
        self.catch_up()
        every = [*self.records.values(), *(r for _, rs in self.ordered.values() for r in rs)]
        return {"files": len(set(self.records) | set(self.ordered)),
                "bytes": sum(r.written.total() for r in every),
                "namespace": len(self.journal.entries),
                "saved_bytes": sum(r.saved_bytes() for r in every)}

    def power_loss(self) -> tuple[DroppedReport, list[Link]]:
        """Drops every unsynced change: namespace changes newest first, then each file's data.
        Returns what was dropped, and the names whose meaning changed (for the kernel's cache)."""
        self.catch_up()
        self.epoch += 1
        now, cut_at = self.clock(), time.time()
        at_fault = {key: self._path(key) for key in {*self.records, *self.ordered}}
        undone, vanished = self.journal.undo()
        kept = self._kept(set(at_fault) | {v.key for v in vanished}, now)
        files = list(self._rolled_back(at_fault, {v.key: v for v in vanished}, now))
        files += [DroppedFile(v.path, 0, v.size, None, self._timing(v.key, v.path, [], now))
                  for v in vanished if v.key not in at_fault]
        self.records, self.ordered, self.replacing = {}, {}, set()
        self.began = None
        self.written_since = set()
        names = [(e.parent, e.name) for e in undone]
        names += [(e.new_parent, e.new_name) for e in undone if e.new_parent]
        report = DroppedReport(
            tuple(sorted(files, key=lambda f: f.path)), tuple(e.text for e in undone),
            self.describe(), kept, cut_at, now - self.mounted_at,
            None if self.committed_at is None else now - self.committed_at)
        return report, names

    def _timing(self, key: Key, path: str, stack: list[FileRecord], now: float) -> Timing:
        """Takes a file, its path at the cut, its undo records (oldest first; none: it held
        nothing unsynced) and the cut's time. Returns its times as ages at the cut."""
        def age(at: float | None) -> float | None:
            return None if at is None else now - at

        times = self.times.get(key, FileTimes())
        tied = [r.tied_at for r in stack if r.tied_at is not None]
        return Timing(first_unsynced=age(min(r.dirtied_at for r in stack)) if stack else None,
                      last_write=age(times.last_write), last_sync=age(times.last_sync),
                      dir_sync=age(self.dir_syncs.get(_directory(path))),
                      written_back=age(min(tied)) if tied else None,
                      durable=age(times.durable), durable_by=times.durable_by)

    def _kept(self, dropped: set[Key], now: float) -> tuple[KeptFile, ...]:
        """Takes the files a power loss rolls back or whose creation it took back, and its time
        (its namespace changes already undone). Returns the files written since the mount (or
        the last loss) it keeps whole, under their names now, the latest written first."""
        kept = []
        for key in self.written_since - dropped:
            ino = self.tree.by_key.get(key)
            path = None if ino is None else self.tree.relative(ino)
            if ino is None or path is None:  # removed since, for good
                continue
            try:
                size = os.lstat(self.tree.path(ino)).st_size
            except (OSError, Missing):
                continue
            kept.append(KeptFile(path, size, self._timing(key, path, [], now)))
        return tuple(sorted(kept, key=lambda k: (k.timing.last_write or 0.0, k.path)))

    def _rolled_back(self, at_fault: dict[Key, str | None], vanished: dict[Key, Vanished],
                     now: float) -> Iterator[DroppedFile]:
        for key, path in at_fault.items():
            # Oldest first: the records tied by auto_da_alloc, then the one since.
            stack = [*self.ordered.get(key, (0, []))[1]]
            stack += [self.records[key]] if key in self.records else []
            try:
                yield from self._roll_back_one(key, stack, path, vanished.get(key), now)
            finally:
                for record in stack:
                    record.close()

    def _roll_back_one(self, key: Key, stack: list[FileRecord], path: str | None,
                       vanished: Vanished | None, now: float) -> Iterator[DroppedFile]:
        written = sum(r.written.total() for r in stack)
        if vanished is not None:
            yield DroppedFile(vanished.path, written, vanished.size, None,
                              self._timing(key, vanished.path, stack, now))
            return
        path = path or self._path(key)
        if path is None:  # removed for good (its removal was durable): nothing to restore
            return
        timing = self._timing(key, path, stack, now)
        st = os.fstat(stack[-1].fd)
        if st.st_nlink == 0:  # its directory's creation was taken back
            yield DroppedFile(path, written, st.st_size, None, timing)
            return
        for record in reversed(stack):  # newest first: each undoes what came after the last
            done = record.rollback()
        if written or st.st_size != done.size_after or any(r.saved for r in stack):
            yield DroppedFile(path, written, st.st_size, done.size_after, timing)

    def _path(self, key: Key) -> str | None:
        ino = self.tree.by_key.get(key)
        return None if ino is None else self.tree.relative(ino)

    def close(self) -> None:
        """Closes every record's descriptor (after a power loss, nothing is left)."""
        for record in self.records.values():
            record.close()
        for _, stack in self.ordered.values():
            for record in stack:
                record.close()
        self.records, self.ordered = {}, {}
        log.debug("durability model closed")
