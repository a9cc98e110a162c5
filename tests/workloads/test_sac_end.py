"""How the harness ends a consumer of a queue with a single active consumer: its channel's close
alone, no basic.cancel (a cancelled single active consumer keeps what it holds while the next
one is activated and fed later messages; a closed channel gives it back first). The close is
recorded with what the consumer held; a delivery that arrives while the close is under way is
recorded as received, and the close's outcome says it was given back. A consumer of any other
queue still cancels first. Against an AMQP server on loopback (tests.fake_amqp)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pika.spec
import pytest

from clusters.base import Node
from clusters.rabbitmq_admin import QueueDepth
from history import Op
from tests.fake_amqp import FakeBroker, poll_until
from tests.fakes import ListRecorder
from workloads.clients import ClientError, ClientOptions, Consumer
from workloads.queue_spec import QueueSpec
from workloads.queue_workload import QueueWorkload, WorkloadOptions

# A close the broker never answers must end at the answer timeout, never hang.
pytestmark = pytest.mark.timeout(30)

NODES = [Node("n1", "127.0.0.1", None)]  # type: ignore[arg-type]


def sac_consumer(broker: FakeBroker, h: ListRecorder, **opts: Any) -> Consumer:
    """A single active consumer of "q" as process 7 that acks its first two deliveries at once
    and the next only after 100 s: it holds every delivery but the first two."""
    o = ClientOptions(port=broker.port, heartbeat_s=0, answer_timeout_s=1.0, **opts)
    return Consumer(h, "q", "n1", "127.0.0.1", 7, o, ack_interval_s=100.0, single_active=True)


def test_a_single_active_consumer_is_ended_by_its_channels_close_alone(broker):
    for seq in range(3):
        broker.put("q", f"0-{seq}")
    h = ListRecorder()
    con = sac_consumer(broker, h)
    con.open()
    poll_until(con, lambda: con.acked == 2 and con.delivered == 3)
    con.close()
    assert [(o.f, o.type, o.value) for o in h.ops] == [
        ("consume", "ok", "0-0"), ("consume", "ok", "0-1"), ("consume", "ok", "0-2"),
        ("ack", "ok", "0-0"), ("ack", "ok", "0-1"), ("close", "invoke", None),
        ("close", "ok", None)]
    invoke, ok = h.ops[-2:]
    assert invoke.extra == {"by": "harness", "holding": ["0-2"]}
    assert ok.extra == {"holding": ["0-2"]}
    for o in (invoke, ok):
        assert (o.process, o.consumer, o.node, o.queue, o.phase) == (7, "consume-7", "n1", "q",
                                                                     "main")
    # No basic.cancel went out, and the close gave the held message back.
    assert "Basic.Cancel" not in broker.requests and "Channel.Close" in broker.requests
    assert broker.wait_for_depth("q", (1, 0)) == (1, 0)


def test_a_delivery_during_the_close_is_recorded_received_and_the_close_gives_it_back(broker):
    # RabbitMQ may hand the active consumer one more message as its channel's close arrives (its
    # ack made room); pika drops it unseen once closing, and the broker gives it back with the
    # close. Unrecorded, its flagged delivery to the next consumer would have no first one
    # (quorum-sac-fifo on 4.0.5, seed 4008: 0-750).
    broker.put("q", "0-0")
    h = ListRecorder()
    con = sac_consumer(broker, h)
    con.open()
    poll_until(con, lambda: con.acked == 1)
    broker.late_on_close = ("q", "0-1")
    con.close()
    assert [(o.f, o.type, o.value) for o in h.ops] == [
        ("consume", "ok", "0-0"), ("ack", "ok", "0-0"), ("close", "invoke", None),
        ("consume", "ok", "0-1"), ("close", "ok", None)]
    late = h.ops[3]
    assert (late.redelivered, late.consumer, late.process) == (False, "consume-7", 7)
    assert h.ops[2].extra["holding"] == [] and h.ops[4].extra["holding"] == ["0-1"]
    # Nothing settled it: no reject, no cancel; the broker has it back, ready.
    assert not {"Basic.Cancel", "Basic.Reject", "Basic.Nack"} & set(broker.requests)
    assert broker.wait_for_depth("q", (1, 0)) == (1, 0)
    assert con.channel is None  # handed over; nothing of the close's recording is left behind


def test_a_planted_crash_of_a_single_active_consumer_records_what_pika_had_not_dispatched(broker):
    # A crash ends the consumer from inside a delivery's callback: what pika had read behind that
    # delivery is recorded as received (the close gives it back), never rejected.
    for i in range(4):
        broker.put("q", f"0-{i}")
    h = ListRecorder()
    con = sac_consumer(broker, h, crash_after=1, prefetch=10)
    con.open()
    with pytest.raises(ClientError, match="its channel closed"):
        poll_until(con, lambda: False)
    assert con.crashed
    con.close()
    delivered = [o.value for o in h.ops if o.f == "consume"]
    assert delivered[0] == "0-0" and sorted(delivered) == [f"0-{i}" for i in range(len(delivered))]
    ends = [o for o in h.ops if o.f in ("cancel", "close")]
    assert [(o.f, o.type) for o in ends] == [("close", "invoke"), ("close", "ok")]
    assert ends[0].extra["holding"] == delivered
    assert not [o for o in h.ops if o.f in ("reject", "ack")]
    assert "Basic.Cancel" not in broker.requests and "Basic.Reject" not in broker.requests
    assert broker.wait_for_depth("q", (4, 0)) == (4, 0)


def test_a_close_never_answered_ends_info_with_what_the_consumer_held():
    broker = FakeBroker(silent_on=pika.spec.Channel.Close)
    try:
        for seq in range(3):
            broker.put("q", f"0-{seq}")
        h = ListRecorder()
        con = sac_consumer(broker, h)
        con.open()
        poll_until(con, lambda: con.acked == 2 and con.delivered == 3)
        t0 = time.monotonic()
        con.close()
        assert time.monotonic() - t0 < 5
        ends = [(o.f, o.type, o.extra.get("holding")) for o in h.ops if o.f == "close"]
        assert ends == [("close", "invoke", ["0-2"]), ("close", "info", ["0-2"])]
        assert "no answer to basic.cancel or channel.close within 1s" in (h.ops[-1].error or "")
        assert "Basic.Cancel" not in broker.requests
    finally:
        broker.close()


def consumer_ends(h: ListRecorder, phase: str) -> dict[int, list[tuple[str, str]]]:
    """Returns each consumer process's end ops in `phase`, as (f, type), by process."""
    out: dict[int, list[tuple[str, str]]] = {}
    for o in h.ops:
        if o.f in ("cancel", "close") and o.phase == phase:
            out.setdefault(o.process, []).append((o.f, o.type))
    return out


