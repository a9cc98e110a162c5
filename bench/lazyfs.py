"""What the lazyfs layer costs: sequential appends with an fsync every N writes, on the layer and
on the plain directory under it, in writes per second.

    python -m bench.lazyfs [--writes 20000] [--size 4096] [--every 1 8 64 0]
                           [--sync inline|thread] [--json FILE]

`--every 0` never syncs (a stream's segment). Each case writes a fresh file in a fresh
directory, the plain run first, then the same through a layer mounted over a sibling directory;
the layer is unmounted after each case (dropping whatever was left unsynced). Also reads the
file back once, on both. Beside the wall-clock rates, the daemon's own CPU time per write: on
a busy machine (or niced) every FUSE round trip waits for the scheduler, and the rates say more
about the load than the layer; the CPU time does not. Root and /dev/fuse needed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from clusters.lazyfs import mount


def appends(path: Path, writes: int, size: int, every: int) -> float:
    """Takes a file to make, how many writes, their size, and how many writes between fsyncs
    (0: none). Returns writes per second."""
    block = os.urandom(size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        started = time.perf_counter()
        for done in range(1, writes + 1):
            os.write(fd, block)
            if every and done % every == 0:
                os.fsync(fd)
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
    return writes / elapsed


def read_back(path: Path, size: int) -> float:
    """Takes a file. Returns how many MiB per second reading it in `size` pieces gives."""
    started = time.perf_counter()
    total = 0
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(size):
            total += len(chunk)
    return total / (1 << 20) / (time.perf_counter() - started)


def one_case(root: Path, writes: int, size: int, every: int, sync: str) -> dict[str, Any]:
    """Takes a scratch directory, one case and where the layer fsyncs. Returns its figures,
    plain and on the layer."""
    plain, backing, mnt = root / "plain", root / "backing", root / "mnt"
    for d in (plain, backing, mnt):
        d.mkdir()
    plain_rate = appends(plain / "f", writes, size, every)
    plain_read = read_back(plain / "f", 1 << 17)
    fs = mount(backing, mnt, sync=sync)
    try:
        daemon = psutil.Process(fs.process.pid)
        cpu = daemon.cpu_times()
        layer_rate = appends(mnt / "f", writes, size, every)
        after = daemon.cpu_times()
        layer_read = read_back(mnt / "f", 1 << 17)
    finally:
        fs.unmount()
    daemon_cpu = (after.user + after.system) - (cpu.user + cpu.system)
    for d in (plain, backing):
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
    mnt.rmdir()
    return {"every": every, "writes": writes, "size": size, "sync": sync,
            "plain_writes_per_s": round(plain_rate), "layer_writes_per_s": round(layer_rate),
            "ratio": round(layer_rate / plain_rate, 3),
            "daemon_cpu_us_per_write": round(daemon_cpu / writes * 1e6, 1),
            "plain_read_mib_s": round(plain_read), "layer_read_mib_s": round(layer_read)}


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the cases and prints a table (and writes --json). Returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench.lazyfs", description=__doc__)
    parser.add_argument("--writes", type=int, default=20000)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--every", type=int, nargs="+", default=[1, 8, 64, 0])
    parser.add_argument("--sync", choices=("inline", "thread"), default="inline",
                        help="where the layer runs fsync (clusters/lazyfs/fs.py)")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default /tmp)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-lazyfs-", dir=args.dir) as scratch:
        for every in args.every:
            rows.append(one_case(Path(scratch), args.writes, args.size, every, args.sync))
            row = rows[-1]
            print(f"fsync every {every or 'never':>5}: plain {row['plain_writes_per_s']:>8} w/s, "
                  f"layer {row['layer_writes_per_s']:>8} w/s ({row['ratio']:.2f}x), daemon "
                  f"{row['daemon_cpu_us_per_write']} us CPU/write; read back "
                  f"plain {row['plain_read_mib_s']} MiB/s, layer {row['layer_read_mib_s']} MiB/s",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
