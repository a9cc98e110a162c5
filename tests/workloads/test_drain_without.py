"""The drain without a node that would not boot again (issue 32, item 4): it reads and asks only the
nodes that serve, and the queue's kind says whether they can prove it empty without the others:
a quorum queue with a serving majority of its members can, a classic queue whose home node is
down cannot, nor a quorum queue without a serving majority. Against an AMQP server on loopback
(tests.fake_amqp) and an admin whose placement and depths the test sets."""

from __future__ import annotations

from typing import Any

import pytest

from clusters.base import Node
from clusters.rabbitmq_admin import QueueDepth
from tests.fake_amqp import FakeBroker
from tests.fakes import ListRecorder
from workloads.clients import ClientOptions
from workloads.kinds import kind_of
from workloads.queue_spec import QueueSpec
from workloads.queue_workload import QueueWorkload, WorkloadOptions

pytestmark = pytest.mark.timeout(60)

NODES = [Node(n, "127.0.0.1", None) for n in ("n1", "n2", "n3")]  # type: ignore[arg-type]


class Admin:
    """Answers depths from the fake broker's state, through whichever node it is asked, and
    where the queue lives as the test says; records which nodes it was asked through."""

    def __init__(self, broker: FakeBroker, placement: dict[str, Any]) -> None:
        self.broker, self.placement = broker, placement
        self.asked_through: list[str] = []

    def quorum_depth(self, node: Node, queue: str) -> QueueDepth:
        self.asked_through.append(node.name)
        ready, unacked = self.broker.depth(queue)
        return QueueDepth(True, "quorum", ready, unacked)

    classic_depth = quorum_depth

    def queue_placement(self, queue: str) -> dict[str, Any]:
        return self.placement


def drain(spec: QueueSpec, placement: dict[str, Any], down: tuple[str, ...],
          held: tuple[str, ...] = ("0-0", "0-1")) -> tuple[Any, ListRecorder, Admin]:
    """Puts `held` in the queue and drains it without `down`. Returns the report, the history
    and the admin."""
    broker = FakeBroker(version="3.10.25")
    try:
        h = ListRecorder()
        admin = Admin(broker, placement)
        opts = WorkloadOptions(client=ClientOptions(port=broker.port, heartbeat_s=0),
                               drain_idle_s=0.3, drain_timeout_s=3.0)
        w = QueueWorkload(spec, opts, NODES, h)
        for mid in held:
            broker.put(spec.name, mid)
        return w.drain(admin, down), h, admin  # type: ignore[arg-type]
    finally:
        broker.close()


QUORUM = {"type": "quorum", "leader": "n2", "members": ["n1", "n2", "n3"]}


def test_a_quorum_queue_with_a_serving_majority_is_proven_empty_without_the_dead_member():
    report, h, admin = drain(QueueSpec(name="q"), QUORUM, ("n1",))
    assert report.complete is True
    assert report.reason == "proven empty without n1, which did not boot"
    assert report.without == ["n1"]
    # n1 was neither read nor asked; n2 read what was left, its leader's answer proved it empty.
    assert {o.node for o in h.ops} == {"n2", "n3"}
    assert sorted(o.value for o in h.ops if o.f == "drain") == ["0-0", "0-1"]
    assert set(admin.asked_through) == {"n2", "n3"} and "n1" not in report.depth
    assert report.delivered == {"n2": 2, "n3": 0}


def test_a_quorum_queue_without_a_serving_majority_stays_unproven_with_the_reason():
    report, h, _admin = drain(QueueSpec(name="q"), QUORUM, ("n1", "n2"))
    assert report.complete is False
    assert report.reason == ("n1, n2 did not boot again, and only n3 of its members n1, n2, n3 "
                             "serves: without a majority no leader's answer proves it empty: "
                             "the queue's emptiness is unproven")
    # What the serving node held was read all the same.
    assert sorted(o.value for o in h.ops if o.f == "drain") == ["0-0", "0-1"]


def test_a_classic_queue_whose_home_node_is_dead_stays_unproven_with_the_reason():
    classic = {"type": "classic", "leader": "n1", "members": ["n1"]}
    report, _h, _admin = drain(QueueSpec(name="q", type="classic"), classic, ("n1",), held=())
    assert report.complete is False
    assert report.reason == ("n1 did not boot again, and its home node n1 did not boot: what it "
                             "holds cannot be read: the queue's emptiness is unproven")
    assert report.without == ["n1"]


def test_a_classic_queue_at_home_on_a_serving_node_is_proven_without_the_dead_one():
    classic = {"type": "classic", "leader": "n3", "members": ["n3"]}
    report, _h, _admin = drain(QueueSpec(name="q", type="classic"), classic, ("n1",))
    assert report.complete is True and report.delivered["n2"] == 2


def test_with_every_node_serving_the_drain_is_as_before():
    report, h, admin = drain(QueueSpec(name="q"), {}, ())
    assert report.complete is True and report.reason is None and report.without == []
    assert set(admin.asked_through) == {"n1", "n2", "n3"}
    assert report.delivered["n1"] == 2


@pytest.mark.parametrize(("spec", "placement", "down", "why"), [
    (QueueSpec(name="q"), {"members": ["n1", "n2", "n3", "n4", "n5"]}, ("n1", "n2"), None),
    (QueueSpec(name="q"), {"members": ["n1", "n2"]}, ("n1",),
     "only n2 of its members n1, n2 serves: without a majority no leader's answer proves it "
     "empty"),
    (QueueSpec(name="q"), {}, ("n1",), "no serving node says which nodes are its members"),
    (QueueSpec(name="q", type="classic"), {}, ("n1",),
     "no serving node says where the queue lives"),
    (QueueSpec(name="q", type="mirrored"), {"leader": "n2", "mirrors": ["n1"]}, ("n1",), None),
    (QueueSpec(name="q", type="stream"), {"members": ["n1", "n2", "n3"]}, ("n1",),
     "a stream's last offset is not judged without its members (n1)"),
])
def test_each_kind_says_whether_the_serving_nodes_prove_it(spec, placement, down, why):
    assert kind_of(spec).proof_without(placement, down) == why
