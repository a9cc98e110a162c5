"""A small AMQP 0-9-1 server on loopback for client tests: it completes pika's handshake,
answers channel requests, confirms publishes, serves consumers from queues the test fills, and
can fall silent on a chosen request (the socket stays open, as a broker's connection process
does while a queue's process hangs), and can block publishers as a resource alarm does."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Protocol

import pika.frame
import pika.spec

Out = dict[int, tuple[str, bytes, dict[str, Any]]]  # delivery tag -> (queue, body, headers)


class Polled(Protocol):
    """A client the test drives by polling (workloads.clients.Consumer)."""

    def poll(self, seconds: float) -> None: ...


def poll_until(client: Polled, done: Callable[[], bool], seconds: float = 5.0) -> None:
    """Takes a client, a condition and a time limit (s). Polls the client in 50 ms steps until
    the condition holds or the limit passed; a ClientError the poll raises goes through."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        client.poll(0.05)


class FakeBroker:
    """Serves every connection made to `port`. `silent_on`: a request type (e.g.
    pika.spec.Basic.Consume) from whose first arrival on a connection nothing more is answered;
    `version`: the version it announces in its server properties (None: none).
    `requests` lists every request's name as it came; `published` every message body;
    `declared` each declared queue's arguments; `exchanges` each declared exchange and type;
    `bindings` each (queue, exchange) bound. `put` queues a message with its headers for the
    next consumer of its queue; `depth` says what a queue holds (ready, delivered unacked): a
    consumer's ack removes a message, its connection's end puts the unacked back. `block`
    raises an alarm as RabbitMQ's does: a connection that publishes is sent connection.blocked
    and nothing more it sends is read (held) until `unblock` sends connection.unblocked and
    reads what was held. A consumer's basic.cancel is answered (cancel-ok) and its channel's
    close puts its unacked messages back, as RabbitMQ does (one channel per connection: the
    harness's way); `late_on_cancel` and `late_on_close` hand a consumer one more message as
    its cancel or its channel's close arrives, before the answer. `cancel_consumers` sends every consumer a broker's basic.cancel (consumer
    cancel notification); `close_consumer_channels` closes every consumer's channel as a
    broker does (channel.close with a reply code and text; what the channel held goes back);
    `client_properties` lists each connection's client properties (connection.start-ok);
    `cut` drops every client connection."""

    ANSWERS = {
        pika.spec.Channel.Open: pika.spec.Channel.OpenOk,
        pika.spec.Basic.Qos: pika.spec.Basic.QosOk,
        pika.spec.Confirm.Select: pika.spec.Confirm.SelectOk,
        pika.spec.Channel.Close: pika.spec.Channel.CloseOk,
        pika.spec.Connection.Close: pika.spec.Connection.CloseOk,
        pika.spec.Exchange.Declare: pika.spec.Exchange.DeclareOk,
        pika.spec.Queue.Bind: pika.spec.Queue.BindOk,
    }

    def __init__(self, silent_on: type | None = None, version: str | None = None) -> None:
        self.silent_on = silent_on
        self.version = version
        self.requests: list[str] = []
        self.published: list[bytes] = []
        self.declared: dict[str, dict[str, Any]] = {}
        self.exchanges: list[tuple[str, str]] = []
        self.bindings: list[tuple[str, str]] = []
        # Each consumer tag's basic.consume arguments; each (method name, body) of a delivery
        # returned by basic.reject or basic.nack (with requeue: back in its queue).
        self.consume_args: dict[str, dict[str, Any]] = {}
        self.returns: list[tuple[str, bytes]] = []
        # (queue, body): a message handed to a consumer as its basic.cancel arrives, before the
        # cancel-ok, as a broker that had sent it before taking the cancel in does.
        self.late_on_cancel: tuple[str, str] | None = None
        # (queue, body): likewise, a message handed to a consumer as its channel's channel.close
        # arrives, before the close-ok; the close puts it back with the rest.
        self.late_on_close: tuple[str, str] | None = None
        # (queue, reply code, reply text): a queue.declare of that queue is answered with
        # channel.close, as RabbitMQ refuses an argument it does not take.
        self.refuse_declare: tuple[str, int, str] | None = None
        # (argument, reply code, reply text): a queue.declare of any queue whose arguments carry
        # that key is answered with channel.close, as RabbitMQ refuses an argument a queue type
        # does not take (check_declare_arguments).
        self.refuse_argument: tuple[str, int, str] | None = None
        self._ready: dict[str, list[tuple[bytes, dict[str, Any]]]] = defaultdict(list)
        self._unacked: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._consumers: list[tuple[socket.socket, int, str]] = []  # (conn, channel, tag)
        self._serving: dict[socket.socket, _Connection] = {}
        self.client_properties: list[dict[str, Any]] = []
        self.blocked: str | None = None
        threading.Thread(target=self._accept, daemon=True).start()

    def block(self, reason: str = "low on memory") -> None:
        """Raises an alarm: publishing connections are blocked from their next publish on."""
        self.blocked = reason

    def unblock(self) -> None:
        """Clears the alarm: blocked connections are unblocked and what they sent is read."""
        self.blocked = None

    def cancel_consumers(self) -> None:
        """Sends every consumer a basic.cancel, as RabbitMQ does when it cancels a consumer."""
        for conn, ch, tag in list(self._consumers):
            with contextlib.suppress(OSError):
                self._send(conn, ch, pika.spec.Basic.Cancel(consumer_tag=tag))

    def close_consumer_channels(self, code: int = 406,
                                text: str = "PRECONDITION_FAILED - consumer timed out") -> None:
        """Closes every consumer's channel as RabbitMQ does (channel.close with `code` and
        `text`): its consumers are gone and what the channel held goes back to its queue."""
        for conn, ch, _ in list(self._consumers):
            self._consumers = [c for c in self._consumers if c[:2] != (conn, ch)]
            served = self._serving.get(conn)
            if served is not None:
                served._requeue()
            with contextlib.suppress(OSError):
                self._send(conn, ch, pika.spec.Channel.Close(
                    reply_code=code, reply_text=text, class_id=0, method_id=0))

    def cut(self) -> None:
        """Drops every client connection (a connection lost)."""
        for c in self._conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
                c.close()

    def put(self, queue: str, body: str, headers: dict[str, Any] | None = None) -> None:
        """Queues a message for the next consumer of `queue`."""
        with self._lock:
            self._ready[queue].append((body.encode(), headers or {}))

    def depth(self, queue: str) -> tuple[int, int]:
        """Returns what `queue` holds: (ready, delivered and not acked)."""
        with self._lock:
            return len(self._ready[queue]), self._unacked[queue]

    def wait_for_depth(self, queue: str, want: tuple[int, int],
                       seconds: float = 2.0) -> tuple[int, int]:
        """Waits until `queue` holds `want` (`depth`) or the time is up. Returns what it holds
        then (a message a client gave back reaches the queue after the client's call returns)."""
        deadline = time.monotonic() + seconds
        while self.depth(queue) != want and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.depth(queue)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self._conns.append(conn)
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _send(conn: socket.socket, channel: int, method: pika.spec.amqp_object.Method) -> None:
        conn.sendall(pika.frame.Method(channel, method).marshal())

    def _deliver(self, conn: socket.socket, ch: int, tag: str, queue: str,
                 out: Out) -> None:
        """Hands every ready message of `queue` to consumer `tag` (no prefetch limit)."""
        with self._lock:
            ready, self._ready[queue] = self._ready[queue], []
            self._unacked[queue] += len(ready)
        for body, headers in ready:
            n = len(out) + 1
            out[n] = (queue, body, headers)
            self._send(conn, ch, pika.spec.Basic.Deliver(
                consumer_tag=tag, delivery_tag=n, redelivered=False, exchange="",
                routing_key=queue))
            conn.sendall(pika.frame.Header(
                ch, len(body), pika.spec.BasicProperties(headers=headers)).marshal())
            conn.sendall(pika.frame.Body(ch, body).marshal())

    def _serve(self, conn: socket.socket) -> None:
        served = _Connection(self, conn)
        self._serving[conn] = served
        served.serve()

    def close(self) -> None:
        self.sock.close()
        for c in self._conns:
            with contextlib.suppress(OSError):
                c.close()


