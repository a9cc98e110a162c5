"""AMQP clients that record what they do: connections, options, and the consumer.

Each client is one logical process of the history: one connection and one
channel to one node (the publisher is in workloads.publisher). A delivery is
one `ok` op recorded before it is acked, with the broker's x-delivery-count
and x-acquired-count headers where it sets them (`delivery_count`,
`acquired_count`) and the message's priority property (`priority`); the
ack, once written on an open channel, is an `ok` op of its own (f "ack"). A
consumer of the harness's dead-letter queue records each message as f
"dead-letter" with why and from where it was dead-lettered (`death_of`, from
its x-death header), and no ack.

A publisher slot is one publishing thread's identity: its processes come and
go (a process is retired after an unknown outcome), but the slot's sequence
numbers run on across them, so the id "<slot>-<seq>" orders every message the
slot ever published.

"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pika
import pika.exceptions
import pika.spec

from history import DEAD_LETTER, Op, Recorder
from workloads.errors import WorkloadError

log = logging.getLogger(__name__)

AMQP_ERRORS: tuple[type[BaseException], ...] = (
    pika.exceptions.AMQPError,
    OSError,
    AssertionError,  # pika asserts on frames from a half-closed connection
)


class ClientError(WorkloadError, RuntimeError):
    """A client could not connect or lost its connection."""


@dataclass(frozen=True)
class ClientOptions:
    """How clients talk to the brokers."""

    publish_timeout_s: float = 5.0
    # Unconfirmed publishes a publisher process keeps in flight (1: one at a time).
    window: int = 1
    connect_timeout_s: float = 3.0
    # Seconds the broker gets to answer a channel's request (channel.open, basic.qos,
    # basic.consume, queue.declare, a close); see `answer_within`.
    answer_timeout_s: float = 15.0
    heartbeat_s: int = 5
    prefetch: int = 10
    persistent: bool = True
    mandatory: bool = True
    confirms: bool = True
    # A consumer "crashes" after this many deliveries: it closes its channel without
    # acking the last one, so the broker redelivers it (0: never).
    crash_after: int = 0
    port: int = 5672
    # Consumers of a stream give the offset they start from (x-stream-offset), e.g. "first".
    stream_offset: str | None = None


class PublisherSlot:
    """One publisher's identity across its processes: an id and a sequence that never restarts."""

    def __init__(self, slot_id: int) -> None:
        self.id = slot_id
        self._seq = itertools.count()

    def next_seq(self) -> int:
        """Returns the slot's next sequence number."""
        return next(self._seq)


class ProcessIds:
    """Hands out fresh process numbers, thread-safe: a retired number is never reused."""

    def __init__(self, start: int = 0) -> None:
        self._it = itertools.count(start)
        self._lock = threading.Lock()

    def next(self) -> int:
        """Returns a process number never handed out before."""
        with self._lock:
            return next(self._it)


def message_id(publisher: int, seq: int) -> str:
    """Returns the id of a publisher's seq-th message, "<publisher>-<seq>"."""
    return f"{publisher}-{seq}"


def parse_message_id(text: str) -> tuple[int, int] | None:
    """Takes a message id. Returns (publisher, seq), or None when it is not ours."""
    pub, sep, seq = text.partition("-")
    if not sep or not pub.isdigit() or not seq.isdigit():
        return None
    return int(pub), int(seq)


def _text(v: Any) -> str | None:
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    return v if isinstance(v, str) else None


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def delivery_count(headers: Any) -> int | None:
    """Takes a delivery's headers (a dict, or None). Returns its x-delivery-count (quorum
    queues set it on a redelivery), or None when absent or not a count."""
    return _count(headers.get("x-delivery-count")) if isinstance(headers, dict) else None


def acquired_count(headers: Any) -> int | None:
    """Takes a delivery's headers (a dict, or None). Returns its x-acquired-count (quorum queues
    on 4.3 set it on a redelivery: every acquisition so far), or None when absent or not a
    count."""
    return _count(headers.get("x-acquired-count")) if isinstance(headers, dict) else None


