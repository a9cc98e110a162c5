"""A broker that never answers must not hang a client: against an AMQP server on loopback
(tests.fake_amqp) that completes the handshake and then falls silent, on a chosen request."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pika.spec
import pytest

from tests.fake_amqp import FakeBroker
from tests.fakes import ListRecorder
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


@pytest.fixture
def silent_on() -> Iterator[type[FakeBroker]]:
    brokers: list[FakeBroker] = []

    def make(method: type) -> FakeBroker:
        brokers.append(FakeBroker(silent_on=method))
        return brokers[-1]

    yield make  # type: ignore[misc]
    for b in brokers:
        b.close()


def opts(port: int, answer_s: float = 1.0) -> ClientOptions:
    return ClientOptions(port=port, answer_timeout_s=answer_s, heartbeat_s=0)


def test_a_consume_the_broker_never_answers_fails_within_the_deadline(silent_on) -> None:
    broker = silent_on(pika.spec.Basic.Consume)
    con = Consumer(ListRecorder(), "q", "n1", "127.0.0.1", 1, opts(broker.port), f="drain")
    t0 = time.monotonic()
    with pytest.raises(ClientError, match="no answer to basic.consume within 1s"):
        con.open()
    took = time.monotonic() - t0
    assert 0.9 <= took < 3, took
    assert "Basic.Consume" in broker.requests
    assert con.conn is None


def test_a_channel_the_broker_never_opens_fails_a_publisher_within_the_deadline(silent_on) -> None:
    broker = silent_on(pika.spec.Channel.Open)
    pub = Publisher(ListRecorder(), "q", "n1", "127.0.0.1", 1, opts(broker.port))
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
