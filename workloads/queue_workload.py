"""The queue workload: publishers and consumers against every node, then a drain from every node.

`QueueWorkload.setup` declares the queue (and its mirroring policy);
`run` keeps `publishers` publisher threads and `consumers` consumer threads
busy until told to stop, each thread playing a succession of processes:
when a process's op ends unknown or its connection breaks, it is retired and
a new process number takes its place on the next node, as Jepsen does.
`stay` keeps publishers, consumers or both as long-lived applications are
instead: one channel across faults and heals, a confirm awaited up to
`confirm_deadline_s` (minutes), a subscription never dropped by the harness;
such a client still retires when its connection closes, and what it never
saw settled is `info` when the main phase ends (checkers.settlement judges it).
`drain` consumes what is left from every node after the cluster healed.

Messages are only at risk while they sit in the queue, so by default the
consumers are slower than the publishers (`consume_rate` below `rate`): the
queue holds a standing backlog of thousands of messages through every fault,
and the drain reads it back at the end. `consumers=0` makes the main phase
publish-only; `pause_consumers_in_faults` stops consuming while a fault is on;
`backlog` publishes that many messages before the main phase, so the first
fault already finds them queued. `priorities` is the distribution each
publisher draws its messages' priorities from (workloads.priorities), seeded
per publisher from the run's seed; a run that publishes priorities records, at
setup, what the checker needs to judge them: a harness observation `f
"priorities"` (`priorities_observation`: the queue, its kind, the release line
the broker announced and that line's priority levels and whether it serves
them strictly, the prefetch of the main phase's and the drain's consumers,
and single active consumer).

The drain is complete only when the broker itself says the queue is empty
(0 ready, 0 unacknowledged) from a source that fails loudly, asked of every
node after the drain consumers were registered and idle: for a stream, when
a drain consumer read up to the stream's last committed offset.

A queue that drops messages by design (a max length with overflow
drop-head, a delivery limit: workloads.queue_spec.dead_lettering) is declared
with a dead-letter exchange. Unless the spec names the user's own, `setup`
declares the harness's: a fanout exchange "<queue>.harness-dlx" bound to a
durable queue "<queue>.harness-dlq" of the queue's own kind (a quorum queue's
dead letters are kept as safely as the queue kept them; whatever the
dead-letter queue itself loses then counts as lost, never as dropped). It
records how the queue dead-letters as a harness observation, `f
"dead-lettering"` (value: queue, exchange, dead_letter_queue, by "harness" or
"user", limits), which the checker reads. After the queue is proven empty,
`drain` reads the dead-letter queue from every node the same way, recording
each message as an op f "dead-letter" (workloads.clients), until the broker
proves it empty too; the drain is complete only when both are.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from clusters.base import Node
from clusters.rabbitmq import BrokerError
from clusters.rabbitmq_admin import QueueDepth, RabbitAdmin
from clusters.releases import default_delivery_limit, known_line, line_of, release
from clusters.remote import RemoteError
from history import CLIENTS, DEAD_LETTER, HARNESS, PRIORITIES, Op, Recorder
from workloads.clients import (
    AMQP_ERRORS,
    ClientError,
    ClientOptions,
    Consumer,
    DeclareRefused,
    ProcessIds,
    PublisherSlot,
    abandon,
    answer_within,
    broker_refusal,
    connect,
    join_threads,
    server_version,
)
from workloads.errors import WorkloadError
from workloads.kinds import QueueKind, kind_of
from workloads.priorities import PriorityDraw, levels, parse
from workloads.publisher import Publisher
from workloads.queue_spec import (
    DeadLettering,
    QueueSpec,
    dead_letter_queue_spec,
    dead_lettering,
    ha_policy,
    queue_arguments,
)

log = logging.getLogger(__name__)


class WorkloadConfigError(WorkloadError, ValueError):
    """An impossible workload option."""


# Which clients stay across faults and heals (WorkloadOptions.stay).
STAYS = ("none", "publishers", "consumers", "both")


@dataclass(frozen=True)
class WorkloadOptions:
    """How hard and how the workload drives the queue."""

    publishers: int = 3
    consumers: int = 2
    rate: float = 200.0  # publishes per second, all publishers together
    # Acks per second, all consumers together (None: as fast as deliveries come). Below
    # `rate`, the queue keeps a growing backlog for the faults to put at risk.
    consume_rate: float | None = 50.0
    pause_consumers_in_faults: bool = False
    # Messages published (and confirmed) before the main phase, so that the first fault
    # already finds at least this many queued.
    backlog: int = 0
    # The distribution each message's priority is drawn from (workloads.priorities: "0,9",
    # "none:2,1,9"); None: no message carries a priority.
    priorities: str | None = None
    client: ClientOptions = field(default_factory=ClientOptions)
    drain_idle_s: float = 2.0
    drain_timeout_s: float = 120.0
    reconnect_delay_s: float = 0.5
    # Seconds between two rounds of the metadata probe of each node (connect, declare, bind,
    # delete: workloads.metadata_probe), started beside the clients; 0: no probe.
    metadata_probe_interval_s: float = 0.0
    # Seconds each op of the probe may take before it is recorded unknown (info).
    metadata_probe_timeout_s: float = 5.0
    # Which clients stay (STAYS): "none", every client a Jepsen process retired at its first
    # unknown outcome (a confirm not come within the publish timeout); "publishers",
    # "consumers" or "both" keep their connection and channel across faults and heals, as
    # long-lived applications do: a staying publisher waits up to `confirm_deadline_s` for each
    # confirm (its window stays in flight) and so retires only on a closed connection or a
    # confirm that never came in minutes; a staying consumer keeps its subscription and its
    # unacked deliveries (it is never paused in faults and never planted a crash).
    stay: str = "none"
    confirm_deadline_s: float = 300.0

    @property
    def publishers_stay(self) -> bool:
        """Returns whether the publishers keep their channel across faults (`stay`)."""
        return self.stay in ("publishers", "both")

    @property
    def consumers_stay(self) -> bool:
        """Returns whether the consumers keep their subscription across faults (`stay`)."""
        return self.stay in ("consumers", "both")

    def publisher_client(self) -> ClientOptions:
        """Returns the publishers' client options: a staying publisher's publish timeout is the
        confirm deadline."""
        if not self.publishers_stay:
            return self.client
        return dataclasses.replace(self.client, publish_timeout_s=self.confirm_deadline_s)

    def validate(self) -> None:
        """Raises WorkloadConfigError for an impossible option."""
        if self.publishers < 1:
            raise WorkloadConfigError(f"publishers must be >= 1, got {self.publishers}")
        if self.consumers < 0:
            raise WorkloadConfigError(f"consumers must be >= 0, got {self.consumers}")
        if not self.rate > 0:
            raise WorkloadConfigError(f"rate must be > 0 publishes/s, got {self.rate}")
        self._check_consuming()
        if self.backlog < 0:
            raise WorkloadConfigError(f"backlog must be >= 0 messages, got {self.backlog}")
        if self.drain_idle_s <= 0 or self.drain_timeout_s <= 0:
            raise WorkloadConfigError("drain idle time and timeout must be > 0")
        if self.priorities is not None:
            parse(self.priorities)  # PriorityError, a ValueError, names what is wrong
        self._check_client()
        self._check_probe()
        self._check_stay()

    def _check_stay(self) -> None:
        """Raises WorkloadConfigError for an unknown `stay`, a confirm deadline not above 0, or
        staying consumers asked to pause in faults or to crash (both end the subscription)."""
        if self.stay not in STAYS:
            raise WorkloadConfigError(f"--stay must be one of {', '.join(STAYS)}, got "
                                      f"{self.stay!r}")
        if not self.confirm_deadline_s > 0:
            raise WorkloadConfigError(f"--confirm-deadline must be > 0 seconds, got "
                                      f"{self.confirm_deadline_s}")
        if self.consumers_stay and (self.pause_consumers_in_faults or self.client.crash_after):
            raise WorkloadConfigError(
                f"--stay {self.stay}: a staying consumer keeps its subscription through faults, "
                "so it can be neither paused in faults (--pause-consumers-in-faults) nor "
                "crashed (--consumer-crash-after)")

    def _check_probe(self) -> None:
        """Raises WorkloadConfigError for a metadata probe interval below 0 or a timeout not
        above 0."""
        if not self.metadata_probe_interval_s >= 0:
            raise WorkloadConfigError(f"metadata probe interval must be >= 0 seconds (0: no "
                                      f"probe), got {self.metadata_probe_interval_s}")
        if not self.metadata_probe_timeout_s > 0:
            raise WorkloadConfigError(f"metadata probe timeout must be > 0 seconds, got "
                                      f"{self.metadata_probe_timeout_s}")

    def _check_consuming(self) -> None:
        """Raises WorkloadConfigError for a consume rate or consumers paused in faults
        without consumers, or a consume rate not > 0."""
        if self.consume_rate is not None:
            if self.consumers == 0:
                raise WorkloadConfigError(
                    f"a consume rate ({self.consume_rate:g}/s) needs consumers; with "
                    "--consumers 0 the main phase only publishes")
            if not self.consume_rate > 0:
                raise WorkloadConfigError(
                    f"consume rate must be > 0 acks/s, got {self.consume_rate}")
        if self.pause_consumers_in_faults and self.consumers == 0:
            raise WorkloadConfigError("pausing consumers during faults needs consumers")

    def _check_client(self) -> None:
        """Raises WorkloadConfigError for an impossible client option: publish timeout,
        window, prefetch or crash-after."""
        if not self.client.publish_timeout_s > 0:
            raise WorkloadConfigError("publish timeout must be > 0")
        if self.client.window < 1:
            raise WorkloadConfigError(
                f"publish window must be >= 1 message in flight, got {self.client.window}")
        if self.client.prefetch < 0:
            raise WorkloadConfigError("prefetch must be >= 0")
        if self.client.crash_after < 0:
            raise WorkloadConfigError("crash-after must be >= 0 deliveries")
        self._check_settling()

    # The least x-consumer-timeout the harness sends (ms). RabbitMQ checks consumer timeouts
    # periodically, not at the instant, and its docs warn against short timeouts; below a
    # second a timeout would fire at the check's pace, not the option's, so the harness does
    # not claim to test one.
    MIN_CONSUMER_TIMEOUT_MS = 1000

    def _check_settling(self) -> None:
        """Raises WorkloadConfigError for a reject, nack or hold share outside 0..1 (or
        together above 1), a hold without its seconds, a consumer timeout below
        MIN_CONSUMER_TIMEOUT_MS, or any of them without consumers."""
        c = self.client
        shares = {"--reject-share": c.reject_share, "--nack-share": c.nack_share,
                  "--hold-share": c.hold_share}
        for flag, share in shares.items():
            if not 0 <= share <= 1:
                raise WorkloadConfigError(f"{flag} must be 0..1, got {share}")
        if sum(shares.values()) > 1:
            raise WorkloadConfigError(
                "--reject-share, --nack-share and --hold-share must add up to at most 1, got "
                f"{sum(shares.values()):g}")
        if c.hold_s < 0 or (c.hold_share > 0) != (c.hold_s > 0):
            raise WorkloadConfigError(
                f"--hold-share and --hold-s go together (a share of deliveries held that many "
                f"seconds > 0), got {c.hold_share:g} and {c.hold_s:g}")
        if c.consumer_timeout_ms is not None and c.consumer_timeout_ms < \
                self.MIN_CONSUMER_TIMEOUT_MS:
            raise WorkloadConfigError(
                f"--consumer-timeout-ms must be >= {self.MIN_CONSUMER_TIMEOUT_MS} ms, got "
                f"{c.consumer_timeout_ms}: RabbitMQ checks consumer timeouts periodically and "
                "its docs advise against short ones, so a shorter one would not be the timeout "
                "under test")
        if self.consumers == 0 and (any(shares.values()) or c.consumer_timeout_ms is not None):
            raise WorkloadConfigError(
                "rejects, nacks, holds and a consumer timeout need consumers (--consumers > 0)")


@dataclass
class DrainReport:
    """What the drain did: deliveries per node, and whether the broker proved the queue empty.

    `reason` says why the drain is not complete (or, when complete, anything worth knowing,
    such as a queue that no longer exists, or the nodes it was proven empty without); `depth`
    is each serving node's last answer; `without` the nodes that would not boot again, neither
    read nor asked. When the harness reads dead letters, `dead_letter` is the same report of
    its dead-letter queue (a dict, with the queue's name), and `complete` holds only when both
    are complete.
    """

    delivered: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    complete: bool = False
    reason: str | None = None
    depth: dict[str, Any] = field(default_factory=dict)
    dead_letter: dict[str, Any] | None = None
    # The nodes the drain did without: they would not boot again after the faults.
    without: list[str] = field(default_factory=list)


# Unacknowledged deliveries a drain consumer may hold.
DRAIN_PREFETCH = 200


def priorities_observation(spec: QueueSpec, opts: WorkloadOptions,
                           version: str | None) -> dict[str, Any]:
    """Takes the queue spec, the workload's options and the broker's version (None: unknown).
    Returns the value of the `priorities` observation: queue, type, version, line (the release
    record whose answers hold for it), levels and strict (its quorum queues' priority levels and
    whether it serves them strictly; None and false for an unknown line), prefetch ({"consume":
    the main phase's consumers', "drain": the drain's}), single_active_consumer and the
    distribution."""
    line = known_line(version) if version is not None else None
    record = release(line) if line is not None else None
    return {"queue": spec.name, "type": spec.type, "version": version, "line": line,
            "levels": record.priority_levels if record is not None else None,
            "strict": record.strict_priority if record is not None else False,
            "prefetch": {"consume": opts.client.prefetch, "drain": DRAIN_PREFETCH},
            "single_active_consumer": spec.single_active_consumer,
            "distribution": opts.priorities}


def _wait_for_room(pub: Publisher, deadline: float, stop: threading.Event) -> None:
    """Takes a publisher, a monotonic deadline and the run's stop event. Runs its I/O until it
    has room in its window, is spent, the deadline passes or the run stops (looked at twice a
    second: a staying publisher may wait minutes for a confirm)."""
    while pub.in_flight >= pub.opts.window and not pub.spent and not stop.is_set():
        now = time.monotonic()
        if now >= deadline:
            return
        pub.wait_for_room(min(deadline, now + 0.5))


class QueueWorkload:
    """Publishers and consumers on one queue of a cluster, recorded into a history. Takes the
    queue spec, the workload's options, the nodes, the recorder and the run's seed (the
    publishers' priority draws start from it; None: 0)."""

    def __init__(
        self, spec: QueueSpec, opts: WorkloadOptions, nodes: Sequence[Node],
        history: Recorder, seed: int | None = None,
    ) -> None:
        self.spec = spec
        self.opts = opts
        self.nodes = tuple(nodes)
        self.history = history
        self.pids = ProcessIds()
        # Each publisher thread's identity; the backlog is published as publisher 0, whose
        # thread continues its sequence in the main phase.
        self._slots = [PublisherSlot(k) for k in range(opts.publishers)]
        # Each publisher's priority draw (None: messages without priorities).
        choices = parse(opts.priorities) if opts.priorities is not None else None
        self._priorities = [
            PriorityDraw(choices, random.Random(f"{seed or 0}-priorities-{k}"))
            if choices is not None else None for k in range(opts.publishers)]
        self._threads: list[threading.Thread] = []
        self.kind = kind_of(spec)
        # Consumers of a log (a stream) say where they start reading.
        offset = self.kind.consumer_offset()
        self.consumer_opts = (dataclasses.replace(opts.client, stream_offset=offset)
                              if offset is not None else opts.client)
        if spec.consumer_timeout_ms is not None:  # the queue's argument carries it (4.0)
            self.consumer_opts = dataclasses.replace(self.consumer_opts, consumer_timeout_ms=None)
        # Where the queue dead-letters, once setup knows the broker's release line.
        self.dead_letters: DeadLettering | None = None

    # -- setup ------------------------------------------------------------------------

    def _declare(self, conn: Any, dlq: QueueSpec | None, version: str | None) -> None:
        """Takes an open connection, the harness's dead-letter queue (None: none) and the
        broker's version. Declares that queue, its exchange and binding, then the queue. Raises
        DeclareRefused naming the queue, its arguments and the broker's reply when the broker
        refuses a declare (it closes the channel); any other AMQP error as it came."""
        declaring: tuple[str, dict[str, Any]] | None = None  # the queue being declared
        try:
            with answer_within(conn, self.opts.client.answer_timeout_s, "queue.declare"):
                ch = conn.channel()
                if dlq is not None and self.dead_letters is not None:
                    ch.exchange_declare(self.dead_letters.exchange, "fanout", durable=True)
                    declaring = (dlq.name, queue_arguments(dlq))
                    ch.queue_declare(dlq.name, durable=True, arguments=declaring[1])
                    ch.queue_bind(dlq.name, self.dead_letters.exchange)
                declaring = (self.spec.name, queue_arguments(self.spec, self.dead_letters))
                ch.queue_declare(self.spec.name, durable=self.spec.durable,
                                 arguments=declaring[1])
        except AMQP_ERRORS as e:
            said = broker_refusal(e)
            if said is None or declaring is None:
                raise
            raise DeclareRefused(
                f"RabbitMQ {version or '(version unknown)'} refused to declare queue "
                f"{declaring[0]} with arguments {declaring[1]}: {said}") from e

    def setup(self, admin: RabbitAdmin) -> None:
        """Takes the cluster's queue admin. Sets the policy the queue's kind needs (mirroring),
        if any, and declares the queue; when it drops messages by design (on the release line
        the broker announces), first the dead-letter exchange and queue of the harness, and
        records how it dead-letters. Raises DeclareRefused (a ClientError) naming the queue, its
        arguments and the broker's reply when the broker refuses a declare, ClientError for any
        other client failure, or RemoteError for a policy."""
        names = {n.name: n.erlang_name for n in self.nodes}
        policy = ha_policy(self.spec, names)
        if policy is not None:
            admin.set_policy("harness-ha", self.spec.name, policy)
        conn = connect(self.nodes[0].ip, self.opts.client)
        try:
            version = server_version(conn)
            line = line_of(version) if version is not None else None
            self.dead_letters = dead_lettering(self.spec, line)
            dlq = self._dead_letter_spec()
            if dlq is not None:
                dlq_policy = ha_policy(dlq, names)
                if dlq_policy is not None:
                    admin.set_policy("harness-dlq-ha", dlq.name, dlq_policy)
            self._declare(conn, dlq, version)
        except AMQP_ERRORS as e:
            raise ClientError(f"declare {self.spec.name}: {type(e).__name__}: {e}") from e
        finally:
            abandon(conn)
        log.info("declared %s queue %s (RabbitMQ %s)", self.spec.type, self.spec.name,
                 version or "of unknown version")
        if self.dead_letters is not None:
            seen = self.dead_letters.observation(self.spec.name)
            log.info("the queue dead-letters to %s (%s): %s", seen["exchange"], seen["by"],
                     ", ".join(seen["limits"]) or "no limit of the harness's")
            self.history.append(Op(type="info", process=HARNESS, f="dead-lettering",
                                   value=seen))
        if self.opts.client.consumer_timeout_ms is not None:
            self.history.append(Op(type="info", process=HARNESS, f="consumer-timeout", value={
                "queue": self.spec.name, "timeout_ms": self.opts.client.consumer_timeout_ms,
                "hold_share": self.opts.client.hold_share, "hold_s": self.opts.client.hold_s,
                "single_active_consumer": self.spec.single_active_consumer,
                "consumer_cancel_notify": self.opts.client.consumer_cancel_notify,
                "via": ("queue argument" if self.spec.consumer_timeout_ms is not None
                        else "consumer argument")}))
        if self.spec.delayed_retry_set():
            self.history.append(Op(type="info", process=HARNESS, f="delayed-retry",
                                   value=self._delayed_retry(line)))
        if levels(self.opts.priorities):
            self.history.append(Op(type="info", process=HARNESS, f=PRIORITIES,
                                   value=priorities_observation(self.spec, self.opts, version)))
        if self.opts.backlog:
            self._publish_backlog(self.opts.backlog)

    def _delayed_retry(self, line: str | None) -> dict[str, Any]:
        """Takes the broker's release line (None: unknown). Returns the value of the harness's
        `delayed-retry` observation, which checkers.retry judges by: queue, type, min_ms,
        max_ms and the delivery limit in force (the spec's, else the line's default)."""
        limit = self.spec.delivery_limit
        if limit is None and line is not None:
            limit = default_delivery_limit(line)
        return {"queue": self.spec.name, "type": self.spec.delayed_retry_type,
                "min_ms": self.spec.delayed_retry_min_ms,
                "max_ms": self.spec.delayed_retry_max_ms, "delivery_limit": limit}

    def _dead_letter_spec(self) -> QueueSpec | None:
        """Returns the spec of the harness's dead-letter queue, or None when it reads none."""
        if self.dead_letters is None or self.dead_letters.queue is None:
            return None
        return dead_letter_queue_spec(self.spec)

    # Each process of the backlog keeps this many publishes in flight, at the least; the backlog
    # must be confirmed within BACKLOG_PATIENCE_S plus a second per 200 messages.
    BACKLOG_WINDOW = 64
    BACKLOG_PATIENCE_S = 60.0

    def _publish_backlog(self, count: int) -> None:
        """Publishes `count` messages with confirms before the main phase, node after node
        until that many are confirmed (their ops say phase "main", the history contract's one
        phase of the workload before the drain; they come before the main phase's start
        event). Raises ClientError when they are not confirmed in time (BACKLOG_PATIENCE_S)."""
        opts = dataclasses.replace(self.opts.client,
                                   window=max(self.opts.client.window, self.BACKLOG_WINDOW))
        deadline = time.monotonic() + self.BACKLOG_PATIENCE_S + count / 200
        confirmed, node_ix = 0, 0
        while confirmed < count:
            if time.monotonic() > deadline:
                raise ClientError(f"backlog: only {confirmed} of {count} messages confirmed "
                                  f"before the main phase")
            node = self.nodes[node_ix % len(self.nodes)]
            node_ix += 1
            pub = Publisher(self.history, self.spec.name, node.name, node.ip, self.pids.next(),
                            opts, self._slots[0], self._priorities[0])
            try:
                pub.open()
            except ClientError as e:
                log.info("backlog publisher cannot open on %s: %s", node.name, e)
                time.sleep(self.opts.reconnect_delay_s)
                continue
            while not pub.spent and confirmed + pub.confirmed + pub.in_flight < count:
                pub.wait_for_room(deadline)
                if pub.spent or time.monotonic() > deadline:
                    break
                pub.send()
            pub.settle()
            confirmed += pub.confirmed
            pub.close()
        log.info("backlog: %d messages confirmed before the main phase", confirmed)

    # -- main phase -------------------------------------------------------------------

    def start(self, stop: threading.Event,
              fault_active: Callable[[], bool] = lambda: False) -> None:
        """Starts the publisher and consumer threads; they run until `stop` is set.

        `fault_active` says whether a fault is on now (consumers pause then, when the
        options say so).
        """
        self._fault_active = fault_active
        self.history.append(Op(type="info", process=HARNESS, f=CLIENTS,
                               value=self.clients_observation()))
        for k in range(self.opts.publishers):
            self._threads.append(threading.Thread(
                target=self._publish_loop, args=(k, stop), name=f"publisher-{k}", daemon=True))
        for k in range(self.opts.consumers):
            self._threads.append(threading.Thread(
                target=self._consume_loop, args=(k, stop), name=f"consumer-{k}", daemon=True))
        for t in self._threads:
            t.start()

    def clients_observation(self) -> dict[str, Any]:
        """Returns the value of the harness's `clients` observation, recorded as the clients
        start (checkers.settlement reads it): the queue, its type, single active consumer,
        whether its consumers share its ready messages (a log's each read at their own
        offset) and, on a log, the offset they start from ("first": each reads it whole),
        which clients stay across faults, and the publishers' confirm deadline and the
        retiring publish timeout (s)."""
        return {"queue": self.spec.name, "type": self.spec.type,
                "single_active_consumer": self.spec.single_active_consumer,
                "consumers_share": self.kind.consumer_offset() is None,
                "reads_from": self.kind.consumer_offset(),
                "stay": self.opts.stay,
                "confirm_deadline_s": self.opts.publisher_client().publish_timeout_s,
                "publish_timeout_s": self.opts.client.publish_timeout_s}

    def join(self, timeout: float = 30.0) -> None:
        """Waits for the worker threads to finish (after `stop` was set)."""
        join_threads(self._threads, timeout, "worker")

    def _publish_loop(self, slot: int, stop: threading.Event) -> None:
        interval = self.opts.publishers / self.opts.rate
        node_ix = slot
        ident = self._slots[slot]
        client = self.opts.publisher_client()
        patience = client.publish_timeout_s + 1.0
        while not stop.is_set():
            node = self.nodes[node_ix % len(self.nodes)]
            pub = Publisher(self.history, self.spec.name, node.name, node.ip, self.pids.next(),
                            client, ident, self._priorities[slot])
            try:
                pub.open()
            except ClientError as e:
                log.info("publisher %d cannot open on %s: %s", pub.process, node.name, e)
                node_ix += 1
                stop.wait(self.opts.reconnect_delay_s)
                continue
            next_at = time.monotonic()
            while not stop.is_set() and not pub.spent:
                _wait_for_room(pub, time.monotonic() + patience, stop)
                if pub.spent or stop.is_set():
                    break  # retired (its state is unknown), or the run is over
                pub.send()
                next_at = max(next_at + interval, time.monotonic() - 1.0)
                pub.drive(next_at)
            # A staying publisher's confirm deadline is minutes: at the run's end it waits as
            # long as a retiring one would, and what is still unconfirmed then ends `info`.
            pub.settle(within=self.opts.client.publish_timeout_s)
            pub.close()
            node_ix += 1

    def _paused(self) -> bool:
        return (self.opts.pause_consumers_in_faults and not self.opts.consumers_stay
                and self._fault_active())

    def _consume_loop(self, slot: int, stop: threading.Event) -> None:
        node_ix = slot
        rate = self.opts.consume_rate
        ack_interval = self.opts.consumers / rate if rate else 0.0
        while not stop.is_set():
            if self._paused():
                stop.wait(0.2)
                continue
            node = self.nodes[node_ix % len(self.nodes)]
            con = Consumer(self.history, self.spec.name, node.name, node.ip, self.pids.next(),
                           self.consumer_opts, ack_interval_s=ack_interval,
                           single_active=self.spec.single_active_consumer)
            try:
                con.open()
                while not stop.is_set() and not self._paused():
                    con.poll(0.2)
            except ClientError as e:
                if not con.crashed:
                    log.info("consumer %d on %s retired: %s", con.process, node.name, e)
                    stop.wait(self.opts.reconnect_delay_s)
            con.close()
            node_ix += 1

    # -- drain ------------------------------------------------------------------------

    def drain(self, admin: RabbitAdmin, down: Collection[str] = ()) -> DrainReport:
        """Consumes every remaining message, from every node in turn, until the broker proves
        the queue empty (its kind says how: for a stream, a node read to its last offset).

        Takes the queue admin, asked for the queue's depth, and the nodes that would not boot
        again after the faults: those are neither read nor asked, and the queue's kind says
        whether the others can prove it empty without them (QueueKind.proof_without). Returns a
        DrainReport; a node that cannot be reached is noted and skipped.
        """
        report = self._drain_queue(admin, self.spec.name, self.kind, "drain", down,
                                   single_active=self.spec.single_active_consumer)
        dlq = self._dead_letter_spec()
        if dlq is not None:
            # The queue is proven empty (or the drain gave up on it): nothing more can die in
            # it, and what died on its way out has had the drain's idle time to arrive.
            dead = self._drain_queue(admin, dlq.name, kind_of(dlq), DEAD_LETTER, down)
            report.dead_letter = {"queue": dlq.name, **{
                k: v for k, v in dataclasses.asdict(dead).items() if k != "dead_letter"}}
            if report.complete and not dead.complete:
                report.complete = False
                report.reason = f"the dead-letter queue {dlq.name}: {dead.reason}"
        log.info("drain: %s (complete=%s: %s, errors=%s)", report.delivered, report.complete,
                 report.reason, report.errors or "none")
        return report

    def _drain_queue(self, admin: RabbitAdmin, queue: str, kind: QueueKind, f: str,
                     down: Collection[str] = (), single_active: bool = False) -> DrainReport:
        """Takes the admin, a queue, its kind, the op name of its deliveries, the nodes that
        would not boot and whether the queue has a single active consumer. Reads it from every
        other node in turn until the broker proves it empty, or it cannot be proven without
        those nodes, or the drain's time is up. Returns its DrainReport."""
        report = DrainReport(without=[n.name for n in self.nodes if n.name in down])
        serving = [n for n in self.nodes if n.name not in down]
        deadline = time.monotonic() + self.opts.drain_timeout_s
        while True:
            read_to: dict[str, int | None] = {}
            for node in serving:
                n, err, offset = self._drain_node(node, deadline, queue, f, single_active)
                report.delivered[node.name] = report.delivered.get(node.name, 0) + n
                read_to[node.name] = offset
                if err:
                    report.errors[node.name] = err
                else:
                    report.errors.pop(node.name, None)
            report.complete, report.reason = self._proven_empty(admin, report, read_to, queue,
                                                                kind, serving)
            unprovable = self._unprovable(admin, queue, kind, report.without)
            if unprovable is not None:
                # Nothing the serving nodes say can prove it: what they held has been read.
                report.complete, report.reason = False, unprovable
                break
            if report.complete and report.without:
                report.reason = "; ".join(filter(None, (
                    f"proven empty without {', '.join(report.without)}, which did not boot",
                    report.reason)))
            if report.complete or time.monotonic() > deadline:
                break
        return report

    @staticmethod
    def _unprovable(admin: RabbitAdmin, queue: str, kind: QueueKind,
                    without: Sequence[str]) -> str | None:
        """Takes the admin, a queue, its kind and the nodes the drain does without. Returns why
        the serving nodes cannot prove the queue empty without them (asking where it lives),
        or None when they can (or none is missing)."""
        if not without:
            return None
        why = kind.proof_without(admin.queue_placement(queue), without)
        if why is None:
            return None
        return (f"{', '.join(without)} did not boot again, and {why}: the queue's emptiness "
                f"is unproven")

    def depth(self, admin: RabbitAdmin, node: Node) -> QueueDepth:
        """Returns the queue's depth as `node` says it, from the kind's loud source (the one the
        drain proves emptiness with). Raises RemoteError or BrokerError."""
        return self.kind.depth(admin, node, self.spec.name)

    def _proven_empty(self, admin: RabbitAdmin, report: DrainReport,
                      read_to: dict[str, int | None], queue: str,
                      kind: QueueKind, serving: Sequence[Node]) -> tuple[bool, str | None]:
        """Asks every serving node for the queue's depth. Returns (proven empty, why not / a
        note)."""
        depths: dict[str, QueueDepth] = {}
        for node in serving:
            try:
                depths[node.name] = kind.depth(admin, node, queue)
                report.depth[node.name] = dataclasses.asdict(depths[node.name])
            except (RemoteError, BrokerError) as e:
                report.depth[node.name] = {"error": str(e)[-300:]}
        unanswered = [n for n in report.depth if n not in depths]
        if unanswered:
            return False, f"no depth from {', '.join(unanswered)}: the queue's emptiness is unproven"
        return kind.drained(depths, read_to)

    def _drain_node(self, node: Node, deadline: float, queue: str, f: str,
                    single_active: bool = False) -> tuple[int, str | None, int | None]:
        """Drains a queue through one node until idle, recording its deliveries as `f` (with a
        single active consumer, its consumer is ended by its channel's close alone).
        Returns (deliveries, error, highest offset)."""
        drain_opts = dataclasses.replace(self.consumer_opts, prefetch=DRAIN_PREFETCH,
                                         crash_after=0)
        con = Consumer(self.history, queue, node.name, node.ip, self.pids.next(),
                       drain_opts, f=f, phase="drain", single_active=single_active)
        try:
            con.open()
            while time.monotonic() < deadline:
                con.poll(0.2)
                if time.monotonic() - con.last_delivery >= self.opts.drain_idle_s:
                    break
            return con.delivered, None, con.max_offset
        except ClientError as e:
            return con.delivered, str(e), con.max_offset
        finally:
            con.close()
