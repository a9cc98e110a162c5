"""How long a local cluster takes to be ready, phase by phase, on each RabbitMQ release line.

Boots a local N-node cluster (network namespaces, as `harness run` does) `--rounds` times per
release line, the lines taking turns, and times each phase of its setup exactly as the runner
does it:

- rootfs: the release's binaries ready (a Debian root filesystem for 4.0; nothing for 3.10);
- namespaces: the bridge and one namespace per node;
- boot: every node configured and started in parallel, until each says it has booted (asked
  with erl_call; the nodes find each other as they boot: peer discovery);
- form: every node confirmed in the first one's cluster (a node that did not join is joined);
- store: the metadata store switched (Khepri; nothing for Mnesia);
- healthy: every node running, seeing all the others, no partition (nothing more to wait
  for when the form phase's statuses said so and the store was not switched, as in the runner);
- queue: a quorum queue declared with confirms.

"ready" is the sum: namespaces to queue declared (rootfs apart: built once). Beside the phases,
each round says where the machine's CPU went until the queue was declared: "cpu_brokers", the
CPU seconds of the nodes' Erlang VMs, and "cpu_cli", those of the harness's calls that awaited,
joined and checked them (erl_call, or the CLI: each `rabbitmqctl` is an Erlang VM of its own,
about 0.45 CPU seconds); on a machine with C cores a
cluster cannot be ready sooner than (cpu_brokers + cpu_cli) / C. "by_hand" counts the nodes
that did not join at boot. Prints every round and the median, minimum and maximum of each
phase per line; `--json FILE` keeps the raw
figures, `--logs DIR` each round's node logs (DIR/<line>-<round>/<node>/, read once the queue
is declared: the timestamps of a boot, a join, a peer discovery). Run it as `make bench-cluster` (root: namespaces). Nothing else may run a cluster
meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pika

from clusters.local.cluster import NetnsCluster, make_plan
from clusters.rabbitmq import BrokerConfig, RabbitBroker, healthy
from clusters.releases import RELEASES

STATE = Path(__file__).resolve().parent.parent / ".state"
PHASES = ("namespaces", "boot", "form", "store", "healthy", "queue")


def _declare(ip: str) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters(ip, connection_attempts=3,
                                                             retry_delay=0.5))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("bench.ready", durable=True, arguments={"x-queue-type": "quorum"})
    finally:
        conn.close()


def _wait_healthy(broker: RabbitBroker, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    want = [n.erlang_name for n in broker.nodes]
    while not healthy(broker.statuses(), want):
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster did not become healthy")
        time.sleep(0.2)


def _cpu_seconds(pid: int) -> float:
    """Takes a pid. Returns the CPU seconds (user and system) that process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def round_logs(root: Path, line: str, round_no: int) -> Path:
    """Takes the folder of `--logs`, a release line and a round's number (from 1). Returns the
    folder that round's node logs are copied into."""
    return root / f"{line}-{round_no}"