def death_of(headers: Any) -> dict[str, Any]:
    """Takes a dead-lettered message's headers. Returns the history fields of its latest death:
    `reason` ("maxlen", "delivery_limit", "rejected", "expired"), `death_count` (how often it
    died so, from that queue) and `death_queue` (the queue it died in), from the first entry of
    its x-death header (RabbitMQ puts the latest first), else from x-first-death-reason and
    x-first-death-queue; each None when the broker said nothing of it."""
    h = headers if isinstance(headers, dict) else {}
    deaths = h.get("x-death")
    latest = deaths[0] if isinstance(deaths, list) and deaths and isinstance(deaths[0], dict) \
        else {}
    return {"reason": _text(latest.get("reason")) or _text(h.get("x-first-death-reason")),
            "death_count": _count(latest.get("count")),
            "death_queue": _text(latest.get("queue")) or _text(h.get("x-first-death-queue"))}


def server_version(conn: pika.BlockingConnection) -> str | None:
    """Takes an open connection. Returns the broker's version as it announced it in the AMQP
    handshake (server properties), or None when it did not."""
    props = getattr(conn._impl, "server_properties", None) or {}
    return _text(props.get("version"))


def connect(host: str, opts: ClientOptions) -> pika.BlockingConnection:
    """Opens a blocking connection to host. Raises ClientError when it cannot."""
    params = pika.ConnectionParameters(
        host=host,
        port=opts.port,
        credentials=pika.PlainCredentials("guest", "guest"),
        heartbeat=opts.heartbeat_s,
        socket_timeout=opts.connect_timeout_s,
        stack_timeout=opts.connect_timeout_s + 2,
        blocked_connection_timeout=max(10.0, 2 * opts.publish_timeout_s),
        connection_attempts=1,
        retry_delay=0,
    )
    try:
        return pika.BlockingConnection(params)
    except AMQP_ERRORS as e:
        raise ClientError(f"connect to {host}: {type(e).__name__}: {e}") from e


@contextlib.contextmanager
def answer_within(conn: pika.BlockingConnection, seconds: float, what: str) -> Iterator[None]:
    """Bounds the blocking requests made on `conn` inside the block: past `seconds` the
    connection is cut, so the request waiting then raises StreamLostError("no answer to
    <what> within <seconds>s") and the connection is closed.

    pika's blocking requests wait for the broker's answer with no deadline, and a broker
    may never answer: a mirrored queue's master hung after autoheal left a drain's
    basic.consume waiting for good (seen here: 10 minutes, until the run was stopped).
    The timer runs on the connection's own I/O loop, which the waiting request turns,
    and cuts the stream as a missed heartbeat does.
    """
    impl = conn._impl

    def cut() -> None:
        if not impl.is_closed:
            impl._terminate_stream(pika.exceptions.StreamLostError(
                f"no answer to {what} within {seconds:g}s"))

    timer = impl.ioloop.call_later(seconds, cut)
    try:
        yield
    finally:
        impl.ioloop.remove_timeout(timer)


def abandon(conn: pika.BlockingConnection | None,
            timeout_s: float = ClientOptions.answer_timeout_s) -> threading.Thread | None:
    """Closes a connection in a background thread (closing can block while the peer is cut off,
    or while a hung queue does not answer the cancel of its consumer; past `timeout_s` the
    connection is cut instead).

    The caller hands the connection over and must not touch it again. Returns the thread.
    """
    if conn is None:
        return None

    def close() -> None:
        with contextlib.suppress(*AMQP_ERRORS, Exception):
            if conn.is_open:
                with answer_within(conn, timeout_s, "the close"):
                    conn.close()

    t = threading.Thread(target=close, name="amqp-close", daemon=True)
    t.start()
    return t


