"""Throughput of the workload against raw pika doing the same work, side by side on one cluster.

Boots a local 3-node cluster (network namespaces, as `harness run` does) and
a quorum queue each time, then alternates three ways of doing the same work
for `--seconds` each, `--rounds` times (each round starting with another
kind, the queue deleted after each):

- raw: pika alone: publisher threads keeping `--window` unconfirmed publishes
  in flight with confirms, consumer threads acking every delivery
  (prefetch `--prefetch`); nothing is recorded;
- unrecorded: the harness's own Publisher and Consumer (workloads/) with a
  recorder that writes nothing, the same threads, window and prefetch;
- harness: the same clients, every invoke, completion, delivery and ack
  recorded into a history file.

It counts confirmed publishes plus acked deliveries per second (recorded ops)
and prints each round, the medians, harness / raw pika (the overhead against
raw pika: 1 - harness / raw), and the recording overhead alone: 1 - harness /
unrecorded. Run it as `make bench-workload` (root: namespaces).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pika

from clusters.local.cluster import NetnsCluster, make_plan
from clusters.rabbitmq import BrokerConfig, RabbitBroker, healthy
from history import HistoryWriter, Op, Recorder
from workloads.clients import ClientError, ClientOptions, Consumer, PublisherSlot, connect
from workloads.publisher import Publisher

STATE = Path(__file__).resolve().parent.parent / ".state"
# raw: pika alone; unrecorded: the harness's clients with a recorder that writes nothing;
# harness: the same clients recording every op into a history file.
KINDS = ("raw", "unrecorded", "harness")


class NullRecorder:
    """Takes ops and writes nothing: the harness's clients without the recording."""

    def append(self, op: Op) -> Op:
        """Returns the op as it came."""
        return op


class Counter:
    """A thread-safe count."""

    def __init__(self) -> None:
        self.n = 0
        self._lock = threading.Lock()

    def add(self, k: int = 1) -> None:
        with self._lock:
            self.n += k


def _wake() -> None:
    pass


def raw_publisher(host: str, queue: str, window: int, stop: threading.Event,
                  confirmed: Counter) -> None:
    """Publishes with confirms, `window` in flight, counting confirmed messages.

    A confirm wakes the waiting loop at once (a no-op ready event ends
    process_data_events), as the harness's Publisher does: without it a full
    window waits out each 50 ms poll slice and raw pika is handicapped."""
    conn = connect(host, ClientOptions())
    impl = conn.channel()._impl
    pending: set[int] = set()
    tag = 0

    def on_confirm(frame: Any) -> None:
        m = frame.method
        done = {t for t in pending if t <= m.delivery_tag} if m.multiple else {m.delivery_tag}
        pending.difference_update(done)
        if isinstance(m, pika.spec.Basic.Ack):
            confirmed.add(len(done))
        if done:
            conn.add_callback_threadsafe(_wake)

    ready: list[object] = []
    impl.confirm_delivery(ack_nack_callback=on_confirm, callback=ready.append)
    while not ready:
        conn.process_data_events(time_limit=0.05)
    props = pika.BasicProperties(delivery_mode=2)
    while not stop.is_set():
        while len(pending) >= window and not stop.is_set():
            conn.process_data_events(time_limit=0.05)
        tag += 1
        pending.add(tag)
        impl.basic_publish("", queue, f"raw-{tag}".encode(), props, mandatory=True)
        conn.process_data_events(time_limit=0)
    conn.close()


def raw_consumer(host: str, queue: str, prefetch: int, stop: threading.Event,
                 acked: Counter) -> None:
    """Consumes and acks every delivery, counting acks."""
    conn = connect(host, ClientOptions())
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    to_ack: list[int] = []
    ch.basic_consume(queue, lambda _c, m, _p, _b: to_ack.append(m.delivery_tag))
    while not stop.is_set():
        conn.process_data_events(time_limit=0.02)
        while to_ack:
            ch.basic_ack(to_ack.pop(0))
            acked.add()
    conn.close()


def harness_publisher(history: Recorder, host: str, queue: str, window: int, slot: int,
                      stop: threading.Event, confirmed: Counter) -> None:
    """The workload's Publisher, unthrottled, counting `ok` completions."""
    pub = Publisher(history, queue, "n", host, 1000 + slot,
                    ClientOptions(window=window), PublisherSlot(slot))
    pub.open()
    before = 0
    while not stop.is_set() and not pub.spent:
        pub.wait_for_room(time.monotonic() + 6)
        pub.send()
        pub.drive(time.monotonic())
        confirmed.add(pub.confirmed - before)
        before = pub.confirmed
    pub.close()


def harness_consumer(history: Recorder, host: str, queue: str, prefetch: int, k: int,
                     stop: threading.Event, acked: Counter) -> None:
    """The workload's Consumer, unthrottled, counting recorded acks."""
    con = Consumer(history, queue, "n", host, 2000 + k, ClientOptions(prefetch=prefetch))
    con.open()
    before = 0
    try:
        while not stop.is_set():
            con.poll(0.1)
            acked.add(con.acked - before)
            before = con.acked
    except ClientError:
        pass
    con.close()


