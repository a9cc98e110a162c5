"""Benchmark of the Spark checker: synthetic histories of 1M, 10M (and with --huge 100M) ops.

    python -m bench.checker [--ops 1000000 10000000] [--huge] [--no-acks] [--anomalies]
                            [--priorities]
    python -m bench.checker --generate-only --anomalies --ops 10000000

Histories are generated once into bench-data/ (git-ignored), on every core,
in the exact line format of history.Op (null fields included), and
reused by later runs; generation time is not part of the figures. Each
measurement runs in a fresh subprocess so that its peaks are its own: the
Spark check of the JSONL (JVM start-up included), the conversion to Parquet,
and the Spark check of that Parquet. Printed per run: wall time, ops checked
per second, the peak RSS of the Python driver and of the JVM (VmHWM), and
the verdict, which must be true for these correct histories. Spark runs use
a class-data-sharing archive of the driver JVM (bench-data/spark-classes.jsa,
written by an unmeasured warm-up check; --no-class-archive to go without).

A synthetic history: 8 publishers and 8 consumers; message k is published by
process k % 8 + 1 with seq k // 8, confirmed (97%), nacked (1%) or unknown (2%,
half of those enqueued anyway), delivered right after its confirm and acked
right after its delivery (as consumers record acks; --no-acks leaves the acks
out, as older histories and auto-ack consumers do), every 10000th delivered
again flagged redelivered (and acked); a partition and a kill come and go
every tenth of the run; harness phase events frame it. Indexes are
consecutive, as HistoryWriter writes them.

With --anomalies (a history that is not valid, to measure what a check of a
faulty run costs: explanations, mends, incidents): every 1000th message
(k % 1000 == 500) is confirmed and never delivered (lost), every 1000th
(k % 1000 == 700) is delivered and acked a second time, unflagged
(duplicated), each fault's start is preceded by a queue depth sample and a
placement sample, and the harness restarts a node (a mend) after the main
phase, before the drain.

With --priorities (to measure the priority check, checkers.spark_priority):
message k has priority 9, 1 or none (k % 3), on its publish ops and its
deliveries, and the history ends with the harness's `priorities` observation
of a 4.3 line (32 levels, strict) whose consumers have prefetch 1. Every
message is delivered right after its confirm, so every delivery but each
consumer's first is judged, and none is a violation.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from history.files import replacing

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench-data"
FORMAT_VERSION = 3
PUBLISHERS = 8
CONSUMERS = 8
CHUNK = 500_000  # messages per generation task



def _pub(type_: str, p: int, mid: str, index: int, t: int, seq: int, error: str,
         priority: str = "") -> str:
    return (f'{{"type":"{type_}","process":{p},"f":"publish","value":"{mid}","node":"n1",'
            f'"index":{index},"time":{t},"queue":"q","publisher":{p},"seq":{seq},'
            f'"consumer":null,"redelivered":null,"phase":"main","error":{error}{priority}}}')


def _dlv(c: int, mid: str, index: int, t: int, p: int, seq: int, redelivered: str,
         priority: str = "") -> str:
    return (f'{{"type":"ok","process":{c},"f":"consume","value":"{mid}","node":"n2",'
            f'"index":{index},"time":{t},"queue":"q","publisher":{p},"seq":{seq},'
            f'"consumer":"consume-{c}","redelivered":{redelivered},"phase":"main",'
            f'"error":null{priority}}}')


# The `priorities` observation of a --priorities history (workloads.queue_workload).
PRIORITIES_VALUE = ('{"queue":"q","type":"quorum","version":"4.3.0","line":"4.3","levels":32,'
                    '"strict":true,"prefetch":{"consume":1,"drain":200},'
                    '"single_active_consumer":false,"distribution":"none,1,9"}')


def _priority(k: int, priorities: bool) -> str:
    """Returns message k's priority field as its lines carry it ("" for none)."""
    if not priorities or k % 3 == 2:
        return ""
    return f',"priority":{9 if k % 3 == 0 else 1}'


def _ack(c: int, mid: str, index: int, t: int, p: int, seq: int) -> str:
    return (f'{{"type":"ok","process":{c},"f":"ack","value":"{mid}","node":"n2",'
            f'"index":{index},"time":{t},"queue":"q","publisher":{p},"seq":{seq},'
            f'"consumer":"consume-{c}","redelivered":null,"phase":"main","error":null}}')


def _nemesis(type_: str, f: str, value: str, index: int, t: int) -> str:
    return (f'{{"type":"{type_}","process":"nemesis","f":"{f}","value":{value},"node":null,'
            f'"index":{index},"time":{t},"queue":null,"publisher":null,"seq":null,'
            f'"consumer":null,"redelivered":null,"phase":null,"error":null}}')


