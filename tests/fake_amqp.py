"""A small AMQP 0-9-1 server on loopback for client tests: it completes pika's handshake,
answers channel requests, confirms publishes, and can fall silent on a chosen request (the
socket stays open, as a broker's connection process does while a queue's process hangs)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import defaultdict

import pika.frame
import pika.spec


class FakeBroker:
    """Serves every connection made to `port`. `silent_on`: a request type (e.g.
    pika.spec.Basic.Consume) from whose first arrival on a connection nothing more is answered.
    `requests` lists every request's name as it came; `published` every message body."""

    ANSWERS = {
        pika.spec.Channel.Open: pika.spec.Channel.OpenOk,
        pika.spec.Basic.Qos: pika.spec.Basic.QosOk,
        pika.spec.Confirm.Select: pika.spec.Confirm.SelectOk,
        pika.spec.Channel.Close: pika.spec.Channel.CloseOk,
        pika.spec.Connection.Close: pika.spec.Connection.CloseOk,
    }

    def __init__(self, silent_on: type | None = None) -> None:
        self.silent_on = silent_on
        self.requests: list[str] = []
        self.published: list[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self._conns.append(conn)
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _send(conn: socket.socket, channel: int, method: pika.spec.amqp_object.Method) -> None:
        conn.sendall(pika.frame.Method(channel, method).marshal())

    def _serve(self, conn: socket.socket) -> None:
        buf, silent = b"", False
        confirming: set[int] = set()
        tags: dict[int, int] = defaultdict(int)
        with contextlib.suppress(OSError):
            conn.recv(8)  # the protocol header
            self._send(conn, 0, pika.spec.Connection.Start(
                server_properties={"product": "fake", "capabilities": {
                    "publisher_confirms": True, "basic.nack": True,
                    "consumer_cancel_notify": True}},
                mechanisms="PLAIN", locales="en_US"))
            while data := conn.recv(65536):
                buf += data
                while True:
                    used, frame = pika.frame.decode_frame(buf)
                    if frame is None:
                        break
                    buf = buf[used:]
                    if silent:
                        continue
                    ch = frame.channel_number
                    if isinstance(frame, pika.frame.Body):
                        self.published.append(frame.fragment)
                        if ch in confirming:
                            tags[ch] += 1
                            self._send(conn, ch, pika.spec.Basic.Ack(delivery_tag=tags[ch]))
                        continue
                    if not isinstance(frame, pika.frame.Method):
                        continue
                    method = frame.method
                    self.requests.append(method.NAME)
                    if self.silent_on is not None and isinstance(method, self.silent_on):
                        silent = True
                    elif isinstance(method, pika.spec.Connection.StartOk):
                        self._send(conn, 0, pika.spec.Connection.Tune(
                            channel_max=16, frame_max=131072, heartbeat=0))
                    elif isinstance(method, pika.spec.Connection.Open):
                        self._send(conn, 0, pika.spec.Connection.OpenOk())
                    elif isinstance(method, pika.spec.Queue.Declare):
                        self._send(conn, ch, pika.spec.Queue.DeclareOk(method.queue, 0, 0))
                    elif type(method) in self.ANSWERS:
                        if isinstance(method, pika.spec.Confirm.Select):
                            confirming.add(ch)
                        self._send(conn, ch, self.ANSWERS[type(method)]())

    def close(self) -> None:
        self.sock.close()
        for c in self._conns:
            with contextlib.suppress(OSError):
                c.close()
