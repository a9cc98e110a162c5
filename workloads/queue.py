"""The queue workload: publishers and consumers against every node, then a drain from every node.

`QueueWorkload.setup` declares the queue (and its mirroring policy);
`run` keeps `publishers` publisher threads and `consumers` consumer threads
busy until told to stop, each thread playing a succession of processes:
when a process's op ends unknown or its connection breaks, it is retired and
a new process number takes its place on the next node, as Jepsen does.
`drain` consumes what is left from every node after the cluster healed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from clusters.base import Node
from clusters.rabbitmq import RabbitBroker
from harness.history import HistoryWriter
from workloads.clients import (
    AMQP_ERRORS,
    ClientError,
    ClientOptions,
    Consumer,
    ProcessIds,
    Publisher,
    abandon,
    connect,
)
from workloads.queues import QueueSpec, ha_policy, queue_arguments, reads_whole_log

log = logging.getLogger(__name__)


class WorkloadConfigError(ValueError):
    """An impossible workload option."""


@dataclass(frozen=True)
class WorkloadOptions:
    """How hard and how the workload drives the queue."""

    publishers: int = 3
    consumers: int = 2
    rate: float = 100.0  # publishes per second, all publishers together
    client: ClientOptions = field(default_factory=ClientOptions)
    drain_idle_s: float = 2.0
    drain_timeout_s: float = 120.0
    reconnect_delay_s: float = 0.5

    def validate(self) -> None:
        """Raises WorkloadConfigError for an impossible option."""
        if self.publishers < 1:
            raise WorkloadConfigError(f"publishers must be >= 1, got {self.publishers}")
        if self.consumers < 0:
            raise WorkloadConfigError(f"consumers must be >= 0, got {self.consumers}")
        if not self.rate > 0:
            raise WorkloadConfigError(f"rate must be > 0 publishes/s, got {self.rate}")
        if not self.client.publish_timeout_s > 0:
            raise WorkloadConfigError("publish timeout must be > 0")
        if self.client.prefetch < 0:
            raise WorkloadConfigError("prefetch must be >= 0")
        if self.client.crash_after < 0:
            raise WorkloadConfigError("crash-after must be >= 0 deliveries")


@dataclass
class DrainReport:
    """What the drain did: deliveries per node, and whether a whole pass found the queue empty."""

    delivered: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    complete: bool = False


class QueueWorkload:
    """Publishers and consumers on one queue of a cluster, recorded into a history."""

    def __init__(
        self, spec: QueueSpec, opts: WorkloadOptions, nodes: Sequence[Node],
        history: HistoryWriter,
    ) -> None:
        self.spec = spec
        self.opts = opts
        self.nodes = tuple(nodes)
        self.history = history
        self.pids = ProcessIds()
        self._threads: list[threading.Thread] = []
        # Consumers of a stream read it from the first offset: each sees the whole log.
        self.stream = reads_whole_log(spec)
        self.consumer_opts = (dataclasses.replace(opts.client, stream_offset="first")
                              if self.stream else opts.client)

    # -- setup ------------------------------------------------------------------------

    def setup(self, broker: RabbitBroker) -> None:
        """Sets the mirroring policy (if any) and declares the queue. Raises ClientError."""
        policy = ha_policy(self.spec, {n.name: n.erlang_name for n in self.nodes})
        if policy is not None:
            pattern = "^" + self.spec.name.replace(".", r"\.") + "$"
            broker.ctl(self.nodes[0], "set_policy", "--apply-to", "queues", "--priority", "1",
                       "harness-ha", pattern, json.dumps(policy))
        conn = connect(self.nodes[0].ip, self.opts.client)
        try:
            conn.channel().queue_declare(
                self.spec.name, durable=self.spec.durable, arguments=queue_arguments(self.spec)
            )
        except AMQP_ERRORS as e:
            raise ClientError(f"declare {self.spec.name}: {type(e).__name__}: {e}") from e
        finally:
            abandon(conn)
        log.info("declared %s queue %s", self.spec.type, self.spec.name)

    # -- main phase -------------------------------------------------------------------

    def start(self, stop: threading.Event) -> None:
        """Starts the publisher and consumer threads; they run until `stop` is set."""
        for k in range(self.opts.publishers):
            self._threads.append(threading.Thread(
                target=self._publish_loop, args=(k, stop), name=f"publisher-{k}", daemon=True))
        for k in range(self.opts.consumers):
            self._threads.append(threading.Thread(
                target=self._consume_loop, args=(k, stop), name=f"consumer-{k}", daemon=True))
        for t in self._threads:
            t.start()

    def join(self, timeout: float = 30.0) -> None:
        """Waits for the worker threads to finish (after `stop` was set)."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.1, deadline - time.monotonic()))
            if t.is_alive():
                log.warning("worker %s did not stop in time", t.name)

    def _publish_loop(self, slot: int, stop: threading.Event) -> None:
        interval = self.opts.publishers / self.opts.rate
        node_ix = slot
        while not stop.is_set():
            node = self.nodes[node_ix % len(self.nodes)]
            pub = Publisher(self.history, self.spec.name, node.name, node.ip, self.pids.next(),
                            self.opts.client)
            try:
                pub.open()
            except ClientError as e:
                log.info("publisher %d cannot open on %s: %s", pub.process, node.name, e)
                node_ix += 1
                stop.wait(self.opts.reconnect_delay_s)
                continue
            next_at = time.monotonic()
            while not stop.is_set():
                outcome = pub.publish()
                if outcome == "info":
                    break  # the process is retired: its state is unknown
                next_at += interval
                stop.wait(max(0.0, next_at - time.monotonic()))
            pub.close()
            node_ix += 1

    def _consume_loop(self, slot: int, stop: threading.Event) -> None:
        node_ix = slot
        while not stop.is_set():
            node = self.nodes[node_ix % len(self.nodes)]
            con = Consumer(self.history, self.spec.name, node.name, node.ip, self.pids.next(),
                           self.consumer_opts)
            try:
                con.open()
                while not stop.is_set():
                    con.poll(0.2)
            except ClientError as e:
                if not con.crashed:
                    log.info("consumer %d on %s retired: %s", con.process, node.name, e)
                    stop.wait(self.opts.reconnect_delay_s)
            con.close()
            node_ix += 1

    # -- drain ------------------------------------------------------------------------

    def drain(self) -> DrainReport:
        """Consumes every remaining message, from every node in turn, then checks a pass is empty.

        Returns a DrainReport. A node that cannot be reached is noted and skipped.
        """
        report = DrainReport()
        deadline = time.monotonic() + self.opts.drain_timeout_s
        # A queue is drained when a whole pass finds nothing left; a stream is read whole
        # from every node once (reading removes nothing), complete if any node could be read.
        for _round in range(1 if self.stream else 3):
            took = 0
            for node in self.nodes:
                n, err = self._drain_node(node, deadline)
                took += n
                report.delivered[node.name] = report.delivered.get(node.name, 0) + n
                if err:
                    report.errors[node.name] = err
            reached = [n for n in self.nodes if n.name not in report.errors]
            if reached and (took == 0 or self.stream):
                report.complete = True
                break
            if time.monotonic() > deadline:
                break
        log.info("drain: %s (complete=%s, errors=%s)", report.delivered, report.complete,
                 report.errors or "none")
        return report

    def _drain_node(self, node: Node, deadline: float) -> tuple[int, str | None]:
        drain_opts = dataclasses.replace(self.consumer_opts, prefetch=200, crash_after=0)
        con = Consumer(self.history, self.spec.name, node.name, node.ip, self.pids.next(),
                       drain_opts, f="drain", phase="drain")
        try:
            con.open()
            while time.monotonic() < deadline:
                con.poll(0.2)
                idle = time.monotonic() - con.last_delivery
                if idle >= self.opts.drain_idle_s and (self.stream or con.ready_count() == 0):
                    break
            return con.delivered, None
        except ClientError as e:
            return con.delivered, str(e)
        finally:
            con.close()
