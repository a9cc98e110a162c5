"""The local backend's unsynced layers (issue 32): one lazyfs daemon per node, mounted over the
node's broker data directory (`<data_root>/<node>/mnesia`, RabbitMQ's RABBITMQ_MNESIA_BASE),
its real files in a backing directory beside it (`mnesia.backing`).

They are mounted before any broker starts, on the host, where every node's commands see them:
`ip netns exec` copies the host's mounts, and a 4.x node's chroot binds each mountpoint at its
own path after the run's data folder (`binds`). `check_visible` then asks each node, through
its launcher, whether its data directory is a FUSE mount; a layer that failed to mount or a node
that does not see it stops the run, every layer unmounted. Each daemon's pid and mountpoint go
into a run record (clusters.state, `lazyfs-<run_id>.json`), so that `harness clean` ends a killed
run's daemons by pid (`clean_records`); the teardown unmounts them (`Layers.unmount_all`), after
each daemon's own log (what it mounted, each power loss and every file it dropped) was copied
into the run's nodes/<node>/lazyfs.log, beside the broker's logs (`Layers.copy_logs`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clusters.base import Node
from clusters.lazyfs import LazyFS, LazyFSError, mount
from clusters.lazyfs.handle import detach, mounted
from clusters.rabbitmq import NodePaths
from clusters.releases import Launcher
from clusters.state import RunRecord

log = logging.getLogger(__name__)

RECORD = "lazyfs"  # the run record's backend name: <state_dir>/backends/lazyfs-<run_id>.json
LOG_NAME = "lazyfs.log"  # a daemon's log in the run's nodes/<node>/ (no broker log's name)
DAEMON_MODULE = "clusters.lazyfs"
EXIT_WAIT_S = 10.0
MOUNT_POINT = 4  # the field of a /proc/<pid>/mountinfo line naming where it is mounted

Mount = Callable[[str, str], LazyFS]


def mountpoint(data_root: str, node: str) -> str:
    """Takes the run's data folder and a node's name. Returns the node's broker data directory,
    as the broker names it (clusters.rabbitmq.NodePaths.mnesia), absolute."""
    return os.path.abspath(NodePaths(f"{data_root}/{node}").mnesia)


def backing(point: str) -> str:
    """Takes a mountpoint. Returns the backing directory that holds its real files."""
    return f"{point}.backing"


def mount_fstype(mountinfo: str, path: str) -> str | None:
    """Takes the text of /proc/<pid>/mountinfo and an absolute path. Returns the filesystem type
    of the last mount on exactly that path (the one a process sees), or None when none is."""
    found = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) <= MOUNT_POINT:
            continue
        point = fields[MOUNT_POINT].encode().decode("unicode_escape")
        if point == path:
            found = line.split(" - ", 1)[1].split()[0]  # the type follows the separator
    return found


def mountinfo_command(launcher: Launcher | None) -> list[str]:
    """Takes the launcher the broker runs through (None: the host's). Returns the command that
    prints the mounts a broker command sees."""
    argv = ["cat", "/proc/self/mountinfo"]
    return launcher.wrap(argv) if launcher is not None else argv


def not_visible(nodes: Sequence[Node], points: dict[str, str],
                launcher: Launcher | None) -> list[str]:
    """Takes the nodes, each one's mountpoint and the broker's launcher. Returns a sentence per
    node whose broker commands do not see a FUSE filesystem on its data directory."""
    out = []
    for node in nodes:
        res = node.remote.run(mountinfo_command(launcher), timeout=30, check=False)
        fstype = mount_fstype(res.stdout, points[node.name]) if res.ok else None
        if fstype is None or not fstype.startswith("fuse"):
            seen = "nothing" if fstype is None else fstype
            why = "" if res.ok else f" (mountinfo unreadable: {res.stderr.strip()[-200:]})"
            out.append(f"{node.name} sees {seen} on {points[node.name]}{why}")
    return out


class Layers:
    """The mounted layers of one run, by node name, and the run record naming their daemons."""

    def __init__(self, data_root: str, names: Sequence[str], record_path: tuple[Path, str],
                 mounter: Mount = mount) -> None:
        self.points = {name: mountpoint(data_root, name) for name in names}
        self._state_dir, self._run_id = record_path
        self._mount = mounter
        self._record: RunRecord | None = None
        self.mounted: dict[str, LazyFS] = {}

    def mount_all(self) -> None:
        """Mounts one layer per node, recording each daemon before the next. Raises LazyFSError
        (every layer unmounted) when one cannot mount."""
        self._record = RunRecord.create(self._state_dir, RECORD, self._run_id,
                                        {"mounts": dict(self.points)})
        try:
            for name, point in self.points.items():
                os.makedirs(point, exist_ok=True)
                os.makedirs(backing(point), exist_ok=True)
                fs = self._mount(backing(point), point)
                self.mounted[name] = fs
                self._record.add_pid(name, fs.process.pid)
        except (LazyFSError, OSError) as e:
            self.unmount_all()
            raise LazyFSError(f"the unsynced layer could not be mounted: {e}") from e

    def power_loss(self, name: str) -> dict[str, Any]:
        """Takes a node's name. Drops its layer's unsynced writes. Returns the daemon's report
        (DroppedReport.to_dict). Raises LazyFSError when the node has no layer or it fails."""
        fs = self.mounted.get(name)
        if fs is None:
            raise LazyFSError(f"{name} has no unsynced layer mounted")
        return fs.power_loss().to_dict()

    def settle(self, name: str) -> dict[str, Any]:
        """Takes a node's name. Makes everything its layer holds unsynced durable (LazyFS.sync).
        Returns the daemon's report (SyncedReport.to_dict). Raises LazyFSError when the node
        has no layer or it fails."""
        fs = self.mounted.get(name)
        if fs is None:
            raise LazyFSError(f"{name} has no unsynced layer mounted")
        return fs.sync().to_dict()

    def copy_logs(self, dest: Path) -> list[Path]:
        """Takes the run's nodes/ directory. Copies each mounted layer's daemon log into
        dest/<node>/lazyfs.log (what the daemon has written so far: its unmount comes later, in
        the harness's own log). Returns the files written; a log that cannot be read is
        skipped with a warning."""
        written = []
        for name, fs in self.mounted.items():
            out = dest / name / LOG_NAME
            try:
                text = fs.log_path.read_bytes()
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(text)
            except OSError as e:
                log.warning("copying %s's lazyfs log: %s", name, e)
                continue
            written.append(out)
        return written

    def unmount_all(self) -> list[str]:
        """Unmounts every layer (what each still held unsynced is dropped: the backing holds the
        synced state) and removes the run record. Returns lines saying what went; never
        raises."""
        out = []
        for name, fs in list(self.mounted.items()):
            try:
                dropped = fs.unmount()
                out.append(f"unmounted {fs.mountpoint} ({dropped.bytes} unsynced bytes dropped)")
            except LazyFSError as e:
                log.warning("unmounting %s's layer: %s", name, e)
                out.append(f"unmounted {fs.mountpoint} by force: {e}")
            del self.mounted[name]
        for point in self.points.values():
            detach(point)
        if self._record is not None:
            self._record.remove()
            self._record = None
        return out


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def is_daemon(pid: int, point: str) -> bool:
    """Takes a pid and a mountpoint. Returns whether that process is a lazyfs daemon serving it
    (a recorded pid may have been reused since)."""
    argv = _cmdline(pid)
    return DAEMON_MODULE in argv and point in argv


def _end(pid: int) -> None:
    """SIGTERMs a daemon (it drops what is unsynced and unmounts), SIGKILLs it past EXIT_WAIT_S."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + EXIT_WAIT_S
    while _cmdline(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    if _cmdline(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def clean_records(state_dir: Path) -> list[str]:
    """Takes the state directory. Ends, by pid, the daemons of every run record a killed run
    left, detaches their mountpoints and removes the records. Returns lines saying what went."""
    out = []
    for rec in RunRecord.find(state_dir, RECORD):
        mounts: dict[str, str] = dict(rec.info.get("mounts") or {})
        for node, point in mounts.items():
            for pid in rec.pids(node):
                if is_daemon(pid, point):
                    _end(pid)
                    out.append(f"lazyfs daemon pid {pid} ({node})")
            if mounted(point):
                detach(point)
                out.append(f"lazyfs mount {point}")
        rec.remove()
    return out