class Consumer:
    """One consuming process: manual acks, each delivery recorded before its ack, each ack after.

    Takes the history, queue, node, host, process number, options, the op
    name ("consume" in the main phase, "drain" at the end; "dead-letter" reads
    a dead-letter queue: each message recorded with its death, its ack not
    recorded, as no delivery of the checker's precedes it) and the least
    seconds between two acks (0: as fast as deliveries come; the broker sends
    no more than `prefetch` unacked, so this bounds the consume rate).
    """

    def __init__(
        self, history: Recorder, queue: str, node: str, host: str, process: int,
        opts: ClientOptions, f: str = "consume", phase: str = "main",
        ack_interval_s: float = 0.0,
    ) -> None:
        self.history = history
        self.queue = queue
        self.node = node
        self.host = host
        self.process = process
        self.opts = opts
        self.f = f
        self.phase = phase
        self.tag = f"{f}-{process}"
        self.conn: pika.BlockingConnection | None = None
        self.channel: Any = None
        self.ack_interval_s = ack_interval_s
        self.delivered = 0
        self.acked = 0
        self.last_delivery = time.monotonic()
        self.crashed = False
        # The highest x-stream-offset delivered (streams only).
        self.max_offset: int | None = None
        self._next_ack = 0.0
        self._to_ack: collections.deque[tuple[int, Op | None]] = collections.deque()
        self._dead_letters = f == DEAD_LETTER

    def open(self) -> None:
        """Connects, sets prefetch and starts consuming. Raises ClientError."""
        self.conn = connect(self.host, self.opts)
        try:
            with answer_within(self.conn, self.opts.answer_timeout_s, "basic.consume"):
                self.channel = self.conn.channel()
                self.channel.basic_qos(prefetch_count=self.opts.prefetch)
                args = ({"x-stream-offset": self.opts.stream_offset}
                        if self.opts.stream_offset is not None else None)
                self.channel.basic_consume(
                    self.queue, self._on_message, auto_ack=False, consumer_tag=self.tag,
                    arguments=args,
                )
        except AMQP_ERRORS as e:
            abandon(self.conn)
            self.conn = None
            raise ClientError(f"consume on {self.node}: {type(e).__name__}: {e}") from e
        # Idle time counts from the moment the broker has the consumer, not from construction.
        self.last_delivery = time.monotonic()

    def _on_message(self, ch: Any, method: Any, props: Any, body: bytes) -> None:
        text = body.decode("utf-8", errors="replace")
        parsed = parse_message_id(text)
        headers = getattr(props, "headers", None) or {}
        delivery = self.history.append(Op(
            type="ok", process=self.process, f=self.f, value=text, node=self.node,
            queue=self.queue, publisher=parsed[0] if parsed else None,
            seq=parsed[1] if parsed else None, consumer=self.tag,
            redelivered=bool(method.redelivered), delivery_count=delivery_count(headers),
            phase=self.phase, extra=death_of(headers) if self._dead_letters else {},
            priority=_count(getattr(props, "priority", None)),
            acquired_count=acquired_count(headers),
        ))
        self.delivered += 1
        self.last_delivery = time.monotonic()
        offset = headers.get("x-stream-offset")
        if isinstance(offset, int):
            self.max_offset = offset if self.max_offset is None else max(self.max_offset, offset)
        if self.opts.crash_after and self.delivered % self.opts.crash_after == 0:
            # Crash: drop the channel with this delivery (and any prefetched or pending) unacked.
            self.crashed = True
            self._to_ack.clear()
            assert self.conn is not None
            with answer_within(self.conn, self.opts.answer_timeout_s, "the crash's channel.close"):
                ch.close()
            return
        # Acked from `poll`, never here: each basic_ack flushes I/O, which reads more deliveries,
        # and pika dispatches those in the same call, so acking here never returns under a backlog.
        self._to_ack.append((method.delivery_tag, None if self._dead_letters else delivery))

    def _ack_due(self) -> None:
        """Acks the deliveries whose time has come (all of them, unless the consumer is slow)."""
        while self._to_ack:
            now = time.monotonic()
            if self.ack_interval_s and now < self._next_ack:
                return
            tag, delivery = self._to_ack.popleft()
            self.channel.basic_ack(delivery_tag=tag)
            if delivery is not None:
                self.history.append(replace(delivery, f="ack", index=-1, time=-1))
            self.acked += 1
            if self.ack_interval_s:
                # A slow consumer: the broker holds the rest of the backlog until the next ack.
                self._next_ack = max(self._next_ack + self.ack_interval_s, now)

    def poll(self, seconds: float) -> None:
        """Takes deliveries and acks them for about `seconds` (never much longer). Raises
        ClientError when the client broke."""
        if self.conn is None or self.channel is None:
            raise ClientError("consumer is not open")
        end = time.monotonic() + seconds
        try:
            while True:
                self._ack_due()
                left = end - time.monotonic()
                if left <= 0 or not self.channel.is_open:
                    break
                self.conn.process_data_events(time_limit=min(left, 0.02) if self._to_ack else left)
        except AMQP_ERRORS as e:
            raise ClientError(f"{type(e).__name__}: {e}"[:300]) from e
        if not self.channel.is_open or self.tag not in self.channel.consumer_tags:
            raise ClientError(f"consumer {self.tag} on {self.node} was cancelled or closed")

    def close(self) -> None:
        """Hands the connection to a background closer (unacked deliveries are requeued)."""
        abandon(self.conn)
        self.conn = None
        self.channel = None
