"""The harness's side of the layer: start the daemon over a backing directory, tell it "power
loss now", and unmount it.

    fs = mount(backing, mountpoint)        # the daemon runs; the broker uses `mountpoint`
    fs.sync()                              # everything so far durable, as sync(2) makes it
    report = fs.power_loss()               # kill the broker first, as Jepsen does
    fs.unmount()                           # the backing holds exactly the synced state

The daemon is a process of its own (`daemon_command` builds its argv, a pure function, so that a
node's Remote can later start it inside the node's namespaces); this module starts it here, on
the local machine. A mount that fails raises `LazyFSError` with the daemon's own words and
leaves nothing mounted.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from clusters.lazyfs.errors import LazyFSError
from clusters.lazyfs.model import WRITEBACK_EXPIRE_S, Metadata
from clusters.lazyfs.report import DroppedReport, SyncedReport

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent.parent  # the project, for `python -m clusters.lazyfs`
MOUNT_TIMEOUT_S = 30.0  # the daemon imports trio and pyfuse3: seconds on a loaded machine
REQUEST_TIMEOUT_S = 120.0
EXIT_TIMEOUT_S = 30.0


def daemon_command(backing: str | Path, mountpoint: str | Path, control: str | Path, *,
                   metadata: Metadata = "ext4", sync: str = "inline",
                   auto_da_alloc: bool = True,
                   writeback_expire_s: float | None = WRITEBACK_EXPIRE_S,
                   clock: str = "monotonic", python: str = sys.executable) -> list[str]:
    """Takes the backing directory, the mountpoint, the control socket's path, the metadata
    model, where fsync runs (`fs.SYNC_MODES`), whether ext4's auto_da_alloc is modelled, the
    writeback expiry (None: no writeback) and the model's clock ("monotonic", or "manual" for
    tests: moved by `LazyFS.advance`) (model.Durability). Returns the daemon's argv."""
    return [python, "-m", "clusters.lazyfs", "--backing", str(backing), "--mountpoint",
            str(mountpoint), "--control", str(control), "--metadata", metadata, "--sync", sync,
            "--auto-da-alloc", "on" if auto_da_alloc else "off",
            "--writeback-expire", "off" if writeback_expire_s is None else repr(writeback_expire_s),
            "--clock", clock]


def mounted(path: str | Path) -> bool:
    """Takes a directory. Returns whether something is mounted on it (/proc/self/mountinfo)."""
    want = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        for line in info:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == want:
                return True
    return False


def detach(path: str | Path) -> None:
    """Takes a mountpoint. Lazily unmounts whatever is still mounted there (a daemon that died)."""
    if mounted(path):
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True, timeout=30)
        log.warning("detached %s left by a lazyfs daemon", path)


@dataclass
class LazyFS:
    """A mounted layer: its directories, its daemon, and where the daemon's log and socket lie."""

    backing: Path
    mountpoint: Path
    control: Path
    log_path: Path
    process: subprocess.Popen[bytes]

    def request(self, op: str, timeout: float = REQUEST_TIMEOUT_S,
                **fields: Any) -> dict[str, Any]:
        """Takes a control operation (and its fields). Returns the daemon's answer, or raises
        LazyFSError."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout)
                sock.connect(str(self.control))
                sock.sendall(json.dumps({"op": op, **fields}).encode() + b"\n")
                answer = json.loads(_read_line(sock))
        except (OSError, ValueError) as exc:
            raise LazyFSError(f"lazyfs on {self.mountpoint} did not answer {op!r}: {exc}"
                              f"{self._log_tail()}") from exc
        if not answer.get("ok"):
            raise LazyFSError(f"lazyfs on {self.mountpoint} refused {op!r}: {answer.get('error')}")
        return dict(answer)

    def power_loss(self) -> DroppedReport:
        """Drops every write and namespace change not yet synced. Returns what was dropped."""
        return DroppedReport.from_dict(self.request("power-loss")["report"])

    def sync(self) -> SyncedReport:
        """Makes every unsynced write and namespace change durable, as sync(2) would on ext4
        (the model's commit of everything). Returns what it wrote back."""
        return SyncedReport.from_dict(self.request("sync")["report"])

    def pending(self) -> dict[str, int]:
        """Returns what a power loss would drop now (files, bytes, namespace changes)."""
        return dict(self.request("status")["pending"])

    def advance(self, seconds: float) -> float:
        """Takes seconds. Moves a manual clock (mount(..., clock="manual")) that far on,
        running the writeback due. Returns the clock's time."""
        return float(self.request("advance", seconds=seconds)["now"])

    def unmount(self) -> DroppedReport:
        """Drops what is not synced, unmounts and ends the daemon. Returns what was dropped."""
        try:
            report = DroppedReport.from_dict(self.request("unmount")["report"])
        except LazyFSError:
            self._end(force=True)
            raise
        self._end(force=False)
        return report

    def _end(self, force: bool) -> None:
        if force and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(EXIT_TIMEOUT_S)
        if self.process.stdout is not None:
            self.process.stdout.close()
        detach(self.mountpoint)
        shutil.rmtree(self.control.parent, ignore_errors=True)

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()[-5:]
        except OSError:
            return ""
        return "; daemon log: " + " | ".join(lines) if lines else ""

    def __enter__(self) -> LazyFS:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.unmount()
        else:
            self._end(force=True)


def _read_line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise ValueError("connection closed before an answer")
        data += chunk
    return data


def _ready(out: IO[bytes], timeout: float) -> dict[str, Any] | None:
    """Takes the daemon's stdout. Returns its first event, or None at end of file or timeout."""
    with selectors.DefaultSelector() as selector:
        selector.register(out, selectors.EVENT_READ)
        if not selector.select(timeout):
            return None
    line = out.readline()
    try:
        return dict(json.loads(line)) if line else None
    except ValueError:
        return None


def mount(backing: str | Path, mountpoint: str | Path, *, metadata: Metadata = "ext4",
          sync: str = "inline", auto_da_alloc: bool = True,
          writeback_expire_s: float | None = WRITEBACK_EXPIRE_S, clock: str = "monotonic",
          timeout: float = MOUNT_TIMEOUT_S) -> LazyFS:
    """Takes the backing directory (the node's real data directory), an empty directory to mount
    on, the metadata model, where fsync runs, whether ext4's auto_da_alloc is modelled (on,
    as ext4 mounts it), the writeback expiry (30 s as Linux's; None: no writeback, the worst
    case) and the model's clock (`daemon_command`). Starts the daemon and returns the mounted
    layer, or raises LazyFSError with why, nothing left mounted."""
    state = Path(tempfile.mkdtemp(prefix="lazyfs-"))
    control, log_path = state / "control.sock", state / "daemon.log"
    argv = daemon_command(Path(backing).resolve(), Path(mountpoint).resolve(), control,
                          metadata=metadata, sync=sync, auto_da_alloc=auto_da_alloc,
                          writeback_expire_s=writeback_expire_s, clock=clock)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=log_file, cwd=ROOT, env=env, start_new_session=True)
    fs = LazyFS(Path(backing), Path(mountpoint), control, log_path, process)
    assert process.stdout is not None
    started = time.monotonic()
    event = _ready(process.stdout, timeout)
    if event is None or event.get("event") != "ready":
        why = fs._log_tail() or f"; no answer in {time.monotonic() - started:.1f} s"
        fs._end(force=True)
        raise LazyFSError(f"lazyfs could not mount {mountpoint} over {backing}{why}")
    log.info("lazyfs mounted %s over %s (pid %d)", mountpoint, backing, process.pid)
    return fs
