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

A consumer ends recorded (history's CANCEL and CLOSE): `close` cancels it
with its own basic.cancel, records that, then closes its channel and records
that, so the history's order is the order things happened in (pika's channel
close would send the cancel unseen, and RabbitMQ keeps a cancelled consumer's
unacknowledged deliveries until the channel closes). Before the cancel it
dispatches the deliveries pika has read and not yet handed over, so they are
recorded rather than rejected unseen by pika's cancel; a delivery pika rejects
during the cancel is recorded, received and then rejected by pika. A planted
crash ends the same way; a cancel the broker sends, or a channel or connection
the client sees closed, is one op of its own (a channel.close the broker sends
with its reply code and text, and what the consumer held).

A consumer of a queue with a single active consumer (`single_active`) is ended
without a basic.cancel: its channel's close alone, recorded as the CLOSE op.
RabbitMQ's quorum queue (rabbit_fifo, 3.10.8 to 4.3.5) keeps a cancelled
consumer's unacknowledged messages and activates the next consumer at once, so
the next one was fed later messages before the held one came back; a channel
that closes is a consumer gone down, whose messages go back to the front of
the queue before the next consumer is activated. A delivery that reaches the
client while its close is under way (pika drops it unseen) is recorded as
received; the close gives it back with the rest, and the close's outcome
carries `holding` too: everything it gave back.

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
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pika
import pika.exceptions
import pika.spec
from pika.adapters.utils.connection_workflow import AMQPConnectorException

from history import BY_BROKER, BY_HARNESS, BY_PIKA, CANCEL, CLOSE, DEAD_LETTER, Op, OpType, Recorder
from workloads.errors import WorkloadError

# How a main-phase consumer settles a delivery (ClientOptions' shares): basic.ack, basic.reject
# with requeue, basic.nack with requeue; each is recorded as an op of that name after it was
# written on an open channel. A held delivery is acked `hold_s` after it came.
ACK = "ack"
REJECT = "reject"
NACK = "nack"

log = logging.getLogger(__name__)

AMQP_ERRORS: tuple[type[BaseException], ...] = (
    pika.exceptions.AMQPError,
    OSError,
    AssertionError,  # pika asserts on frames from a half-closed connection
)
# Raised by pika before it sends anything: the channel or connection was no longer open.
NOT_SENT: tuple[type[BaseException], ...] = (
    pika.exceptions.ChannelWrongStateError,
    pika.exceptions.ConnectionWrongStateError,
)


class ClientError(WorkloadError, RuntimeError):
    """A client could not connect or lost its connection."""


class DeclareRefused(ClientError):
    """The broker refused to declare a queue: it closed the channel with its reply (an argument
    this release line or queue kind does not take, or a value it rejects)."""


def broker_refusal(e: BaseException) -> str | None:
    """Takes an error of an AMQP call. Returns the broker's reply ("406 PRECONDITION_FAILED -
    ...") when the broker closed the channel, else None (the connection failed, or pika did)."""
    if isinstance(e, pika.exceptions.ChannelClosedByBroker):
        return f"{e.reply_code} {e.reply_text}"
    return None


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
    # Shares (0..1, together at most 1) of a main-phase consumer's deliveries it returns
    # with basic.reject requeue=true, with basic.nack requeue=true, or holds `hold_s` seconds
    # before acking (past a consumer timeout, the broker takes them back); drawn per delivery
    # from a generator seeded with the process number. The drain settles nothing but acks.
    reject_share: float = 0.0
    nack_share: float = 0.0
    hold_share: float = 0.0
    hold_s: float = 0.0
    # The main-phase consumers' x-consumer-timeout argument (ms); None: not sent.
    consumer_timeout_ms: int | None = None
    # Whether the clients advertise the consumer_cancel_notify capability (pika does by
    # default). Without it, RabbitMQ ends a timed-out consumer by closing its channel (406
    # PRECONDITION_FAILED) instead of sending basic.cancel (`client_properties`).
    consumer_cancel_notify: bool = True


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


