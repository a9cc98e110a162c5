"""Publishes held by a resource alarm are unknown, never failed: against an AMQP server on
loopback (tests.fake_amqp) that blocks a publishing connection as RabbitMQ's alarms do."""

from __future__ import annotations

import time

import pytest

from history import BLOCKED, BLOCKED_ERROR, HARNESS, UNBLOCKED
from tests.fake_amqp import FakeBroker
from tests.fakes import ListRecorder
from workloads.clients import ClientOptions
from workloads.publisher import Publisher

pytestmark = pytest.mark.timeout(20)


def publisher(broker: FakeBroker, rec: ListRecorder, process: int = 4,
              timeout: float = 0.5) -> Publisher:
    pub = Publisher(rec, "q", "n1", "127.0.0.1", process,
                    ClientOptions(port=broker.port, publish_timeout_s=timeout, heartbeat_s=0,
                                  window=2))
    pub.open()
    return pub


def seen(rec: ListRecorder) -> list[tuple[object, str, str, str | None]]:
    return [(o.process, o.type, o.f, o.error) for o in rec.ops if o.type != "invoke"]


def test_a_publish_unconfirmed_while_blocked_is_unknown_blocked_never_failed(
        broker: FakeBroker) -> None:
    rec = ListRecorder()
    pub = publisher(broker, rec, timeout=1.5)
    assert pub.publish() == "ok"
    broker.block("low on memory")
    pub.send()
    pub.send()
    pub.settle()
    assert pub.spent and pub.blocked == "low on memory"
    assert seen(rec) == [(4, "ok", "publish", None),
                         (HARNESS, "info", BLOCKED, None),
                         (4, "info", "publish", BLOCKED_ERROR),
                         (4, "info", "publish", BLOCKED_ERROR)]
    observed = next(o for o in rec.ops if o.f == BLOCKED)
    assert observed.value == {"process": 4, "publisher": 4, "reason": "low on memory"}
    assert (observed.node, observed.queue) == ("n1", "q")
    assert not any(o.type == "fail" for o in rec.ops)
    pub.close()


def test_an_alarm_that_clears_in_time_lets_the_confirms_come(broker: FakeBroker) -> None:
    rec = ListRecorder()
    pub = publisher(broker, rec, timeout=5.0)
    broker.block("low on disk")
    pub.send()
    pub.drive(time.monotonic() + 4, lambda: pub.blocked is not None)
    assert pub.blocked == "low on disk" and pub.in_flight == 1
    broker.unblock()
    pub.settle()
    assert pub.blocked is None and not pub.spent
    # pika hands connection events over after the channel's, so "unblocked" may follow the ack.
    assert sorted((f, t) for _p, t, f, _e in seen(rec)) == [
        (BLOCKED, "info"), ("publish", "ok"), (UNBLOCKED, "info")]
    assert seen(rec)[0][2] == BLOCKED
    assert next(o for o in rec.ops if o.f == UNBLOCKED).value == {
        "process": 4, "publisher": 4, "reason": None}
    pub.close()


def test_a_publish_timing_out_on_a_connection_never_blocked_keeps_its_reason(
        broker: FakeBroker) -> None:
    """Only a blocked connection's timeouts say "blocked"."""
    from tests.workloads.test_publisher import publisher as scripted

    pub, _script, rec = scripted(window=1, timeout=0.05)
    pub.send()
    pub.drive(time.monotonic() + 1)
    assert rec.ops[-1].error == "no confirm within 0.05s"
    pub2, _script2, rec2 = scripted(window=1, timeout=0.05)
    pub2._on_blocked(None, None)
    pub2.send()
    pub2.drive(time.monotonic() + 1)
    assert rec2.ops[-1].error == BLOCKED_ERROR
    assert rec2.ops[0].f == BLOCKED and rec2.ops[0].value["reason"] == "blocked"
