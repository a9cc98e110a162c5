"""The backlog: messages published and confirmed before the main phase, as publisher 0, whose
main-phase thread continues the sequence. Against an AMQP server on loopback that confirms."""

from __future__ import annotations

import pytest

from clusters.base import Node
from tests.fakes import ListRecorder
from workloads.clients import ClientError, ClientOptions
from workloads.queue_spec import QueueSpec
from workloads.queue_workload import QueueWorkload, WorkloadOptions

pytestmark = pytest.mark.timeout(60)


def workload(port: int, backlog: int, history: ListRecorder) -> QueueWorkload:
    nodes = [Node("n1", "127.0.0.1", None)]  # type: ignore[arg-type]
    opts = WorkloadOptions(backlog=backlog, client=ClientOptions(port=port, heartbeat_s=0))
    return QueueWorkload(QueueSpec(name="q"), opts, nodes, history)


def test_the_backlog_is_confirmed_before_the_main_phase_and_its_sequence_continues(broker):
    h = ListRecorder()
    w = workload(broker.port, 500, h)
    w.setup(admin=None)  # type: ignore[arg-type]  # a quorum queue needs no policy
    publishes = [o for o in h.ops if o.f == "publish"]
    assert [o.type for o in publishes].count("ok") == 500
    assert {o.phase for o in publishes} == {"main"}
    assert {o.publisher for o in publishes} == {0}
    assert sorted(o.seq for o in publishes if o.type == "ok") == list(range(500))
    assert len(broker.published) == 500 and "Queue.Declare" in broker.requests
    # Publisher 0's main-phase thread goes on from where the backlog ended.
    assert w._slots[0].next_seq() == 500 and w._slots[1].next_seq() == 0


def test_no_backlog_publishes_nothing_before_the_main_phase(broker):
    h = ListRecorder()
    workload(broker.port, 0, h).setup(admin=None)  # type: ignore[arg-type]
    assert h.ops == [] and broker.published == []


def test_a_backlog_the_broker_never_takes_fails_the_setup(monkeypatch):
    h = ListRecorder()
    w = workload(1, 10, h)  # nothing listens on port 1
    monkeypatch.setattr(QueueWorkload, "BACKLOG_PATIENCE_S", 1.0)
    with pytest.raises(ClientError, match="backlog: only 0 of 10 messages confirmed"):
        w._publish_backlog(10)