class _Connection:
    """One client connection to a FakeBroker: the frames it has sent and not yet decoded,
    whether it fell silent or is blocked (and the frames held meanwhile), its confirming
    channels, each channel's last publish tag and the deliveries it has not acked."""

    def __init__(self, broker: FakeBroker, conn: socket.socket) -> None:
        self.broker = broker
        self.conn = conn
        self.buf = b""
        self.silent = False
        self.held: list[Any] = []  # frames not read while the connection is blocked
        self.told = False  # connection.blocked sent
        self.confirming: set[int] = set()
        self.tags: dict[int, int] = defaultdict(int)
        self.out: Out = {}

    def serve(self) -> None:
        """Greets the client, then reads and answers frames until it hangs up; what its
        consumers never acked goes back to their queues."""
        broker, conn = self.broker, self.conn
        conn.settimeout(0.02)
        props: dict[str, Any] = {"product": "fake", "capabilities": {
            "publisher_confirms": True, "basic.nack": True, "consumer_cancel_notify": True}}
        if broker.version is not None:
            props["version"] = broker.version
        try:
            with contextlib.suppress(OSError):
                conn.recv(8)  # the protocol header
                broker._send(conn, 0, pika.spec.Connection.Start(
                    server_properties=props, mechanisms="PLAIN", locales="en_US"))
                while self._receive():
                    pass
        finally:
            self._requeue()

    def _requeue(self) -> None:
        """Puts what this connection's consumers never acked back in their queues."""
        with self.broker._lock:
            for queue, body, headers in self.out.values():
                self.broker._unacked[queue] -= 1
                self.broker._ready[queue].append((body, headers))
            self.out.clear()

    def _receive(self) -> bool:
        """Reads what came (waiting a moment), takes every whole frame, and unblocks when the
        alarm is over. Returns False when the client has hung up."""
        try:
            data = self.conn.recv(65536)
        except TimeoutError:
            data = None
        else:
            if not data:
                return False
        self.buf += data or b""
        while True:
            used, frame = pika.frame.decode_frame(self.buf)
            if frame is None:
                break
            self.buf = self.buf[used:]
            self._take(frame)
        if self.told and self.broker.blocked is None:
            self._unblock()
        return True

    def _take(self, frame: Any) -> None:
        """Takes one frame: a publish under an alarm blocks the connection, whose frames are
        then held; else the frame is answered, unless the connection fell silent."""
        publish = isinstance(frame, pika.frame.Method) and isinstance(
            frame.method, pika.spec.Basic.Publish)
        if not self.told and self.broker.blocked is not None and publish:
            self.broker._send(self.conn, 0, pika.spec.Connection.Blocked(self.broker.blocked))
            self.told = True
        if self.told:
            self.held.append(frame)
        elif not self.silent:
            self.silent = self._answer(frame)

    def _unblock(self) -> None:
        """Sends connection.unblocked and answers the frames held meanwhile."""
        self.broker._send(self.conn, 0, pika.spec.Connection.Unblocked())
        self.told, frames, self.held = False, self.held, []
        for frame in frames:
            if not self.silent:
                self.silent = self._answer(frame)

    def _answer(self, frame: Any) -> bool:
        """Answers one frame. Returns whether the connection falls silent from now on."""
        broker = self.broker
        ch = frame.channel_number
        if isinstance(frame, pika.frame.Body):
            broker.published.append(frame.fragment)
            if ch in self.confirming:
                self.tags[ch] += 1
                broker._send(self.conn, ch, pika.spec.Basic.Ack(delivery_tag=self.tags[ch]))
            return False
        if not isinstance(frame, pika.frame.Method):
            return False
        method = frame.method
        broker.requests.append(method.NAME)
        if broker.silent_on is not None and isinstance(method, broker.silent_on):
            return True
        handle = _ON_METHOD.get(type(method))
        if handle is not None:
            handle(self, ch, method)
        if type(method) in broker.ANSWERS:
            broker._send(self.conn, ch, broker.ANSWERS[type(method)]())
        return False

    def _start_ok(self, ch: int, method: Any) -> None:
        self.broker.client_properties.append(dict(method.client_properties or {}))
        self.broker._send(self.conn, 0, pika.spec.Connection.Tune(
            channel_max=16, frame_max=131072, heartbeat=0))

    def _open(self, ch: int, method: Any) -> None:
        self.broker._send(self.conn, 0, pika.spec.Connection.OpenOk())

    def _queue_declare(self, ch: int, method: Any) -> None:
        refuse, by_arg = self.broker.refuse_declare, self.broker.refuse_argument
        if refuse is None or refuse[0] != method.queue:
            given = method.arguments or {}
            refuse = by_arg if by_arg is not None and by_arg[0] in given else None
        if refuse is not None:
            self.broker._send(self.conn, ch, pika.spec.Channel.Close(
                reply_code=refuse[1], reply_text=refuse[2], class_id=50, method_id=10))
            return
        self.broker.declared[method.queue] = dict(method.arguments or {})
        self.broker._send(self.conn, ch, pika.spec.Queue.DeclareOk(method.queue, 0, 0))

    def _consume(self, ch: int, method: Any) -> None:
        self.broker.consume_args[method.consumer_tag] = dict(method.arguments or {})
        self.broker._consumers.append((self.conn, ch, method.consumer_tag))
        self.broker._send(self.conn, ch,
                          pika.spec.Basic.ConsumeOk(consumer_tag=method.consumer_tag))
        self.broker._deliver(self.conn, ch, method.consumer_tag, method.queue, self.out)

    def _ack(self, ch: int, method: Any) -> None:
        done = self.out.pop(method.delivery_tag, None)
        if done is not None:
            with self.broker._lock:
                self.broker._unacked[done[0]] -= 1

    def _return(self, ch: int, method: Any) -> None:
        """basic.reject or basic.nack: the delivery goes back to its queue when requeued."""
        done = self.out.pop(method.delivery_tag, None)
        if done is not None:
            self.broker.returns.append((method.NAME, done[1]))
            with self.broker._lock:
                self.broker._unacked[done[0]] -= 1
                if method.requeue:
                    self.broker._ready[done[0]].append((done[1], done[2]))

    def _cancel(self, ch: int, method: Any) -> None:
        late, self.broker.late_on_cancel = self.broker.late_on_cancel, None
        if late is not None:
            self.broker.put(*late)
            self.broker._deliver(self.conn, ch, method.consumer_tag, late[0], self.out)
        self.broker._consumers = [c for c in self.broker._consumers
                                  if c != (self.conn, ch, method.consumer_tag)]
        self.broker._send(self.conn, ch,
                          pika.spec.Basic.CancelOk(consumer_tag=method.consumer_tag))

    def _channel_close(self, ch: int, method: Any) -> None:
        mine = [c[2] for c in self.broker._consumers if c[:2] == (self.conn, ch)]
        late, self.broker.late_on_close = self.broker.late_on_close, None
        if late is not None and mine:
            self.broker.put(*late)
            self.broker._deliver(self.conn, ch, mine[0], late[0], self.out)
        self.broker._consumers = [c for c in self.broker._consumers
                                  if c[:2] != (self.conn, ch)]
        self._requeue()

    def _confirm_select(self, ch: int, method: Any) -> None:
        self.confirming.add(ch)

    def _exchange_declare(self, ch: int, method: Any) -> None:
        self.broker.exchanges.append((method.exchange, method.type))

    def _queue_bind(self, ch: int, method: Any) -> None:
        self.broker.bindings.append((method.queue, method.exchange))


# What a connection does on each request beyond the plain answer (FakeBroker.ANSWERS) some
# of them get.
_ON_METHOD: dict[type, Callable[[_Connection, int, Any], None]] = {
    pika.spec.Connection.StartOk: _Connection._start_ok,
    pika.spec.Connection.Open: _Connection._open,
    pika.spec.Queue.Declare: _Connection._queue_declare,
    pika.spec.Basic.Consume: _Connection._consume,
    pika.spec.Basic.Ack: _Connection._ack,
    pika.spec.Basic.Cancel: _Connection._cancel,
    pika.spec.Basic.Reject: _Connection._return,
    pika.spec.Basic.Nack: _Connection._return,
    pika.spec.Channel.Close: _Connection._channel_close,
    pika.spec.Confirm.Select: _Connection._confirm_select,
    pika.spec.Exchange.Declare: _Connection._exchange_declare,
    pika.spec.Queue.Bind: _Connection._queue_bind,
}
