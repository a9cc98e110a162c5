"""Messages the broker drops by design: the workload declares its own dead-letter exchange and
queue when the queue has a limit (on the release line the broker announces), records how the
queue dead-letters, and the drain reads the dead letters back, each with its x-death, until the
broker proves that queue empty too. Against an AMQP server on loopback (tests.fake_amqp)."""

from __future__ import annotations

from typing import Any

import pika.spec
import pytest

from clusters.base import Node
from clusters.rabbitmq_admin import QueueDepth
from history import HARNESS
from tests.fake_amqp import FakeBroker
from tests.fakes import ListRecorder
from workloads.clients import (
    ClientError,
    ClientOptions,
    DeclareRefused,
    death_of,
    delivery_count,
)
from workloads.queue_spec import QueueSpec
from workloads.queue_workload import QueueWorkload, WorkloadOptions

pytestmark = pytest.mark.timeout(60)

DLQ = "q.harness-dlq"


class Admin:
    """Answers each queue's depth from the fake broker's own state (`stuck`: queues whose depth
    it says is one message more than they hold, as a broker still holding a message would)."""

    def __init__(self, broker: FakeBroker, stuck: tuple[str, ...] = ()) -> None:
        self.broker, self.stuck = broker, stuck
        self.asked: list[str] = []
        self.policies: list[tuple[str, str, dict[str, Any]]] = []

    def quorum_depth(self, node: Node, queue: str) -> QueueDepth:
        self.asked.append(queue)
        ready, unacked = self.broker.depth(queue)
        return QueueDepth(True, "quorum", ready + (queue in self.stuck), unacked)

    classic_depth = quorum_depth

    def set_policy(self, name: str, queue: str, definition: dict[str, Any]) -> None:
        self.policies.append((name, queue, definition))


def workload(broker: FakeBroker, spec: QueueSpec, history: ListRecorder) -> QueueWorkload:
    nodes = [Node("n1", "127.0.0.1", None)]  # type: ignore[arg-type]
    opts = WorkloadOptions(client=ClientOptions(port=broker.port, heartbeat_s=0),
                           drain_idle_s=0.3, drain_timeout_s=3.0)
    return QueueWorkload(spec, opts, nodes, history)


def test_a_queue_that_drops_by_design_gets_the_harnesss_dead_letter_queue_first():
    broker = FakeBroker(version="3.10.25")
    try:
        h = ListRecorder()
        w = workload(broker, QueueSpec(name="q", max_length=500, overflow="drop-head"), h)
        w.setup(Admin(broker))
        assert broker.exchanges == [("q.harness-dlx", "fanout")]
        assert broker.bindings == [(DLQ, "q.harness-dlx")]
        # The dead-letter queue is declared before the queue, of its kind, without limits.
        assert list(broker.declared) == [DLQ, "q"]
        assert broker.declared[DLQ] == {"x-queue-type": "quorum"}
        assert broker.declared["q"] == {"x-queue-type": "quorum", "x-max-length": 500,
                                        "x-overflow": "drop-head",
                                        "x-dead-letter-exchange": "q.harness-dlx"}
        [seen] = h.ops
        assert (seen.type, seen.process, seen.f) == ("info", HARNESS, "dead-lettering")
        assert seen.value == {"queue": "q", "exchange": "q.harness-dlx",
                              "dead_letter_queue": DLQ, "by": "harness",
                              "limits": ["max length 500 (drop-head)"]}
    finally:
        broker.close()


@pytest.mark.parametrize(("version", "dead_letters"), [("3.10.25", False), ("4.0.5", True)])
def test_a_quorum_queue_gets_one_on_4_0_whose_default_delivery_limit_drops(version,
                                                                           dead_letters):
    broker = FakeBroker(version=version)
    try:
        h = ListRecorder()
        workload(broker, QueueSpec(name="q"), h).setup(Admin(broker))
        assert ("x-dead-letter-exchange" in broker.declared["q"]) is dead_letters
        assert (DLQ in broker.declared) is dead_letters
        assert "x-delivery-limit" not in broker.declared["q"]  # the broker's default holds
        if dead_letters:
            assert h.ops[0].value["limits"] == ["delivery limit 20 (RabbitMQ 4.0's default)"]
        else:
            assert h.ops == []
    finally:
        broker.close()