def one_round(line: str, nodes: int, store: str | None,
              logs: Path | None = None) -> dict[str, float]:
    """Takes a release line, a node count, a metadata store (None: the line's own) and where to
    copy the nodes' logs once ready (None: nowhere). Boots a cluster, times each phase, tears it
    down. Returns {phase: seconds} with "rootfs" and "ready", and the CPU seconds the brokers
    and the CLI calls used until ready ("cpu_brokers", "cpu_cli")."""
    cluster = NetnsCluster(make_plan(nodes), data_root=str(STATE / "cluster" / "bench-cluster"))
    broker = RabbitBroker(cluster.nodes, BrokerConfig(rabbitmq=line, metadata_store=store),
                          cluster.data_root)
    times: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], object]) -> None:
        t0 = time.monotonic()
        fn()
        times[name] = round(time.monotonic() - t0, 2)

    try:
        timed("rootfs", lambda: broker.use(cluster.launcher(broker.release)))
        cli0 = _children_cpu()
        timed("namespaces", cluster.create)
        timed("boot", lambda: broker.start_all(120))
        done: list[bool] = []  # form_cluster's and enable_metadata_store's answers
        timed("form", lambda: done.append(broker.form_cluster()))
        timed("store", lambda: done.append(not broker.enable_metadata_store()))
        timed("healthy", lambda: None if all(done) else _wait_healthy(broker))
        timed("queue", lambda: _declare(cluster.nodes[0].ip))
        # CLI calls are reaped children; the brokers run on until stopped, so are read live.
        times["cpu_cli"] = round(_children_cpu() - cli0, 2)
        pids = [broker.beam_pid(n) for n in broker.nodes]
        times["cpu_brokers"] = round(sum(_cpu_seconds(p) for p in pids if p), 2)
        times["by_hand"] = len(broker.joined_by_hand)
        if logs is not None:
            cluster.fetch_logs(broker, logs)
    finally:
        broker.stop_all()
        cluster.destroy()
        shutil.rmtree(cluster.data_root, ignore_errors=True)
    times["ready"] = round(sum(times[p] for p in PHASES), 2)
    return times


def report(rounds: dict[str, list[dict[str, float]]]) -> str:
    """Takes each line's rounds. Returns a table of each phase's median, the median CPU
    seconds of the brokers and the CLI calls, the nodes joined by hand in all rounds, and the
    ready time's median, min and max."""
    columns = (*PHASES, "cpu_brokers", "cpu_cli")
    out = ["| release | rounds | " + " | ".join(columns) +
           " | joined by hand | ready (median / min / max) |",
           "|---|---|" + "---|" * (len(columns) + 2)]
    for line, rs in rounds.items():
        cells = [f"{statistics.median(r.get(c, 0.0) for r in rs):.1f}" for c in columns]
        ready = [r["ready"] for r in rs]
        by_hand = sum(int(r.get("by_hand", 0)) for r in rs)
        out.append(f"| {line} | {len(rs)} | " + " | ".join(cells) + f" | {by_hand} | "
                   f"{statistics.median(ready):.1f} / {min(ready):.1f} / {max(ready):.1f} |")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark. Returns 0, or 2 when a cluster would not come up."""
    p = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.splitlines()[0])
    p.add_argument("--rabbitmq", default=",".join(RELEASES),
                   help="release lines, comma-separated (default every line)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--metadata-store", default=None,
                   help="the metadata store (default each line's own: Mnesia, Khepri on 4.3)")
    p.add_argument("--json", type=Path, help="write the raw figures here")
    p.add_argument("--logs", type=Path,
                   help="copy each round's node logs into LOGS/<line>-<round>/<node>/")
    a = p.parse_args(argv)
    lines = [x for x in a.rabbitmq.split(",") if x]
    unknown = [x for x in lines if x not in RELEASES]
    if unknown:
        print(f"unknown release(s): {', '.join(unknown)}; known: {', '.join(RELEASES)}",
              file=sys.stderr)
        return 2
    rounds: dict[str, list[dict[str, float]]] = {x: [] for x in lines}
    for k in range(a.rounds):
        for line in lines[k % len(lines):] + lines[:k % len(lines)]:  # lines take turns
            try:
                r = one_round(line, a.nodes, a.metadata_store,
                              round_logs(a.logs, line, k + 1) if a.logs else None)
            except Exception as e:  # a cluster that would not come up ends the benchmark
                print(f"{line} round {k + 1}: {type(e).__name__}: {e}", file=sys.stderr)
                return 2
            rounds[line].append(r)
            print(f"{line} round {k + 1}: " + ", ".join(f"{p} {r[p]:.1f}s"
                                                         for p in ("rootfs", *PHASES, "ready")),
                  flush=True)
    print(report(rounds))
    if a.json:
        a.json.write_text(json.dumps(rounds, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