Worker = Callable[[threading.Event, Counter, Counter], list[threading.Thread]]


def measure(start: Worker, seconds: float, warmup: float = 2.0) -> float:
    """Starts the workers, counts confirmed publishes plus acks over `seconds` after a warm-up.
    Returns ops/s."""
    stop = threading.Event()
    pubs, acks = Counter(), Counter()
    threads = start(stop, pubs, acks)
    time.sleep(warmup)
    p0, a0, t0 = pubs.n, acks.n, time.monotonic()
    time.sleep(seconds)
    ops = (pubs.n - p0) + (acks.n - a0)
    elapsed = time.monotonic() - t0
    stop.set()
    for t in threads:
        t.join(10)
    return ops / elapsed


def spawn(fns: Sequence[Callable[[], None]]) -> list[threading.Thread]:
    """Starts each function in a daemon thread. Returns the threads."""
    threads = [threading.Thread(target=f, daemon=True) for f in fns]
    for t in threads:
        t.start()
    return threads


def wait_whole(broker: RabbitBroker, timeout: float = 60.0) -> None:
    """Waits until every node runs and sees every other (joins restart the app). Raises
    RuntimeError past the timeout."""
    want = {n.erlang_name for n in broker.nodes}
    deadline = time.monotonic() + timeout
    while not healthy(broker.statuses(), want):
        if time.monotonic() > deadline:
            raise RuntimeError("the bench cluster did not come together")
        time.sleep(1)


@contextlib.contextmanager
def cluster(nodes: int) -> Iterator[tuple[list[str], RabbitBroker]]:
    """Boots a local cluster; yields (node addresses, broker); tears it down."""
    from harness.runner import run_lock

    with run_lock():
        data = str(STATE / "cluster" / f"bench-{int(time.time())}")
        net = NetnsCluster(make_plan(nodes), data_root=data)
        broker = RabbitBroker(net.nodes, BrokerConfig(), data)
        try:
            broker.use(net.launcher(broker.release))  # as a run's nodes: clusters.server_home
            net.create()
            broker.start_all()
            broker.form_cluster()
            wait_whole(broker)
            yield [n.ip for n in net.nodes], broker
        finally:
            with contextlib.suppress(Exception):
                broker.stop_all()
            net.destroy()


def main(argv: list[str] | None = None) -> int:
    """Runs the comparison. Returns 0."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--publishers", type=int, default=3)
    p.add_argument("--consumers", type=int, default=3)
    p.add_argument("--window", type=int, default=64)
    p.add_argument("--prefetch", type=int, default=200)
    a = p.parse_args(argv)
    results: dict[str, list[float]] = {k: [] for k in KINDS}
    with cluster(3) as (hosts, _broker), tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            # Each round starts with another kind, so no kind always runs on the freshest cluster.
            for kind in KINDS[r % len(KINDS):] + KINDS[:r % len(KINDS)]:
                queue = f"bench.{kind}.{r}"
                # A fresh connection each time: an idle one misses heartbeats during a round.
                conn = connect(hosts[0], ClientOptions())
                conn.channel().queue_declare(queue, durable=True,
                                             arguments={"x-queue-type": "quorum"})
                conn.close()
                history: Recorder = (HistoryWriter(Path(tmp) / f"{kind}-{r}.jsonl")
                                     if kind == "harness" else NullRecorder())

                def start(stop: threading.Event, pubs: Counter, acks: Counter,
                          kind: str = kind, queue: str = queue,
                          history: Recorder = history) -> list[threading.Thread]:
                    if kind == "raw":
                        return spawn(
                            [partial(raw_publisher, hosts[i % 3], queue, a.window, stop, pubs)
                             for i in range(a.publishers)]
                            + [partial(raw_consumer, hosts[i % 3], queue, a.prefetch, stop, acks)
                               for i in range(a.consumers)])
                    return spawn(
                        [partial(harness_publisher, history, hosts[i % 3], queue, a.window, i,
                                 stop, pubs) for i in range(a.publishers)]
                        + [partial(harness_consumer, history, hosts[i % 3], queue, a.prefetch, i,
                                   stop, acks) for i in range(a.consumers)])

                rate = measure(start, a.seconds)
                if isinstance(history, HistoryWriter):
                    history.close()
                # What a kind left queued would weigh on the next kind's broker.
                conn = connect(hosts[0], ClientOptions())
                conn.channel().queue_delete(queue)
                conn.close()
                results[kind].append(rate)
                print(f"round {r + 1} {kind:10} {rate:8.0f} ops/s "
                      f"(confirmed publishes + acked deliveries)", flush=True)
    raw, bare, har = (statistics.median(results[k]) for k in KINDS)
    print(f"median: raw pika {raw:.0f} ops/s, harness clients unrecorded {bare:.0f} ops/s, "
          f"harness recorded {har:.0f} ops/s")
    print(f"harness/raw pika {har / raw:.3f} (overhead against raw pika {1 - har / raw:.1%}); "
          f"recording overhead (recorded vs unrecorded clients) {1 - har / bare:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
