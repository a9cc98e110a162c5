"""The layer's daemon: `python -m clusters.lazyfs --backing DIR --mountpoint DIR --control SOCK
[--metadata ext4|strict] [--auto-da-alloc on|off] [--writeback-expire S|off]
[--clock monotonic|manual] [--sync inline|thread]`.

It mounts the layer, serves the control socket, and prints one JSON line on stdout when it is
ready (`{"event": "ready", "pid": ...}`) and one when it has unmounted (`{"event": "unmounted",
"report": ...}`: what the final power loss dropped). Its log goes to stderr. Everything it
needs comes from argv, so it can run in a node's own namespaces.

The control socket takes one JSON request per line and answers one JSON line:
`{"op": "power-loss"}` drops every unsynced change and answers `{"ok": true, "report": ...}`
(`report.DroppedReport.to_dict`); `{"op": "sync"}` makes every unsynced change durable, as
sync(2) would on ext4 (model.Durability.sync_all), and answers `{"ok": true, "report": ...}`
(`report.SyncedReport.to_dict`: what it wrote back); `{"op": "status"}` answers what a power
loss would drop now;
`{"op": "unmount"}` drops every unsynced change, answers its report, and ends the daemon.
`{"op": "advance", "seconds": S}` (only with `--clock manual`, for tests: the model's clock
then stands still but for these) moves the model's clock S seconds on, running the writeback
and periodic commits due (model.Durability.catch_up), and answers `{"ok": true, "now": ...}`.
Whatever ends the daemon (that, SIGTERM, SIGINT, an unmount by hand), it leaves the backing
directory holding exactly the synced state, and nothing mounted.

Exit status: 0 after a clean end, 2 when it could not mount (the reason on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import resource
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyfuse3
import trio

from clusters.lazyfs.errors import LazyFSError
from clusters.lazyfs.fs import SYNC_MODES, LazyOps, SyncMode
from clusters.lazyfs.model import METADATA, WRITEBACK_EXPIRE_S, Metadata
from clusters.lazyfs.report import DroppedReport

log = logging.getLogger(__name__)

MAX_REQUEST = 1 << 16


@dataclass(frozen=True)
class Options:
    """The daemon's argv: backing and mount directories, control socket, metadata model, where
    fsync runs, debug logging, whether ext4's auto_da_alloc is modelled, the writeback expiry
    (None: no writeback) and whether the model's clock is the monotonic one or driven by hand."""

    backing: str
    mountpoint: str
    control: str
    metadata: Metadata
    sync: SyncMode
    debug: bool
    auto_da_alloc: bool = True
    writeback_expire_s: float | None = WRITEBACK_EXPIRE_S
    clock: str = "monotonic"


def parse(argv: Sequence[str]) -> Options:
    """Takes the daemon's argv. Returns its options (argparse exits 2 on bad ones)."""
    parser = argparse.ArgumentParser(prog="python -m clusters.lazyfs",
                                     description="a filesystem that forgets what was not synced")
    parser.add_argument("--backing", required=True, help="the directory holding the real files")
    parser.add_argument("--mountpoint", required=True, help="where the broker sees them")
    parser.add_argument("--control", required=True, help="the control socket's path")
    parser.add_argument("--metadata", choices=METADATA, default="ext4",
                        help="which namespace changes an fsync makes durable (default: ext4)")
    parser.add_argument("--auto-da-alloc", choices=("on", "off"), default="on",
                        help="under ext4, model its auto_da_alloc: the data of a file truncated "
                             "to 0 or renamed over another is made durable by the next journal "
                             "commit (default: on, as ext4 mounts it)")
    parser.add_argument("--writeback-expire", type=_expiry, default=WRITEBACK_EXPIRE_S,
                        metavar="S|off",
                        help="under ext4, write back data dirty for S seconds at the flusher's "
                             "next pass (every 5 s), durable at the next commit (periodic every "
                             "5 s, or any fsync); off: never, the worst case (default: 30, "
                             "Linux's dirty_expire_centisecs)")
    parser.add_argument("--clock", choices=("monotonic", "manual"), default="monotonic",
                        help="the model's clock: monotonic, or manual (moved only by the "
                             "control socket's advance, for tests; default: monotonic)")
    parser.add_argument("--sync", choices=SYNC_MODES, default="inline",
                        help="run fsync in the event loop or in worker threads (default: inline)")
    parser.add_argument("--debug", action="store_true", help="log at debug level")
    args = parser.parse_args(list(argv))
    return Options(os.path.abspath(args.backing), os.path.abspath(args.mountpoint),
                   os.path.abspath(args.control), args.metadata, args.sync, args.debug,
                   args.auto_da_alloc == "on", args.writeback_expire, args.clock)


def _expiry(text: str) -> float | None:
    if text == "off":
        return None
    seconds = float(text)
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"not a number of seconds >= 0 or off: {text!r}")
    return seconds


