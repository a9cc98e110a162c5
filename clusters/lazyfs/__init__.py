"""A filesystem that forgets what was not synced (issue 32): a FUSE layer over a node's data
directory that, on a simulated power loss, drops every write and namespace change the broker
had not made durable, and reports what it dropped. RabbitMQ promises a confirm only once a
message is on disk (a quorum queue: fsynced by a majority); a `kill -9` keeps the page cache
and never tests that, a power loss does. Jepsen's LazyFS does the same for its tests.

The model (`model`): ext4 with data=ordered. A file's data and size are durable as of its last
fsync/fdatasync (or an O_SYNC/O_DSYNC write), or under "ext4" once Linux's background writeback
(30 s after the first unsynced write, by default; off: never, the worst case) and the journal
commit after it have run; namespace changes are durable once any later fsync or the periodic
commit (with writeback) commits the journal ("ext4", the default) or, in "strict" mode, once
their directory is fsynced. What is not durable is visible at once and dropped by `power_loss()`.
`sync_file_range(2)` never reaches a FUSE filesystem (the kernel keeps it), so it makes nothing
durable here; `fallocate(2)` is refused (EOPNOTSUPP), as pyfuse3 has no handler for it.

`sync()` makes everything durable at once, as sync(2) does (the harness settles each layer so
before its faults, as if the cluster had run long enough for the kernel's writeback).

The parts: `handle` (mount, sync, power loss, unmount: the harness's API), `daemon` (the process,
`python -m clusters.lazyfs`), `fs` (the FUSE handlers), `model`, `record` (one file's undo
record), `journal` (namespace changes), `tree` (inode table), `extents`, `report`.
"""

from clusters.lazyfs.errors import LazyFSError
from clusters.lazyfs.handle import LazyFS, daemon_command, mount, mounted
from clusters.lazyfs.model import METADATA, Metadata
from clusters.lazyfs.report import DroppedFile, DroppedReport, SyncedFile, SyncedReport

__all__ = ["METADATA", "DroppedFile", "DroppedReport", "LazyFS", "LazyFSError", "Metadata",
           "SyncedFile", "SyncedReport", "daemon_command", "mount", "mounted"]