def test_a_mirrored_queues_dead_letters_are_mirrored_alike():
    broker = FakeBroker(version="3.10.25")
    try:
        admin = Admin(broker)
        spec = QueueSpec(name="q", type="mirrored", max_length=10)
        workload(broker, spec, ListRecorder()).setup(admin)
        assert [(n, q) for n, q, _ in admin.policies] == [("harness-ha", "q"),
                                                           ("harness-dlq-ha", DLQ)]
        assert admin.policies[0][2] == admin.policies[1][2]
        assert broker.declared[DLQ] == {"x-queue-type": "classic"}
    finally:
        broker.close()


def test_the_users_own_dead_letter_exchange_is_respected_and_not_read():
    broker = FakeBroker(version="4.0.5")
    try:
        h = ListRecorder()
        w = workload(broker, QueueSpec(name="q", dead_letter_exchange="mine"), h)
        w.setup(Admin(broker))
        assert broker.declared == {"q": {"x-queue-type": "quorum",
                                         "x-dead-letter-exchange": "mine"}}
        assert broker.exchanges == [] and broker.bindings == []
        assert h.ops[0].value["by"] == "user" and h.ops[0].value["dead_letter_queue"] is None
    finally:
        broker.close()


def death(reason: str, count: int = 1) -> dict[str, Any]:
    return {"x-death": [{"count": count, "reason": reason, "queue": "q", "exchange": "",
                         "routing-keys": ["q"]}],
            "x-first-death-reason": reason, "x-first-death-queue": "q"}


def drained(stuck: tuple[str, ...] = ()) -> tuple[Any, ListRecorder, Admin]:
    """Sets up a quorum queue with a delivery limit and drains it: "q" holds a first delivery
    and a redelivery (x-delivery-count 2), the dead-letter queue two messages the queue dropped.
    Returns the drain's report, the history and the admin."""
    broker = FakeBroker(version="3.10.25")
    try:
        h = ListRecorder()
        admin = Admin(broker, stuck)
        w = workload(broker, QueueSpec(name="q", delivery_limit=3), h)
        w.setup(admin)
        broker.put("q", "0-1")
        broker.put("q", "0-2", {"x-delivery-count": 2})
        broker.put(DLQ, "0-0", death("maxlen"))
        broker.put(DLQ, "1-0", death("delivery_limit", 2))
        return w.drain(admin), h, admin
    finally:
        broker.close()


def test_the_drain_reads_the_dead_letters_back_with_their_death_and_no_ack():
    report, h, admin = drained()
    assert report.complete and report.reason is None
    assert report.delivered == {"n1": 2}
    assert report.dead_letter is not None
    assert report.dead_letter["queue"] == DLQ and report.dead_letter["complete"] is True
    assert report.dead_letter["delivered"] == {"n1": 2}
    ops = [o for o in h.ops if o.process != HARNESS]
    drains = [(o.f, o.value, o.delivery_count) for o in ops if o.f == "drain"]
    assert drains == [("drain", "0-1", None), ("drain", "0-2", 2)]
    assert [o.value for o in ops if o.f == "ack"] == ["0-1", "0-2"]  # the dead letters: none
    dead = [o for o in ops if o.f == "dead-letter"]
    assert [(o.value, o.publisher, o.seq, o.queue, o.phase, o.type) for o in dead] == [
        ("0-0", 0, 0, DLQ, "drain", "ok"), ("1-0", 1, 0, DLQ, "drain", "ok")]
    assert [o.extra for o in dead] == [
        {"reason": "maxlen", "death_count": 1, "death_queue": "q"},
        {"reason": "delivery_limit", "death_count": 2, "death_queue": "q"}]
    # Each queue's emptiness was asked of the broker after it was read.
    assert admin.asked == ["q", DLQ]


def test_a_dead_letter_queue_the_broker_does_not_prove_empty_leaves_the_drain_incomplete():
    report, _h, _admin = drained(stuck=(DLQ,))
    assert report.complete is False
    assert report.reason == (f"the dead-letter queue {DLQ}: the queue still holds messages "
                             "(n1: 1 ready, 0 unacked)")
    assert report.dead_letter is not None and report.dead_letter["complete"] is False