def run_main_phase(broker: FakeBroker, spec: QueueSpec) -> ListRecorder:
    """Runs the workload's main phase on `spec` with two consumers until two acks, then stops
    the workers. Returns the history."""
    for seq in range(50):
        broker.put(spec.name, f"0-{seq}")
    h = ListRecorder()
    opts = WorkloadOptions(publishers=1, consumers=2, rate=20.0, consume_rate=10.0,
                           client=ClientOptions(port=broker.port, heartbeat_s=0, prefetch=1))
    w = QueueWorkload(spec, opts, NODES, h)
    stop = threading.Event()
    w.start(stop)
    deadline = time.monotonic() + 5
    while sum(o.f == "ack" for o in h.ops) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    w.join(10)
    return h


def test_the_workers_stop_closes_each_single_active_consumer_without_a_cancel(broker):
    h = run_main_phase(broker, QueueSpec(name="q", single_active_consumer=True))
    ends = consumer_ends(h, "main")
    assert len(ends) == 2
    assert all(e == [("close", "invoke"), ("close", "ok")] for e in ends.values())
    assert "Basic.Cancel" not in broker.requests
    # The consumer the fake fed ends holding its unacked delivery, at the invocation and after.
    fed: list[Op] = [o for o in h.ops if o.f == "close" and o.extra.get("holding")]
    assert fed and all(o.process == fed[0].process for o in fed)


def test_the_workers_stop_still_cancels_a_consumer_of_a_queue_without_one(broker):
    h = run_main_phase(broker, QueueSpec(name="q"))
    ends = consumer_ends(h, "main")
    assert len(ends) == 2
    assert all(e == [("cancel", "invoke"), ("cancel", "ok"), ("close", "invoke"),
                     ("close", "ok")] for e in ends.values())
    assert broker.requests.count("Basic.Cancel") == 2


class Admin:
    """Answers the queue's depth from the fake broker's state."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker

    def quorum_depth(self, node: Node, queue: str) -> QueueDepth:
        ready, unacked = self.broker.depth(queue)
        return QueueDepth(True, "quorum", ready, unacked)


@pytest.mark.parametrize(("sac", "want"), [
    (True, [("close", "invoke"), ("close", "ok")]),
    (False, [("cancel", "invoke"), ("cancel", "ok"), ("close", "invoke"), ("close", "ok")]),
])
def test_the_drain_ends_its_consumer_as_the_queue_says(broker, sac, want):
    for seq in range(3):
        broker.put("q", f"0-{seq}")
    h = ListRecorder()
    opts = WorkloadOptions(client=ClientOptions(port=broker.port, heartbeat_s=0),
                           drain_idle_s=0.3, drain_timeout_s=20.0)
    w = QueueWorkload(QueueSpec(name="q", single_active_consumer=sac), opts, NODES, h)
    report = w.drain(Admin(broker))  # type: ignore[arg-type]
    assert report.complete is True
    assert sorted(o.value for o in h.ops if o.f == "drain") == ["0-0", "0-1", "0-2"]
    assert list(consumer_ends(h, "drain").values()) == [want]
    assert ("Basic.Cancel" in broker.requests) is not sac