# The capabilities pika 1.x advertises (pika.connection.Connection._client_properties). pika
# merges ConnectionParameters.client_properties into its own with dict.update, one level deep:
# a "capabilities" given there replaces pika's whole set, so it is given whole.
PIKA_CAPABILITIES: dict[str, bool] = {
    "authentication_failure_close": True, "basic.nack": True, "connection.blocked": True,
    "consumer_cancel_notify": True, "publisher_confirms": True}


def client_properties(opts: ClientOptions) -> dict[str, Any] | None:
    """Takes the options. Returns the client properties a connection sends besides pika's own:
    None when the clients advertise consumer_cancel_notify (pika's default), else pika's
    capabilities with consumer_cancel_notify false (a timed-out consumer's channel is then
    closed by the broker, RabbitMQ's consumers guide)."""
    if opts.consumer_cancel_notify:
        return None
    return {"capabilities": {**PIKA_CAPABILITIES, "consumer_cancel_notify": False}}


def connect(host: str, opts: ClientOptions) -> pika.BlockingConnection:
    """Opens a blocking connection to host, advertising the capabilities the options say
    (`client_properties`). Raises ClientError when it cannot."""
    extra = client_properties(opts)
    params = pika.ConnectionParameters(
        **({} if extra is None else {"client_properties": extra}),
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
    except (*AMQP_ERRORS, AMQPConnectorException) as e:
        # AMQPConnectorException is no AMQPError: a handshake past the stack timeout (a paused
        # node, a listener that accepts and never answers) raises it, and unwrapped it ended the
        # workload thread that asked.
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
    no more than `prefetch` unacked, so this bounds the consume rate), and
    whether its queue has a single active consumer (then the harness ends it by
    closing its channel, without a basic.cancel). How it ends is recorded too
    (the module docstring): `close`, a planted crash, a cancel from the broker,
    a channel or connection seen closed.
    """

    def __init__(
        self, history: Recorder, queue: str, node: str, host: str, process: int,
        opts: ClientOptions, f: str = "consume", phase: str = "main",
        ack_interval_s: float = 0.0, single_active: bool = False,
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
        # Deliveries to settle, in order: (delivery tag, the delivery's op or None, ACK,
        # REJECT or NACK); and those held until a time (monotonic) before they are acked.
        self._to_ack: collections.deque[tuple[int, Op | None, str]] = collections.deque()
        self._held: list[tuple[float, int, Op | None]] = []
        # Rejects, nacks and holds are the main phase's (ClientOptions' shares), never the
        # drain's: a delivery returned there would only prolong it.
        self._modes = f == "consume" and phase == "main"
        self._rng = random.Random(process)
        self.returned = 0
        self._dead_letters = f == DEAD_LETTER
        # The ids delivered and not yet acked, by delivery tag (what a cancel leaves held).
        self._unacked: dict[int, str] = {}
        # Whether the end of the consumer, or of its channel, is recorded.
        self._cancelled = False
        self._ended = False
        # Ended by its channel's close alone (a queue with a single active consumer).
        self.single_active = single_active

    def open(self) -> None:
        """Connects, sets prefetch and starts consuming. Raises ClientError."""
        self.conn = connect(self.host, self.opts)
        try:
            with answer_within(self.conn, self.opts.answer_timeout_s, "basic.consume"):
                self.channel = self.conn.channel()
                self.channel.basic_qos(prefetch_count=self.opts.prefetch)
                self.channel.add_on_cancel_callback(self._on_broker_cancel)
                self._pass_on_first_cancel_only()
                self.channel._impl.add_on_close_callback(self._on_channel_closed)
                self.channel.basic_consume(
                    self.queue, self._on_message, auto_ack=False, consumer_tag=self.tag,
                    arguments=self._consume_arguments(),
                )
        except AMQP_ERRORS as e:
            abandon(self.conn)
            self.conn = None
            raise ClientError(f"consume on {self.node}: {type(e).__name__}: {e}") from e
        # Idle time counts from the moment the broker has the consumer, not from construction.
        self.last_delivery = time.monotonic()

    def _consume_arguments(self) -> dict[str, Any] | None:
        """Returns the basic.consume arguments: x-stream-offset for a stream's consumer, and a
        main-phase consumer's x-consumer-timeout when set; None when there are none."""
        args: dict[str, Any] = {}
        if self.opts.stream_offset is not None:
            args["x-stream-offset"] = self.opts.stream_offset
        if self._modes and self.opts.consumer_timeout_ms is not None:
            args["x-consumer-timeout"] = self.opts.consumer_timeout_ms
        return args or None

    def _settlement(self) -> str | None:
        """Draws how a main-phase delivery is settled: REJECT, NACK, ACK, or None to hold it
        (ClientOptions' shares; ACK for every delivery of the drain)."""
        if not self._modes:
            return ACK
        draw = self._rng.random()
        for share, settle in ((self.opts.reject_share, REJECT), (self.opts.nack_share, NACK),
                              (self.opts.hold_share, None)):
            if draw < share:
                return settle
            draw -= share
        return ACK

    def _record_delivery(self, method: Any, props: Any, body: bytes) -> Op:
        """Records a delivery the client received (an `ok` op of f `self.f`) and counts it as
        held until settled. Returns the op."""
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
        self._unacked[method.delivery_tag] = text
        self.last_delivery = time.monotonic()
        offset = headers.get("x-stream-offset")
        if isinstance(offset, int):
            self.max_offset = offset if self.max_offset is None else max(self.max_offset, offset)
        return delivery

    def _on_message(self, ch: Any, method: Any, props: Any, body: bytes) -> None:
        delivery = self._record_delivery(method, props, body)
        if self.opts.crash_after and self.delivered % self.opts.crash_after == 0:
            # Crash: drop the channel with this delivery (and any prefetched or pending) unacked,
            # cancelled first as pika's channel close would (recorded: `_end`).
            self.crashed = True
            self._to_ack.clear()
            self._held.clear()
            self._end(dispatch=False)
            return
        # Acked from `poll`, never here: each basic_ack flushes I/O, which reads more deliveries,
        # and pika dispatches those in the same call, so acking here never returns under a backlog.
        op = None if self._dead_letters else delivery
        settle = self._settlement()
        if settle is None:
            self._held.append((time.monotonic() + self.opts.hold_s, method.delivery_tag, op))
        else:
            self._to_ack.append((method.delivery_tag, op, settle))

    def _ack_due(self) -> None:
        """Settles the deliveries whose time has come (all of them, unless the consumer is
        slow): acks, rejects or nacks each (requeue), and records it; a held delivery joins
        them once its hold is over."""
        if self._held:
            now = time.monotonic()
            self._to_ack.extend((tag, op, ACK) for due, tag, op in self._held if due <= now)
            self._held = [h for h in self._held if h[0] > now]
        while self._to_ack:
            now = time.monotonic()
            if self.ack_interval_s and now < self._next_ack:
                return
            tag, delivery, settle = self._to_ack.popleft()
            # A return is recorded before it is written, an ack after: a return's time is
            # then never later than the broker took it in, as the delayed-retry check, which
            # measures each return's delay from it, needs (recorded after the write, one came
            # 142 ms before its redelivery against the 200 ms promised, on a loaded machine:
            # quorum-delayed-retry-healthy on 4.3.6, seed 4001), and an ack counts only once
            # it was written.
            if delivery is not None and settle != ACK:
                self._record_settlement(delivery, settle)
            _SETTLE[settle](self.channel, tag)
            self._unacked.pop(tag, None)
            if delivery is not None and settle == ACK:
                self._record_settlement(delivery, settle)
            if settle == ACK:
                self.acked += 1
            else:
                self.returned += 1
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
                self.conn.process_data_events(time_limit=self._wait(left))
        except AMQP_ERRORS as e:
            self._lost(_describe(e))
            raise ClientError(_describe(e)) from e
        if not self.channel.is_open:
            self._lost(f"the channel closed: {_describe(self._close_reason())}")
            raise ClientError(f"consumer {self.tag} on {self.node}: its channel closed")
        if self.tag not in self.channel.consumer_tags:
            self._on_broker_cancel(None)
            raise ClientError(f"consumer {self.tag} on {self.node} was cancelled by the broker")

    def _wait(self, left: float) -> float:
        """Takes the seconds left to poll. Returns how long to wait for I/O: briefly while
        deliveries wait to be settled, until the first hold ends while some are held."""
        if self._to_ack:
            return min(left, 0.02)
        if self._held:
            return max(0.0, min(left, min(h[0] for h in self._held) - time.monotonic()))
        return left

    def close(self) -> None:
        """Ends the consumer, each step recorded (`_end`): its basic.cancel, then its channel's
        close (for a single active consumer, the close alone); then hands the connection to a
        background closer."""
        if self.conn is not None and self.channel is not None and not self._ended:
            self._end(dispatch=True)
        abandon(self.conn)
        self.conn = None
        self.channel = None

    # -- how a consumer ends --------------------------------------------------------------

    def _record(self, type_: OpType, f: str, error: str | None = None,
                **extra: Any) -> None:
        """Records an op of this consumer's end: f CANCEL or CLOSE, no value."""
        self.history.append(Op(type=type_, process=self.process, f=f, node=self.node,
                               queue=self.queue, consumer=self.tag, phase=self.phase,
                               error=error, extra=extra))

    def _end(self, dispatch: bool) -> None:
        """Cancels the consumer, then closes its channel (a single active consumer: closes its
        channel alone, `_close_alone`), each an invocation and its outcome in the history,
        within the answer timeout (past it the connection is cut, and the step waiting ends
        `info`). `dispatch`: first hand over, and record, the deliveries pika has read and not
        dispatched (its cancel would reject them unseen); not from inside a delivery's callback.
        When the channel ended otherwise, a close op says how (`_lost`)."""
        assert self.conn is not None
        error: str | None = None
        try:
            with answer_within(self.conn, self.opts.answer_timeout_s,
                               "basic.cancel or channel.close"):
                if dispatch and self.channel.is_open:
                    self.conn.process_data_events(time_limit=0)
                end = self._close_alone if self.single_active else self._cancel_then_close
                error = end()
        except AMQP_ERRORS as e:
            error = _describe(e)
        self._lost(error or f"the channel closed: {_describe(self._close_reason())}")

    def _cancel_then_close(self) -> str | None:
        """Sends the consumer's basic.cancel, then its channel's close, each a step of the
        history (`_step`), recording what pika rejects meanwhile. Returns the cancel's error
        (None: it ended ok, or was not sent)."""
        error: str | None = None
        with self._recording_pikas_rejects():
            if self.channel.is_open and self.tag in self.channel.consumer_tags \
                    and not self._ended:
                self._cancelled = True
                error = self._step(CANCEL, lambda: self.channel.basic_cancel(self.tag))
            if self.channel.is_open and not self._ended:
                self._ended = True
                self._step(CLOSE, self.channel.close)
        return error

    def _close_alone(self) -> str | None:
        """Ends a single active consumer by closing its channel without a basic.cancel (the
        module docstring): the deliveries pika read and did not dispatch (a crash ends from
        inside a callback) are recorded as received, then the close is a step of the history
        whose outcome carries `holding`, everything the close gave back, with the deliveries
        that came while it was under way (`_recording_deliveries_while_closing`). Returns the
        close's error (None: it ended ok, or was not sent)."""
        if not self.channel.is_open or self._ended:
            return None
        for e in self.channel._remove_pending_deliveries(self.tag):
            self._record_delivery(e.method, e.properties, e.body)
        self._ended = True
        with self._recording_deliveries_while_closing():
            return self._step(CLOSE, self._close_channel_without_cancel, holding_after=True)

    def _close_channel_without_cancel(self) -> None:
        """Closes the channel as pika's BlockingChannel.close does, but with no basic.cancel
        before the channel.close: the consumer's tag counts as cancelled in pika's channel, whose
        close cancels only the others (and drops a delivery for a cancelled tag once closing);
        then waits for the close-ok. Raises what pika raises (NOT_SENT when the channel was no
        longer open)."""
        blocking = self.channel
        impl = blocking._impl
        impl._raise_if_not_open()
        try:
            if self.tag in impl._consumers:
                impl._cancelled.add(self.tag)
            impl.close()
            blocking._flush_output(lambda: blocking.is_closed)
        finally:
            blocking._cleanup()

    @contextlib.contextmanager
    def _recording_deliveries_while_closing(self) -> Iterator[None]:
        """Records the deliveries for this consumer that reach pika while its channel closes
        without a cancel: pika drops them unseen, the broker gives them back with the channel's
        close. Each is recorded as received (and so held by the close), or the broker's later,
        flagged delivery of it would have no first delivery in the history (quorum-sac-fifo
        on 4.0.5, seed 4008: 0-750 handed to the active consumer as the harness ended it,
        flagged to the next one after the close)."""
        impl = self.channel._impl
        with self._seeing_own_deliveries(lambda: impl.is_closing, self._record_delivery):
            yield

    @contextlib.contextmanager
    def _recording_pikas_rejects(self) -> Iterator[None]:
        """Records what pika settles for this consumer while it is cancelled and closed. pika's
        basic_cancel of a manual-ack consumer rejects (requeue), without dispatching them, the
        deliveries it had read and not dispatched, and every delivery that arrives before the
        cancel-ok (and before the close completes): each is recorded as received, then
        rejected by pika (`by` "pika"), or the broker's later, flagged delivery of it would
        have no first delivery in the history (quorum-sac-fifo on 4.3, seed 4001: 0-744 was
        handed to the active consumer as it cancelled, and came back flagged 9 s later)."""
        impl = self.channel._impl
        pending = self.channel._remove_pending_deliveries

        def remove_pending(tag: str) -> list[Any]:
            events = pending(tag)
            for e in events if tag == self.tag else ():
                self._rejected_by_pika(e.method, e.properties, e.body)
            return events

        self.channel._remove_pending_deliveries = remove_pending
        try:
            with self._seeing_own_deliveries(
                    lambda: self.tag in impl._cancelled and impl.is_open, self._rejected_by_pika):
                yield
        finally:
            del self.channel._remove_pending_deliveries

    @contextlib.contextmanager
    def _seeing_own_deliveries(self, when: Callable[[], bool],
                               see: Callable[[Any, Any, bytes], Any]) -> Iterator[None]:
        """Takes a condition and what to do with a delivery (its method, properties and body).
        Within it, every delivery for this consumer that reaches pika's channel while `when()`
        holds is handed to `see` before pika handles it (pika drops or rejects such a delivery
        without dispatching it: `_recording_pikas_rejects`, `_recording_deliveries_while_
        closing`)."""
        impl = self.channel._impl
        on_deliver = impl._on_deliver

        def deliver(method_frame: Any, header_frame: Any, body: bytes) -> None:
            method = method_frame.method
            if method.consumer_tag == self.tag and when():
                see(method, header_frame.properties, body)
            on_deliver(method_frame, header_frame, body)

        impl._on_deliver = deliver
        try:
            yield
        finally:
            del impl._on_deliver

    def _rejected_by_pika(self, method: Any, props: Any, body: bytes) -> None:
        """Records a delivery pika rejects (requeue) for this consumer as it ends: received,
        then rejected, by pika."""
        delivery = self._record_delivery(method, props, body)
        self._unacked.pop(method.delivery_tag, None)
        self.returned += 1
        self._record_settlement(delivery, REJECT, by=BY_PIKA)

    def _record_settlement(self, delivery: Op, settle: str, **extra: Any) -> None:
        """Records the settlement `settle` (ACK, REJECT, NACK) of a recorded delivery: an op like
        it, of that f, now, with `extra` added to the delivery's."""
        self.history.append(replace(delivery, f=settle, index=-1, time=-1,
                                    extra={**delivery.extra, **extra}))

    def _step(self, f: str, call: Callable[[], Any], holding_after: bool = False) -> str | None:
        """Records the invocation of f (with what the consumer holds), makes the call, and
        records its outcome: ok, fail when pika sent nothing (NOT_SENT), else info; with
        `holding_after`, the outcome carries what the consumer holds then too. Returns the
        error of a step that did not end ok, else None."""
        self._record("invoke", f, by=BY_HARNESS, holding=list(self._unacked.values()))

        def outcome(type_: OpType, error: str | None = None) -> None:
            held = {"holding": list(self._unacked.values())} if holding_after else {}
            self._record(type_, f, error=error, **held)

        try:
            call()
        except NOT_SENT as e:
            outcome("fail", _describe(e))
            return _describe(e)
        except AMQP_ERRORS as e:
            outcome("info", _describe(e))
            return _describe(e)
        outcome("ok")
        return None

    def _lost(self, error: str) -> None:
        """Records, once, that the client saw its channel or connection closed without its own
        close having completed: one `info` op f CLOSE, by the broker, with the error."""
        if self._ended:
            return
        self._ended = True
        self._record("info", CLOSE, error=error, by=BY_BROKER)

    def _pass_on_first_cancel_only(self) -> None:
        """Passes on to pika only the broker's first basic.cancel of this consumer; each later
        one is recorded (an `info` op f CANCEL by the broker) and dropped. RabbitMQ 4.3's
        channel sends basic.cancel for each release of a timed-out consumer's messages
        (rabbit_channel:handle_queue_actions, `{released, ..., timeout}`, without forgetting
        the consumer), and pika's BlockingChannel takes a second cancel of a consumer it has
        already dropped as a KeyError: raised from its dispatch, which ended a workload thread,
        or, inside its I/O, as a lost connection (quorum-consumer-timeout-healthy on 4.3.6,
        seed 4001: consumers 29-31)."""
        impl, blocking = self.channel._impl, self.channel
        to_pika = blocking._on_consumer_cancelled_by_broker
        impl.callbacks.remove(impl.channel_number, pika.spec.Basic.Cancel, to_pika)
        seen: set[str] = set()

        def first_only(method_frame: Any) -> None:
            tag = method_frame.method.consumer_tag
            if tag in seen:
                self._record("info", CANCEL, by=BY_BROKER,
                             error="the broker sent basic.cancel again for this consumer")
                return
            seen.add(tag)
            to_pika(method_frame)

        impl.add_on_cancel_callback(first_only)

    def _on_broker_cancel(self, _method_frame: Any) -> None:
        """Records, once, a cancel the broker sent (consumer cancel notification): one `ok` op
        f CANCEL, by the broker, with what the consumer held."""
        if self._cancelled:
            return
        self._cancelled = True
        self._record("ok", CANCEL, by=BY_BROKER, holding=list(self._unacked.values()))

    def _on_channel_closed(self, _channel: Any, reason: Exception) -> None:
        """Records, once, a channel.close the broker sent (pika's ChannelClosedByBroker; other
        reasons, the harness's own close or a lost connection, are recorded elsewhere): one
        `info` op f CLOSE, by the broker, with its `reply_code` and `reply_text` and what the
        consumer held (`holding`). RabbitMQ closes the channel of a timed-out consumer whose
        client does not advertise consumer_cancel_notify with 406 PRECONDITION_FAILED
        (checkers.timeouts)."""
        if self._ended or not isinstance(reason, pika.exceptions.ChannelClosedByBroker):
            return
        self._ended = True
        self._record("info", CLOSE, error=f"the channel closed: {_describe(reason)}"[:300],
                     by=BY_BROKER,
                     reply_code=reason.reply_code, reply_text=reason.reply_text,
                     holding=list(self._unacked.values()))

    def _close_reason(self) -> Any:
        """Returns why pika says the channel closed (an exception), or a plain text."""
        return getattr(self.channel, "_closing_reason", None) or "no reason given"


# How each settlement is written on a channel (a delivery tag; returns requeue it).
_SETTLE: dict[str, Callable[[Any, int], None]] = {
    ACK: lambda ch, tag: ch.basic_ack(delivery_tag=tag),
    REJECT: lambda ch, tag: ch.basic_reject(delivery_tag=tag, requeue=True),
    NACK: lambda ch, tag: ch.basic_nack(delivery_tag=tag, multiple=False, requeue=True),
}


def _describe(e: Any) -> str:
    """Takes an exception (or a text). Returns it as an op's error, at most 300 characters."""
    text = f"{type(e).__name__}: {e}" if isinstance(e, BaseException) else str(e)
    return text[:300]


def join_threads(threads: Sequence[threading.Thread], timeout: float, what: str) -> None:
    """Takes threads told to stop, a timeout (s) for all of them and what they are ("worker").
    Waits for each within what is left of the timeout, logging one still alive after it."""
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic()))
        if t.is_alive():
            log.warning("%s %s did not stop in time", what, t.name)
