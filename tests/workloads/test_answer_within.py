"""A broker that never answers must not hang a client: against a real AMQP server on loopback
that completes the handshake and then falls silent, on a chosen request."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pika.frame
import pika.spec
import pytest

from workloads.clients import (
    ClientError,
    ClientOptions,
    Consumer,
    abandon,
    answer_within,
    connect,
)
from workloads.publisher import Publisher

# Without a deadline these requests wait for good: a regression fails here, never hangs the suite.
pytestmark = pytest.mark.timeout(20)


class SilentBroker:
    """AMQP 0-9-1 on loopback: answers the connection's handshake and every request it is
    told to, and from the first request named in `silent_on` on, answers nothing (the socket
    stays open, as a broker's connection process does while a queue's process hangs)."""

    ANSWERS = {
        pika.spec.Channel.Open: pika.spec.Channel.OpenOk,
        pika.spec.Basic.Qos: pika.spec.Basic.QosOk,
        pika.spec.Confirm.Select: pika.spec.Confirm.SelectOk,
        pika.spec.Channel.Close: pika.spec.Channel.CloseOk,
        pika.spec.Connection.Close: pika.spec.Connection.CloseOk,
    }

    def __init__(self, silent_on: type) -> None:
        self.silent_on = silent_on
        self.requests: list[str] = []
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

    def _send(self, conn: socket.socket, channel: int, method: pika.spec.amqp_object.Method
              ) -> None:
        conn.sendall(pika.frame.Method(channel, method).marshal())

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        silent = False
        with contextlib.suppress(OSError):
            buf += conn.recv(8)  # the protocol header
            buf = b""
            self._send(conn, 0, pika.spec.Connection.Start(
                server_properties={"product": "silent"}, mechanisms="PLAIN", locales="en_US"))
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
                while True:
                    used, frame = pika.frame.decode_frame(buf)
                    if frame is None:
                        break
                    buf = buf[used:]
                    if not isinstance(frame, pika.frame.Method):
                        continue
                    method = frame.method
                    self.requests.append(method.NAME)
                    silent = silent or isinstance(method, self.silent_on)
                    if silent:
                        continue
                    if isinstance(method, pika.spec.Connection.StartOk):
                        self._send(conn, 0, pika.spec.Connection.Tune(
                            channel_max=16, frame_max=131072, heartbeat=0))
                    elif isinstance(method, pika.spec.Connection.Open):
                        self._send(conn, 0, pika.spec.Connection.OpenOk())
                    elif type(method) in self.ANSWERS:
                        self._send(conn, frame.channel_number, self.ANSWERS[type(method)]())

    def close(self) -> None:
        self.sock.close()
        for c in self._conns:
            with contextlib.suppress(OSError):
                c.close()


@pytest.fixture
def silent_on() -> Iterator[type[SilentBroker]]:
    brokers: list[SilentBroker] = []

    def make(method: type) -> SilentBroker:
        brokers.append(SilentBroker(method))
        return brokers[-1]

    yield make  # type: ignore[misc]
    for b in brokers:
        b.close()


def opts(port: int, answer_s: float = 1.0) -> ClientOptions:
    return ClientOptions(port=port, answer_timeout_s=answer_s, heartbeat_s=0)


class NoHistory:
    def append(self, op):  # type: ignore[no-untyped-def]
        return op


def test_a_consume_the_broker_never_answers_fails_within_the_deadline(silent_on) -> None:
    broker = silent_on(pika.spec.Basic.Consume)
    con = Consumer(NoHistory(), "q", "n1", "127.0.0.1", 1, opts(broker.port), f="drain")
    t0 = time.monotonic()
    with pytest.raises(ClientError, match="no answer to basic.consume within 1s"):
        con.open()
    took = time.monotonic() - t0
    assert 0.9 <= took < 3, took
    assert "Basic.Consume" in broker.requests
    assert con.conn is None


def test_a_channel_the_broker_never_opens_fails_a_publisher_within_the_deadline(silent_on) -> None:
    broker = silent_on(pika.spec.Channel.Open)
    pub = Publisher(NoHistory(), "q", "n1", "127.0.0.1", 1, opts(broker.port))
    t0 = time.monotonic()
    with pytest.raises(ClientError, match="no answer to channel.open within 1s"):
        pub.open()
    assert time.monotonic() - t0 < 3


def test_an_answered_request_is_untouched_and_the_timer_is_gone_after_the_block(
        silent_on) -> None:
    broker = silent_on(pika.spec.Basic.Consume)  # answers everything before a consume
    conn = connect("127.0.0.1", opts(broker.port))
    with answer_within(conn, 0.5, "channel.open"):
        ch = conn.channel()
    ch.basic_qos(prefetch_count=5)
    # Past the deadline of the finished block, the connection still works.
    conn.process_data_events(time_limit=0.8)
    assert conn.is_open
    ch.basic_qos(prefetch_count=6)
    assert broker.requests.count("Basic.Qos") == 2
    abandon(conn)


def test_a_close_the_broker_never_answers_ends_past_its_deadline(silent_on) -> None:
    broker = silent_on(pika.spec.Channel.Close)
    conn = connect("127.0.0.1", opts(broker.port))
    conn.channel()
    closer = abandon(conn, timeout_s=0.5)
    assert closer is not None
    closer.join(5)
    assert not closer.is_alive()
    assert conn.is_closed