def _sample(f: str, value: str, index: int, t: int) -> str:
    return (f'{{"type":"info","process":"harness","f":"{f}","value":{value},"node":null,'
            f'"index":{index},"time":{t},"queue":null,"publisher":null,"seq":null,'
            f'"consumer":null,"redelivered":null,"phase":null,"error":null}}')


def _harness(phase: str, state: str, index: int, t: int) -> str:
    return (f'{{"type":"info","process":"harness","f":"phase","value":{{"phase":"{phase}",'
            f'"state":"{state}"}},"node":null,"index":{index},"time":{t},"queue":null,'
            f'"publisher":null,"seq":null,"consumer":null,"redelivered":null,"phase":null,'
            f'"error":null}}')


def _period(m: int) -> int:
    return max(m // 10, 2)


def _outcome(k: int) -> tuple[str, bool]:
    """Returns message k's publish outcome and whether it was enqueued."""
    r = k % 100
    if r < 97:
        return "ok", True
    return ("fail", False) if r == 97 else ("info", r == 98)


def _lost(k: int, anomalies: bool) -> bool:
    return anomalies and k % 1000 == 500


def _duplicated(k: int, anomalies: bool) -> bool:
    return anomalies and k % 1000 == 700


def _ops_before(k: int, m: int, acks: bool = True, anomalies: bool = False) -> int:
    """Returns how many ops messages 0..k-1 of an m-message history take (closed form, so that
    parts can be generated apart with consecutive indexes, as HistoryWriter numbers ops)."""
    period, half = _period(m), _period(m) // 2
    not_enqueued = 2 * (k // 100) + (1 if k % 100 > 97 else 0)
    redeliveries = (k + 9999) // 10000
    nemesis = (k + period - 1) // period + max(0, (k - half + period - 1) // period)
    per_delivery = 2 if acks else 1
    extra = 0
    if anomalies:  # lost ones lose their delivery, duplicated ones get another; 2 samples a fault
        extra = per_delivery * ((k + 299) // 1000 - (k + 499) // 1000) + 2 * nemesis
    return 2 * k + per_delivery * (k - not_enqueued + redeliveries) + 2 * nemesis + extra


def _chunk(args: tuple[int, int, int, str, bool, bool, bool]) -> str:
    """Writes messages [lo, hi) of an m-message history to a part file. Returns its path."""
    lo, hi, m, out, acks, anomalies, priorities = args
    period = _period(m)
    index = 1 + _ops_before(lo, m, acks, anomalies)
    lines: list[str] = []

    def add(line: str) -> None:
        nonlocal index
        lines.append(line)
        index += 1

    with open(out, "w", encoding="utf-8") as fh:
        for k in range(lo, hi):
            base = 100_000 * k + 1_000_000
            phase = k % period
            if phase in (0, period // 2):
                start = phase == 0
                if k // period % 2 == 0:
                    f, v = ("start-partition", '{"n1":["n2","n3"]}') if start else (
                        "stop-partition", "{}")
                else:
                    f, v = ("kill", '{"nodes":["n2"]}') if start else ("start", '{"nodes":["n2"]}')
                if anomalies:
                    add(_sample("depth", f'{{"nodes":{{"n1":{{"ready":{k % 5000},"unacked":8}}}}}}',
                                index, base))
                    add(_sample("placement", '{"leader":"n1","members":["n1","n2","n3"]}',
                                index, base))
                add(_nemesis("invoke", f, '{"fault":"x"}', index, base))
                add(_nemesis("info", f, v, index, base + 1))
            p, seq = k % PUBLISHERS + 1, k // PUBLISHERS
            mid = f"{p}-{seq}"
            outcome, enqueued = _outcome(k)
            prio = _priority(k, priorities)
            add(_pub("invoke", p, mid, index, base + 2, seq, "null", prio))
            lat = 20_000 + (k * 7919) % 60_000
            add(_pub(outcome, p, mid, index, base + 2 + lat, seq,
                     "null" if outcome == "ok" else '"x"', prio))
            if enqueued and not _lost(k, anomalies):
                c = 100 + k % CONSUMERS
                add(_dlv(c, mid, index, base + 90_000, p, seq, "false", prio))
                if acks:
                    add(_ack(c, mid, index, base + 91_000, p, seq))
            if k % 10000 == 0 or _duplicated(k, anomalies):
                c2 = 100 + (k + 1) % CONSUMERS
                flag = "false" if _duplicated(k, anomalies) else "true"
                add(_dlv(c2, mid, index, base + 95_000, p, seq, flag, prio))
                if acks:
                    add(_ack(c2, mid, index, base + 96_000, p, seq))
            if len(lines) >= 20_000:
                fh.write("\n".join(lines) + "\n")
                lines.clear()
        if lines:
            fh.write("\n".join(lines) + "\n")
    assert index == 1 + _ops_before(hi, m, acks, anomalies), \
        "op count formula out of step with the generator"
    return out


def messages_for(ops: int, acks: bool = True) -> int:
    """Takes a target op count. Returns the number of messages giving about that many ops."""
    return max(1, round(ops / (3.97 if acks else 3.0)))


def generate(ops: int, out: Path, workers: int | None = None,
             acks: bool = True, anomalies: bool = False,
             priorities: bool = False) -> tuple[Path, float]:
    """Takes a target op count, a path, whether consumers record acks, whether to plant
    anomalies and whether messages have priorities (the module docstring). Writes a synthetic
    history there unless it exists. Returns (path, seconds spent generating)."""
    if out.exists():
        return out, 0.0
    t0 = time.monotonic()
    m = messages_for(ops, acks)
    out.parent.mkdir(parents=True, exist_ok=True)
    parts_dir = out.with_suffix(".parts")
    parts_dir.mkdir(exist_ok=True)
    tasks = [(lo, min(lo + CHUNK, m), m, str(parts_dir / f"{i:06d}"), acks, anomalies,
              priorities) for i, lo in enumerate(range(0, m, CHUNK))]
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count()) as pool:
        parts = list(pool.map(_chunk, tasks))
    last_index, last_time = 1 + _ops_before(m, m, acks, anomalies), 100_000 * m + 2_000_000
    tail = [_harness("main", "end", last_index, last_time)]
    if anomalies:
        tail.append(_sample("recover-node", '{"node":"n2","action":"restart-app"}',
                            last_index + len(tail), last_time + len(tail)))
    for ph, st in (("drain", "start"), ("drain", "end")):
        tail.append(_harness(ph, st, last_index + len(tail), last_time + len(tail)))
    if priorities:
        tail.append(_sample("priorities", PRIORITIES_VALUE, last_index + len(tail),
                            last_time + len(tail)))
    with replacing(out) as tmp, open(tmp, "wb") as fh:
        fh.write((_harness("main", "start", 0, 0) + "\n").encode())
        for part in parts:
            with open(part, "rb") as src:
                shutil.copyfileobj(src, fh, 16 * 1024 * 1024)
        fh.write(("\n".join(tail) + "\n").encode())
    shutil.rmtree(parts_dir)
    return out, time.monotonic() - t0


def _jvm_peak_rss() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    peak = None
    for child in psutil.Process().children(recursive=True):
        try:
            if "java" not in child.name():
                continue
            with open(f"/proc/{child.pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        kb = int(line.split()[1])
                        peak = max(peak or 0, kb * 1024)
        except (OSError, psutil.Error):
            continue
    return peak


def run_one(kind: str, path: Path, work: Path, driver_memory: str,
            archive: Path | None) -> dict[str, Any]:
    """Takes a measurement kind (spark, convert), a history, a scratch dir, the
    driver memory and the JVM class archive. Runs it in this process. Returns its figures."""
    from checkers import spark_engine, spark_io, spark_session
    from checkers.options import CheckOptions

    opts = CheckOptions(driver_memory=driver_memory, work_dir=work, jvm_class_archive=archive)
    t0 = time.monotonic()
    out: dict[str, Any] = {"kind": kind, "path": str(path)}
    spark, _ = spark_session.session(None, opts)
    try:
        if kind == "convert":
            spark_io.convert_to_parquet(spark, path, work / "converted.parquet")
            out["valid"] = None
        else:
            r = spark_engine.check(path, opts, spark=spark)
            out["valid"] = r["valid"]
            out["queue"] = {k: r["queue"][k] for k in ("attempt_count", "lost_count",
                                                       "duplicated_count")}
        out["jvm_peak_rss"] = _jvm_peak_rss()
    finally:
        spark.stop()
    out["wall_s"] = round(time.monotonic() - t0, 2)
    out["python_peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


def measure(kind: str, path: Path, work: Path, driver_memory: str,
            archive: Path | None) -> dict[str, Any]:
    """Runs one measurement in a fresh subprocess. Returns its figures."""
    cmd = [sys.executable, "-m", "bench.checker", "--run-one", kind, str(path),
           "--work", str(work), "--driver-memory", driver_memory]
    if archive is not None:
        cmd += ["--class-archive", str(archive)]
    env = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        return {"kind": kind, "error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def count_ops(path: Path) -> int:
    """Returns the number of lines of a history (its op count)."""
    n = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(64 * 1024 * 1024):
            n += chunk.count(b"\n")
    return n


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.0f} MB"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.checker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--huge", action="store_true", help="also 100M ops")
    p.add_argument("--no-parquet", action="store_true")
    p.add_argument("--driver-memory", default="2g")
    p.add_argument("--dir", type=Path, default=BENCH_DIR)
    p.add_argument("--no-class-archive", action="store_true",
                   help="start the JVM without the class-data-sharing archive")
    p.add_argument("--no-acks", action="store_true",
                   help="histories without ack ops (as recorded before consumers logged acks)")
    p.add_argument("--anomalies", action="store_true",
                   help="plant lost and duplicated messages, depth and placement samples and a "
                        "harness restart (an invalid history; see above)")
    p.add_argument("--priorities", action="store_true",
                   help="messages with priorities and the harness's observation of a 4.3 line "
                        "(see above), for the priority check")
    p.add_argument("--generate-only", action="store_true",
                   help="write the histories (bench-data/) and print their paths; measure nothing")
    p.add_argument("--run-one", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    p.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--class-archive", type=Path, help=argparse.SUPPRESS)
    return p


def _measure_size(args: argparse.Namespace, ops: int, flavour: str,
                  archive: Path | None) -> list[dict[str, Any]]:
    """Generates (or reuses) the history of `ops` ops and measures each kind of check on it.
    Returns one row per kind, printing each as it ends."""
    path, gen_s = generate(ops, args.dir / f"history-{ops}-v{FORMAT_VERSION}{flavour}.jsonl",
                           acks=not args.no_acks, anomalies=args.anomalies,
                           priorities=args.priorities)
    n = count_ops(path)
    print(f"# {path.name}: {n} ops, {path.stat().st_size / 2**30:.2f} GiB"
          + (f" (generated in {gen_s:.0f}s)" if gen_s else ""), flush=True)
    work = args.dir / f"work-{ops}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rows = []
    for kind in ["spark"] + ([] if args.no_parquet else ["convert", "spark-parquet"]):
        target = work / "converted.parquet" if kind == "spark-parquet" else path
        r = measure("spark" if kind == "spark-parquet" else kind, target, work,
                    args.driver_memory, archive)
        r["kind"], r["ops"] = kind, n
        rows.append(r)
        if "error" in r:
            print(f"{kind:14} {n:>11} ops  FAILED: {r['error']}", flush=True)
            continue
        print(f"{kind:14} {n:>11} ops  {r['wall_s']:8.1f} s  "
              f"{n / r['wall_s']:>12,.0f} ops/s  python peak {_mb(r['python_peak_rss'])}"
              f"  jvm peak {_mb(r['jvm_peak_rss'])}  valid {r.get('valid')}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark CLI. Returns the exit code."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.run_one:
        kind, path = args.run_one
        print(json.dumps(run_one(kind, Path(path), args.work, args.driver_memory,
                                 args.class_archive)))
        return 0
    sizes = [*args.ops, *([100_000_000] if args.huge else [])]
    archive = None if args.no_class_archive else args.dir / "spark-classes.jsa"
    flavour = ("-noacks" if args.no_acks else "") + ("-anomalies" if args.anomalies else "") \
        + ("-priorities" if args.priorities else "")
    if args.generate_only:
        for ops in sizes:
            path, gen_s = generate(ops, args.dir / f"history-{ops}-v{FORMAT_VERSION}{flavour}"
                                   ".jsonl", acks=not args.no_acks, anomalies=args.anomalies,
                                   priorities=args.priorities)
            print(f"{path} ({gen_s:.0f} s)", flush=True)
        return 0
    if archive is not None and not archive.exists():
        # A first, unmeasured check writes the JVM's class archive that the measured ones use.
        small, _ = generate(10_000, args.dir / f"history-10000-v{FORMAT_VERSION}.jsonl")
        measure("spark", small, args.dir / "work-warmup", args.driver_memory, archive)
        shutil.rmtree(args.dir / "work-warmup", ignore_errors=True)
        print(f"# wrote the JVM class archive {archive.name}", flush=True)
    rows = [r for ops in sizes for r in _measure_size(args, ops, flavour, archive)]
    (args.dir / "bench-results.json").write_text(json.dumps(rows, indent=2))
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
