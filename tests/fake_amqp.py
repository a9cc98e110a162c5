"""A small AMQP 0-9-1 server on loopback for client tests: it completes pika's handshake,
answers channel requests, confirms publishes, serves consumers from queues the test fills, and
can fall silent on a chosen request (the socket stays open, as a broker's connection process
does while a queue's process hangs), and can block publishers as a resource alarm does."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import defaultdict
from typing import Any

import pika.frame
import pika.spec


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
    reads what was held."""

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
        self._ready: dict[str, list[tuple[bytes, dict[str, Any]]]] = defaultdict(list)
        self._unacked: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self._conns: list[socket.socket] = []
        self.blocked: str | None = None
        threading.Thread(target=self._accept, daemon=True).start()

    def block(self, reason: str = "low on memory") -> None:
        """Raises an alarm: publishing connections are blocked from their next publish on."""
        self.blocked = reason

    def unblock(self) -> None:
        """Clears the alarm: blocked connections are unblocked and what they sent is read."""
        self.blocked = None

    def put(self, queue: str, body: str, headers: dict[str, Any] | None = None) -> None:
        """Queues a message for the next consumer of `queue`."""
        with self._lock:
            self._ready[queue].append((body.encode(), headers or {}))

    def depth(self, queue: str) -> tuple[int, int]:
        """Returns what `queue` holds: (ready, delivered and not acked)."""
        with self._lock:
            return len(self._ready[queue]), self._unacked[queue]

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
                 out: dict[int, tuple[str, bytes, dict[str, Any]]]) -> None:
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
        buf, silent = b"", False
        held: list[Any] = []  # frames not read while the connection is blocked
        told = False  # connection.blocked sent
        conn.settimeout(0.02)
        confirming: set[int] = set()
        tags: dict[int, int] = defaultdict(int)
        out: dict[int, tuple[str, bytes, dict[str, Any]]] = {}  # delivery tag -> message
        props: dict[str, Any] = {"product": "fake", "capabilities": {
            "publisher_confirms": True, "basic.nack": True, "consumer_cancel_notify": True}}
        if self.version is not None:
            props["version"] = self.version
        try:
            with contextlib.suppress(OSError):
                conn.recv(8)  # the protocol header
                self._send(conn, 0, pika.spec.Connection.Start(
                    server_properties=props, mechanisms="PLAIN", locales="en_US"))
                while True:
                    try:
                        data = conn.recv(65536)
                    except TimeoutError:
                        data = None
                    else:
                        if not data:
                            break
                    buf += data or b""
                    while True:
                        used, frame = pika.frame.decode_frame(buf)
                        if frame is None:
                            break
                        buf = buf[used:]
                        publish = isinstance(frame, pika.frame.Method) and isinstance(
                            frame.method, pika.spec.Basic.Publish)
                        if not told and self.blocked is not None and publish:
                            self._send(conn, 0, pika.spec.Connection.Blocked(self.blocked))
                            told = True
                        if told:
                            held.append(frame)
                        elif not silent:
                            silent = self._answer(conn, frame, confirming, tags, out)
                    if told and self.blocked is None:
                        self._send(conn, 0, pika.spec.Connection.Unblocked())
                        told, frames, held = False, held, []
                        for frame in frames:
                            if not silent:
                                silent = self._answer(conn, frame, confirming, tags, out)
        finally:
            with self._lock:  # what this connection's consumers never acked goes back
                for queue, body, headers in out.values():
                    self._unacked[queue] -= 1
                    self._ready[queue].append((body, headers))

    def _answer(self, conn: socket.socket, frame: Any, confirming: set[int],
                tags: dict[int, int], out: dict[int, tuple[str, bytes, dict[str, Any]]]) -> bool:
        """Answers one frame. Returns whether the connection falls silent from now on."""
        ch = frame.channel_number
        if isinstance(frame, pika.frame.Body):
            self.published.append(frame.fragment)
            if ch in confirming:
                tags[ch] += 1
                self._send(conn, ch, pika.spec.Basic.Ack(delivery_tag=tags[ch]))
            return False
        if not isinstance(frame, pika.frame.Method):
            return False
        method = frame.method
        self.requests.append(method.NAME)
        if self.silent_on is not None and isinstance(method, self.silent_on):
            return True
        if isinstance(method, pika.spec.Connection.StartOk):
            self._send(conn, 0, pika.spec.Connection.Tune(
                channel_max=16, frame_max=131072, heartbeat=0))
        elif isinstance(method, pika.spec.Connection.Open):
            self._send(conn, 0, pika.spec.Connection.OpenOk())
        elif isinstance(method, pika.spec.Queue.Declare):
            self.declared[method.queue] = dict(method.arguments or {})
            self._send(conn, ch, pika.spec.Queue.DeclareOk(method.queue, 0, 0))
        elif isinstance(method, pika.spec.Basic.Consume):
            self._send(conn, ch, pika.spec.Basic.ConsumeOk(consumer_tag=method.consumer_tag))
            self._deliver(conn, ch, method.consumer_tag, method.queue, out)
        elif isinstance(method, pika.spec.Basic.Ack):
            done = out.pop(method.delivery_tag, None)
            if done is not None:
                with self._lock:
                    self._unacked[done[0]] -= 1
        elif type(method) in self.ANSWERS:
            if isinstance(method, pika.spec.Confirm.Select):
                confirming.add(ch)
            elif isinstance(method, pika.spec.Exchange.Declare):
                self.exchanges.append((method.exchange, method.type))
            elif isinstance(method, pika.spec.Queue.Bind):
                self.bindings.append((method.queue, method.exchange))
            self._send(conn, ch, self.ANSWERS[type(method)]())
        return False

    def close(self) -> None:
        self.sock.close()
        for c in self._conns:
            with contextlib.suppress(OSError):
                c.close()
