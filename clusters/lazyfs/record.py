"""What one file has written since its last sync, and how to take it back (an undo record).

The layer writes through to the backing file at once, so reads and appends cost nothing
extra; what it keeps is the other side: the file's durable size, and a copy of every durable
byte that an unsynced write or truncation is about to destroy (saved once, before the first
change since the last sync). A sync forgets the record; a power loss restores the saved bytes
and the durable size. Appends past the durable size need no copy at all, and a run of saved
zeros (a preallocated region) is kept as its length only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from clusters.lazyfs.extents import Extents


@dataclass(frozen=True)
class Rollback:
    """What a power loss took from one file: unsynced bytes written, size at the fault and after."""

    bytes: int
    size_before: int
    size_after: int


@dataclass
class FileRecord:
    """Takes a descriptor of the backing file (the record's own, closed by `close`) and the file's
    durable size. Tracks its unsynced changes until a sync, a writeback or a power loss."""

    fd: int
    durable_size: int
    written: Extents = field(default_factory=Extents)
    saved_at: Extents = field(default_factory=Extents)
    saved: list[tuple[int, bytes | int]] = field(default_factory=list)
    dirtied_at: float = 0.0  # when its first change was made (Linux's inode dirtied_when)
    tied_at: float | None = None  # when writeback or auto_da_alloc tied it to the journal
    tied_by: str = ""  # which of the two ("writeback", "auto_da_alloc")

    @classmethod
    def open(cls, fd: int) -> FileRecord:
        """Takes a descriptor of a file about to change (it may be write-only). Returns its
        record, with a descriptor of its own that reads and writes (the file reopened through
        /proc, which finds it even unlinked)."""
        own = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
        return cls(own, os.fstat(own).st_size)

    def before_write(self, offset: int, length: int) -> None:
        """Takes a write about to happen. Saves the durable bytes it covers; notes it written."""
        end = offset + length
        self._save(offset, min(end, self.durable_size))
        self.written.add(offset, end)

    def before_truncate(self, size: int) -> None:
        """Takes the size a truncation is about to set. Saves the durable bytes it cuts off."""
        self._save(size, self.durable_size)
        self.written.clip(size)

    def _save(self, start: int, end: int) -> None:
        for gap_start, gap_end in self.saved_at.gaps(start, end):
            data = os.pread(self.fd, gap_end - gap_start, gap_start)
            kept: bytes | int = len(data) if data.count(0) == len(data) else data
            self.saved.append((gap_start, kept))
            self.saved_at.add(gap_start, gap_end)

    def saved_bytes(self) -> int:
        """Returns how many bytes of memory the saved copies take (zero runs take none)."""
        return sum(len(data) for _, data in self.saved if isinstance(data, bytes))

    def rollback(self) -> Rollback:
        """Restores the file to its durable size and content. Returns what that took away."""
        size_before = os.fstat(self.fd).st_size
        os.ftruncate(self.fd, self.durable_size)
        for offset, data in self.saved:
            os.pwrite(self.fd, bytes(data) if isinstance(data, int) else data, offset)
        return Rollback(self.written.total(), size_before, self.durable_size)

    def close(self) -> None:
        """Closes the record's descriptor."""
        os.close(self.fd)