def test_headers_give_the_delivery_count_and_the_latest_death():
    assert delivery_count({"x-delivery-count": 3}) == 3
    assert delivery_count({}) is None and delivery_count(None) is None
    assert delivery_count({"x-delivery-count": True}) is None
    latest = {"x-death": [{"count": 4, "reason": b"delivery_limit", "queue": b"q"},
                          {"count": 1, "reason": "maxlen", "queue": "older"}]}
    assert death_of(latest) == {"reason": "delivery_limit", "death_count": 4,
                                "death_queue": "q"}
    assert death_of({"x-first-death-reason": "expired", "x-first-death-queue": "q"}) == {
        "reason": "expired", "death_count": None, "death_queue": "q"}
    assert death_of(None) == {"reason": None, "death_count": None, "death_queue": None}


@pytest.mark.parametrize("refused", ["q", DLQ])
def test_a_declare_the_broker_refuses_is_its_refusal_naming_queue_arguments_and_reply(refused):
    broker = FakeBroker(version="4.3.6")
    reply = ("PRECONDITION_FAILED - invalid arg 'x-delayed-retry-type' for queue 'q' in vhost "
             "'/': {unacceptable_type,longstr}")
    broker.refuse_declare = (refused, 406, reply)
    try:
        h = ListRecorder()
        w = workload(broker, QueueSpec(name="q", max_length=500, overflow="drop-head"), h)
        with pytest.raises(DeclareRefused) as e:
            w.setup(Admin(broker))
        said = str(e.value)
        assert said.startswith(f"RabbitMQ 4.3.6 refused to declare queue {refused} with "
                               "arguments {'x-queue-type': 'quorum'")
        assert said.endswith(f": 406 {reply}")
        assert isinstance(e.value, ClientError)  # the runner's setup failure: exit 2, torn down
        assert refused not in broker.declared
        assert h.ops == []  # nothing recorded as if the queue were there
    finally:
        broker.close()


# RabbitMQ's reply to a quorum queue declared with x-max-priority, as its
# check_declare_arguments words it (rabbit_amqqueue.erl: "invalid arg '~ts' for ~ts of queue
# type ~ts"; x-max-priority is not among rabbit_quorum_queue:capabilities()'s queue_arguments).
MAX_PRIORITY_REPLY = ("PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'q' in "
                      "vhost '/' of queue type rabbit_quorum_queue")


def test_a_max_priority_the_broker_refuses_is_its_refusal_with_the_reply_verbatim():
    """--max-priority is sent to a quorum queue as given: the broker's refusal of the argument
    is the DeclareRefused, carrying the arguments sent (x-max-priority among them) and the
    broker's reply word for word; the harness's dead-letter queue, declared without it before
    the queue, is not refused."""
    broker = FakeBroker(version="4.3.6")
    broker.refuse_argument = ("x-max-priority", 406, MAX_PRIORITY_REPLY)
    try:
        h = ListRecorder()
        spec = QueueSpec(name="q", max_priority=10, max_length=500)
        with pytest.raises(DeclareRefused) as e:
            workload(broker, spec, h).setup(Admin(broker))
        assert str(e.value) == (
            "RabbitMQ 4.3.6 refused to declare queue q with arguments {'x-queue-type': "
            "'quorum', 'x-max-length': 500, 'x-max-priority': 10, 'x-dead-letter-exchange': "
            f"'q.harness-dlx'}}: 406 {MAX_PRIORITY_REPLY}")
        assert "x-max-priority" not in broker.declared[DLQ] and "q" not in broker.declared
        assert h.ops == []
    finally:
        broker.close()


def test_a_max_priority_the_broker_takes_is_declared_as_given():
    broker = FakeBroker(version="4.3.6")
    try:
        h = ListRecorder()
        workload(broker, QueueSpec(name="q", type="classic", max_priority=255), h).setup(
            Admin(broker))
        assert broker.declared["q"] == {"x-queue-type": "classic", "x-max-priority": 255}
    finally:
        broker.close()


def test_a_connection_lost_at_declare_is_no_refusal():
    broker = FakeBroker(version="4.3.6", silent_on=pika.spec.Queue.Declare)
    try:
        opts = WorkloadOptions(client=ClientOptions(port=broker.port, heartbeat_s=0,
                                                    answer_timeout_s=0.5))
        w = QueueWorkload(QueueSpec(name="q"), opts,
                          [Node("n1", "127.0.0.1", None)],  # type: ignore[arg-type]
                          ListRecorder())
        with pytest.raises(ClientError) as e:
            w.setup(Admin(broker))
        assert not isinstance(e.value, DeclareRefused)
    finally:
        broker.close()
