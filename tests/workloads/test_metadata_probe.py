"""The metadata probe (workloads.metadata_probe) against an AMQP server on loopback
(tests.fake_amqp): each op recorded as the broker answered it, a 541 connection close during a
declare as `fail` with its code, no answer as `info` (the process retired), a refused or
silent connection, leftovers cleaned, and the probe's threads started and stopped."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pika.exceptions
import pika.frame
import pika.spec
import pytest

from clusters.base import Node
from history import HARNESS, METADATA_PROBE, PROBE_FS, Op
from tests.fake_amqp import FakeBroker, _Connection
from tests.fakes import ListRecorder
from workloads.clients import ClientOptions, ProcessIds
from workloads.metadata_probe import (
    EXCHANGE,
    Leftovers,
    MetadataProbe,
    NodeProbe,
    ProbeSettings,
    outcome_of,
)

pytestmark = pytest.mark.timeout(30)

KHEPRI_TIMEOUT = ("INTERNAL_ERROR - failed to declare exchange 'harness-probe-n1-1' in vhost "
                  "'/' because the operation timed out")


class ProbeBroker(FakeBroker):
    """A FakeBroker that binds and deletes exchanges and, on a chosen request, closes the
    connection with
    541 INTERNAL_ERROR (`close_on`) or the channel with 406 (`refuse_on`), as RabbitMQ does."""

    def __init__(self, close_on: type | None = None, refuse_on: type | None = None,
                 silent_on: type | None = None) -> None:
        super().__init__(silent_on=silent_on)
        self.close_on = close_on
        self.refuse_on = refuse_on
        self.deleted: list[str] = []

    def _serve(self, conn: socket.socket) -> None:
        _ProbeConnection(self, conn).serve()


class _ProbeConnection(_Connection):
    broker: ProbeBroker

    def _answer(self, frame: Any) -> bool:
        method = frame.method if isinstance(frame, pika.frame.Method) else None
        b, ch = self.broker, frame.channel_number
        if method is not None and b.close_on is not None and isinstance(method, b.close_on):
            b.requests.append(method.NAME)
            b._send(self.conn, 0, pika.spec.Connection.Close(
                reply_code=541, reply_text=KHEPRI_TIMEOUT, class_id=50, method_id=10))
            return True
        if method is not None and b.refuse_on is not None and isinstance(method, b.refuse_on):
            b.requests.append(method.NAME)
            b._send(self.conn, ch, pika.spec.Channel.Close(
                reply_code=406, reply_text="PRECONDITION_FAILED - inequivalent arg 'durable'",
                class_id=50, method_id=10))
            return False
        quiet = b.silent_on is not None and isinstance(method, b.silent_on)
        if isinstance(method, pika.spec.Exchange.Delete) and not quiet:
            b.requests.append(method.NAME)
            b.deleted.append(method.exchange)
            b._send(self.conn, ch, pika.spec.Exchange.DeleteOk())
            return False
        if isinstance(method, pika.spec.Exchange.Bind) and not quiet:
            b.requests.append(method.NAME)
            b.bindings.append((method.destination, method.source))
            b._send(self.conn, ch, pika.spec.Exchange.BindOk())
            return False
        return super()._answer(frame)


@pytest.fixture
def brokers() -> Iterator[Any]:
    made: list[FakeBroker] = []

    def make(**kw: Any) -> ProbeBroker:
        made.append(ProbeBroker(**kw))
        return made[-1]  # type: ignore[return-value]

    yield make
    for b in made:
        b.close()


def settings(port: int, timeout_s: float = 1.0, interval_s: float = 0.1) -> ProbeSettings:
    return ProbeSettings(interval_s, timeout_s, ClientOptions(port=port, heartbeat_s=0))


def probe(port: int, timeout_s: float = 1.0) -> tuple[NodeProbe, ListRecorder, Leftovers]:
    rec, left = ListRecorder(), Leftovers()
    node = Node("n1", "127.0.0.1", None)  # type: ignore[arg-type]
    return NodeProbe(rec, node, ProcessIds(7), settings(port, timeout_s), left), rec, left


def brief(ops: list[Op]) -> list[tuple[str, str, int | str]]:
    return [(o.f, o.type, o.process) for o in ops]


def test_a_round_connects_declares_binds_and_deletes_each_op_recorded(brokers) -> None:
    b = brokers()
    p, rec, left = probe(b.port)
    p.round()
    assert brief(rec.ops) == [(f, t, 7) for f in PROBE_FS for t in ("invoke", "ok")]
    q = "harness-probe-n1-1"
    assert {(o.node, o.value, o.queue, o.phase, o.error) for o in rec.ops} == {
        ("n1", q, q, "main", None)}
    assert b.exchanges == [(q, "fanout")] and b.declared == {}  # metadata only: no queue
    assert b.bindings == [(q, EXCHANGE)] and b.deleted == [q]
    assert left.names() == []  # deleted by its round
    p.round()
    assert rec.ops[-1].value == "harness-probe-n1-2" and rec.ops[-1].process == 7


def test_a_541_connection_close_during_declare_is_a_fail_with_its_code(brokers) -> None:
    b = brokers(close_on=pika.spec.Exchange.Declare)
    p, rec, left = probe(b.port)
    p.round()
    assert brief(rec.ops) == [("connect", "invoke", 7), ("connect", "ok", 7),
                              ("declare", "invoke", 7), ("declare", "fail", 7)]
    fail = rec.ops[-1]
    assert fail.error == f"541 {KHEPRI_TIMEOUT}" and fail.extra == {"reply_code": 541}
    assert left.names() == ["harness-probe-n1-1"]  # it may be applied later: a leftover
    p.round()  # a refusal is certain: the process goes on
    assert rec.ops[-1].process == 7


def test_a_channel_the_broker_closes_on_declare_is_a_fail_with_its_code(brokers) -> None:
    b = brokers(refuse_on=pika.spec.Exchange.Declare)
    p, rec, _ = probe(b.port)
    p.round()
    assert rec.ops[-1].type == "fail" and rec.ops[-1].f == "declare"
    assert rec.ops[-1].error == "406 PRECONDITION_FAILED - inequivalent arg 'durable'"
    assert rec.ops[-1].extra == {"reply_code": 406}


def test_a_declare_never_answered_is_info_and_retires_the_process(brokers) -> None:
    b = brokers(silent_on=pika.spec.Exchange.Declare)
    p, rec, left = probe(b.port, timeout_s=0.5)
    t0 = time.monotonic()
    p.round()
    assert time.monotonic() - t0 < 3
    assert brief(rec.ops)[-2:] == [("declare", "invoke", 7), ("declare", "info", 7)]
    assert "no answer to exchange.declare within 0.5s" in (rec.ops[-1].error or "")
    assert rec.ops[-1].extra == {}
    assert left.names() == ["harness-probe-n1-1"]
    p.round()
    assert {o.process for o in rec.ops[4:]} == {8}  # a new process after the unknown outcome


def test_a_bind_or_delete_never_answered_is_info_too(brokers) -> None:
    b = brokers(silent_on=pika.spec.Exchange.Delete)
    p, rec, left = probe(b.port, timeout_s=0.5)
    p.round()
    assert brief(rec.ops)[-2:] == [("delete", "invoke", 7), ("delete", "info", 7)]
    assert left.names() == ["harness-probe-n1-1"]


def test_a_refused_tcp_connection_is_a_fail_and_a_silent_handshake_is_info() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there: refused
    p, rec, _ = probe(port, timeout_s=0.5)
    p.round()
    assert brief(rec.ops) == [("connect", "invoke", 7), ("connect", "fail", 7)]
    assert rec.ops[-1].error == "connection refused"
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen()  # the kernel accepts; nothing ever answers the AMQP handshake
    try:
        p, rec, _ = probe(mute.getsockname()[1], timeout_s=0.5)
        p.round()
        p.round()
    finally:
        mute.close()
    assert brief(rec.ops) == [("connect", "invoke", 7), ("connect", "info", 7),
                              ("connect", "invoke", 8), ("connect", "info", 8)]
    assert "AMQPConnectorStackTimeout" in (rec.ops[1].error or "")


def test_outcomes_of_errors() -> None:
    refused = pika.exceptions.ProbableAccessDeniedError(
        "ConnectionClosedByBroker: (530) 'NOT_ALLOWED - vhost / not found'")
    assert outcome_of(refused) == ("fail", "530 NOT_ALLOWED - vhost / not found", 530)
    forced = pika.exceptions.ConnectionClosedByBroker(320, "CONNECTION_FORCED - shutdown")
    assert outcome_of(forced)[0] == "info"  # the node went away: the op's fate is unknown
    assert outcome_of(pika.exceptions.StreamLostError("lost"))[:2] == (
        "info", "StreamLostError: lost")
    assert outcome_of(RuntimeError("surprise"))[0] == "info"


def test_cleanup_deletes_the_leftovers_through_a_node_that_answers(brokers) -> None:
    b = brokers()
    rec = ListRecorder()
    nodes = [Node("n1", "127.0.0.1", None)]  # type: ignore[arg-type]
    mp = MetadataProbe(nodes, rec, settings(b.port), ProcessIds())
    mp.leftovers.add("harness-probe-n1-3", "n1")
    mp.leftovers.add("harness-probe-n2-9", "n2")
    assert mp.cleanup() == {"leftovers": 2, "deleted": 2, "left": [], "error": None}
    assert b.deleted == ["harness-probe-n1-3", "harness-probe-n2-9"]
    assert mp.leftovers.names() == []
    silent = brokers(silent_on=pika.spec.Exchange.Delete)
    mp = MetadataProbe(nodes, rec, settings(silent.port, timeout_s=0.5), ProcessIds())
    mp.leftovers.add("harness-probe-n1-4", "n1")
    out = mp.cleanup()
    assert out["left"] == ["harness-probe-n1-4"] and out["deleted"] == 0
    assert "no answer to exchange.delete" in out["error"]


def test_the_probe_of_every_node_runs_until_stopped_each_invoke_completed(brokers) -> None:
    b = brokers()
    rec = ListRecorder()
    nodes = [Node(n, "127.0.0.1", None) for n in ("n1", "n2")]  # type: ignore[arg-type]
    pids = ProcessIds(100)
    # a generous timeout and a wait for each node's first declare, not a fixed sleep: on a
    # loaded machine a handshake with the fake broker has taken over a second
    mp = MetadataProbe(nodes, rec, settings(b.port, timeout_s=10.0, interval_s=0.1), pids)
    stop = threading.Event()
    mp.start(stop)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and {o.node for o in list(rec.ops)
                                           if o.f == "declare" and o.type == "ok"} != {"n1", "n2"}:
        time.sleep(0.05)
    stop.set()
    mp.join(15)
    first = rec.ops[0]
    assert (first.process, first.f, first.type) == (HARNESS, METADATA_PROBE, "info")
    assert first.value == {"nodes": ["n1", "n2"], "interval_s": 0.1, "timeout_s": 10.0,
                           "queue_prefix": "harness-probe-", "exchange": EXCHANGE}
    client = rec.ops[1:]
    for node in ("n1", "n2"):
        mine = [o for o in client if o.node == node]
        assert [o for o in mine if o.f == "declare" and o.type == "ok"], node
        assert len({o.process for o in mine}) == 1
    assert len([o for o in client if o.type == "invoke"]) == len(
        [o for o in client if o.type != "invoke"])
    assert pids.next() == 102  # one process number per node, from the run's sequence