class ManualClock:
    """A clock that stands still until moved (`--clock manual`), starting at 0."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def refusal(options: Options) -> str | None:
    """Takes the options. Returns why they cannot be mounted, or None when they can."""
    backing, mountpoint = os.path.realpath(options.backing), os.path.realpath(options.mountpoint)
    for name, path in (("backing", backing), ("mountpoint", mountpoint)):
        if not os.path.isdir(path):
            return f"the {name} {path} is not a directory"
    if os.path.commonpath([backing, mountpoint]) in (backing, mountpoint):
        return f"the backing {backing} and the mountpoint {mountpoint} must not contain each other"
    if os.path.ismount(mountpoint) and os.path.realpath(os.path.dirname(mountpoint)) != mountpoint:
        return f"{mountpoint} is a mountpoint already"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    return None


def _emit(event: str, **fields: Any) -> None:
    with contextlib.suppress(OSError):  # whoever started the daemon may have gone
        print(json.dumps({"event": event, **fields}), flush=True)


class Daemon:
    """Takes the mounted filesystem's handlers. Serves the control socket beside FUSE."""

    def __init__(self, ops: LazyOps, clock: ManualClock | None = None) -> None:
        self.ops = ops
        self.clock = clock
        self.final: DroppedReport | None = None
        self.commands: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            "power-loss": self._power_loss, "sync": self._sync, "status": self._status,
            "unmount": self._unmount, "advance": self._advance}

    async def _advance(self, request: dict[str, Any]) -> dict[str, Any]:
        seconds = request.get("seconds")
        if self.clock is None:
            return {"ok": False, "error": "advance needs --clock manual"}
        if not isinstance(seconds, int | float) or seconds < 0:
            return {"ok": False, "error": f"bad seconds {seconds!r}"}
        self.clock.now += seconds
        self.ops.model.catch_up()
        return {"ok": True, "now": self.clock.now}

    async def _power_loss(self, _: dict[str, Any]) -> dict[str, Any]:
        report, inodes, names = self.ops.power_loss()
        await trio.to_thread.run_sync(self.ops.invalidate, inodes, names)
        for line in report.lines():
            log.info("%s", line)
        return {"ok": True, "report": report.to_dict()}

    async def _sync(self, _: dict[str, Any]) -> dict[str, Any]:
        # Runs to its end without yielding: no request sees half of it (nothing the kernel
        # caches changes, so there is nothing to invalidate).
        report = self.ops.model.sync_all()
        for line in report.lines():
            log.info("%s", line)
        return {"ok": True, "report": report.to_dict()}

    async def _status(self, _: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "pending": self.ops.model.pending()}

    async def _unmount(self, _: dict[str, Any]) -> dict[str, Any]:
        self.stop()
        assert self.final is not None
        return {"ok": True, "report": self.final.to_dict()}

    def stop(self) -> None:
        """Drops every unsynced change (once) and ends the FUSE loop; no request runs between."""
        if self.final is None:
            self.final = self.ops.power_loss()[0]
            pyfuse3.terminate()

    async def client(self, stream: trio.SocketStream) -> None:
        """Takes one control connection. Answers each request line until it closes."""
        buffer = b""
        async with stream:
            while True:
                data = await stream.receive_some(MAX_REQUEST)
                if not data:
                    return
                buffer += data
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    answer = await self.answer(line)
                    await stream.send_all(json.dumps(answer).encode() + b"\n")

    async def answer(self, line: bytes) -> dict[str, Any]:
        """Takes one request line. Returns its answer (an error answer for a bad request)."""
        try:
            request = json.loads(line)
            command = self.commands[request["op"]]
        except (ValueError, KeyError, TypeError):
            return {"ok": False, "error": f"bad request {line[:200]!r}"}
        return await command(request)

    async def signals(self) -> None:
        """Ends the daemon on SIGTERM or SIGINT, as `unmount` would."""
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:
            async for signum in received:
                log.info("signal %d: unmounting", signum)
                self.stop()


async def serve(daemon: Daemon, control: str) -> None:
    """Takes the daemon and its control socket's path. Runs FUSE and the socket until the
    daemon is stopped or the filesystem unmounted."""
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind(control)
    sock.listen(8)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon.signals)
        nursery.start_soon(partial(trio.serve_listeners, daemon.client,
                                   [trio.SocketListener(sock)]))
        _emit("ready", pid=os.getpid())
        await pyfuse3.main()
        await trio.sleep(0.05)  # let the unmount request's answer leave
        nursery.cancel_scope.cancel()


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _mount(options: Options, clock: ManualClock | None) -> LazyOps:
    ops = LazyOps(os.fsencode(options.backing), options.metadata, options.sync,
                  options.auto_da_alloc, options.writeback_expire_s,
                  time.monotonic if clock is None else clock)
    mount_options = set(pyfuse3.default_options) | {"allow_other",
                                                     f"fsname=lazyfs:{options.backing}",
                                                     "subtype=lazyfs"}
    try:
        pyfuse3.init(ops, options.mountpoint, mount_options)
    except RuntimeError as exc:
        ops.close()
        raise LazyFSError(f"cannot mount {options.mountpoint}: {exc}") from exc
    return ops


def run(options: Options) -> int:
    """Takes the options. Mounts, serves until stopped, leaves the synced state. Returns the
    exit status."""
    refused = refusal(options)
    if refused is not None:
        log.error("%s", refused)
        return 2
    os.umask(0)  # the kernel applied the caller's umask already
    _raise_nofile()
    clock = ManualClock() if options.clock == "manual" else None
    try:
        ops = _mount(options, clock)
    except LazyFSError as exc:
        log.error("%s", exc)
        return 2
    log.info("model: %s", ops.model.describe())
    daemon = Daemon(ops, clock)
    status = 0
    try:
        trio.run(serve, daemon, options.control)
    except OSError as exc:  # the control socket could not be made
        log.error("cannot serve %s: %s", options.control, exc)
        status = 2
    finally:
        final = daemon.final if daemon.final is not None else ops.power_loss()[0]
        pyfuse3.close(unmount=True)
        ops.close()
        _remove(options.control)
        _emit("unmounted", report=final.to_dict())
    return status


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def main(argv: Sequence[str]) -> int:
    """Takes argv (without the program). Runs the daemon. Returns its exit status."""
    options = parse(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if options.debug else logging.INFO,
                        format="%(asctime)s lazyfs[%(process)d] %(levelname)s %(message)s")
    return run(options)
