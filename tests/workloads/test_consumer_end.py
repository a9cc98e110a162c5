"""How a consumer ends is recorded: the harness's basic.cancel, then its channel's close, each an
invocation and its outcome, in the order they happened; a planted crash ends alike; a cancel
the broker sent, or a connection the client saw lost, is one op of its own. Against an AMQP
server on loopback (tests.fake_amqp)."""

from __future__ import annotations

import contextlib
import threading
import time

import pika.spec
import pytest

from clusters.base import Node
from history import Op
from tests.fake_amqp import FakeBroker, poll_until
from tests.fakes import ListRecorder
from workloads.clients import ClientError, ClientOptions, Consumer
from workloads.queue_spec import QueueSpec
from workloads.queue_workload import QueueWorkload, WorkloadOptions

# A cancel or a close the broker never answers must end at the answer timeout, never hang.
pytestmark = pytest.mark.timeout(30)


def consumer(broker: FakeBroker, h: ListRecorder, **opts: object) -> Consumer:
    """A consumer of "q" as process 7 that acks its first two deliveries at once and the next
    only after 100 s: it holds every delivery but the first two."""
    o = ClientOptions(port=broker.port, heartbeat_s=0, answer_timeout_s=1.0,
                      **opts)  # type: ignore[arg-type]
    return Consumer(h, "q", "n1", "127.0.0.1", 7, o, ack_interval_s=100.0)


def ends(h: ListRecorder) -> list[tuple[str, str, str | None]]:
    """Returns the history's ops of a consumer's end, as (f, type, by)."""
    return [(o.f, o.type, o.extra.get("by")) for o in h.ops if o.f in ("cancel", "close")]


def test_close_cancels_then_closes_the_channel_each_recorded_in_order(broker):
    for seq in range(3):
        broker.put("q", f"0-{seq}")
    h = ListRecorder()
    con = consumer(broker, h)
    con.open()
    poll_until(con, lambda: con.acked == 2 and con.delivered == 3)
    con.close()
    fs = [(o.f, o.type, o.value) for o in h.ops]
    assert fs == [("consume", "ok", "0-0"), ("consume", "ok", "0-1"), ("consume", "ok", "0-2"),
                  ("ack", "ok", "0-0"), ("ack", "ok", "0-1"),
                  ("cancel", "invoke", None), ("cancel", "ok", None),
                  ("close", "invoke", None), ("close", "ok", None)]
    for o in h.ops[5:]:
        assert (o.process, o.consumer, o.node, o.queue, o.phase) == (7, "consume-7", "n1", "q",
                                                                     "main")
        assert o.extra["by"] == "harness" if o.type == "invoke" else "by" not in o.extra
    # What the consumer held when it was cancelled, and when its channel was closed.
    assert [o.extra.get("holding") for o in h.ops[5:]] == [["0-2"], None, ["0-2"], None]
    # The broker saw the cancel before the close, and has the held message back.
    reqs = broker.requests
    assert reqs.index("Basic.Cancel") < reqs.index("Channel.Close")
    assert broker.wait_for_depth("q", (1, 0)) == (1, 0)


def test_a_delivery_between_the_cancel_and_its_cancel_ok_is_recorded_with_pikas_reject(broker):
    # pika's basic_cancel of a manual-ack consumer rejects (requeue) every delivery that arrives
    # before the cancel-ok without handing it to the consumer. Unrecorded, the broker's later
    # delivery of the message is flagged with no first one in the history (quorum-sac-fifo on
    # 4.3, seed 4001: 0-745 to the next consumer, 0-744 flagged 9 s later in the drain).
    broker.put("q", "0-0")
    h = ListRecorder()
    con = consumer(broker, h)
    con.open()
    poll_until(con, lambda: con.acked == 1)
    broker.late_on_cancel = ("q", "0-1")
    con.close()
    fs = [(o.f, o.type, o.value) for o in h.ops]
    assert fs == [("consume", "ok", "0-0"), ("ack", "ok", "0-0"),
                  ("cancel", "invoke", None), ("consume", "ok", "0-1"), ("reject", "ok", "0-1"),
                  ("cancel", "ok", None), ("close", "invoke", None), ("close", "ok", None)]
    assert h.ops[4].extra["by"] == "pika" and h.ops[4].consumer == h.ops[3].consumer
    assert h.ops[3].redelivered is False
    reqs = broker.requests
    assert reqs.index("Basic.Cancel") < reqs.index("Basic.Reject") < reqs.index("Channel.Close")
    # The message is back in the queue, and nothing of the consumer is left patched.
    assert broker.depth("q")[0] == 1
    assert "_on_deliver" not in vars(con.channel._impl) if con.channel else True


def test_deliveries_read_but_not_dispatched_when_a_crash_cancels_are_recorded_rejected(broker):
    # A planted crash cancels from inside a delivery's callback: what pika had read behind that
    # delivery is rejected by its cancel, undispatched; each is recorded, then its reject.
    for i in range(4):
        broker.put("q", f"0-{i}")
    h = ListRecorder()
    con = consumer(broker, h, crash_after=1, prefetch=10)
    con.open()
    with pytest.raises(ClientError):
        poll_until(con, lambda: False)
    delivered = [o.value for o in h.ops if o.f == "consume"]
    rejected = [o.value for o in h.ops if o.f == "reject"]
    assert delivered[0] == "0-0" and rejected == delivered[1:] and rejected
    assert all(o.extra["by"] == "pika" for o in h.ops if o.f == "reject")
    # Every message is received once in the history; the ones not rejected came back with the
    # channel's close (the crash holds them).
    assert sorted(delivered) == [f"0-{i}" for i in range(len(delivered))]
    con.close()


def test_a_planted_crash_ends_the_consumer_the_same_way_and_once(broker):
    broker.put("q", "0-1")
    h = ListRecorder()
    con = consumer(broker, h, crash_after=1)
    con.open()
    with pytest.raises(ClientError, match="its channel closed"):
        poll_until(con, lambda: False)
    assert con.crashed
    con.close()
    assert [(o.f, o.type) for o in h.ops] == [
        ("consume", "ok"), ("cancel", "invoke"), ("cancel", "ok"), ("close", "invoke"),
        ("close", "ok")]
    assert h.ops[1].extra["holding"] == ["0-1"]


def test_a_cancel_the_broker_sends_is_recorded_then_the_harness_closes_the_channel(broker):
    broker.put("q", "0-1")
    h = ListRecorder()
    con = consumer(broker, h)
    con.open()
    poll_until(con, lambda: con.acked == 1)
    broker.cancel_consumers()
    with pytest.raises(ClientError, match="cancelled by the broker"):
        poll_until(con, lambda: False)
    con.close()
    assert ends(h) == [("cancel", "ok", "broker"), ("close", "invoke", "harness"),
                       ("close", "ok", None)]
    assert "Basic.Cancel" not in broker.requests  # nothing left to cancel
    assert h.ops[-3].extra["holding"] == []


def test_a_lost_connection_is_one_close_op_with_its_error(broker):
    broker.put("q", "0-1")
    h = ListRecorder()
    con = consumer(broker, h)
    con.open()
    poll_until(con, lambda: con.delivered == 1)
    broker.cut()
    with pytest.raises(ClientError):
        poll_until(con, lambda: False)
    con.close()
    assert ends(h) == [("close", "info", "broker")]
    lost = h.ops[-1]
    assert lost.error and lost.consumer == "consume-7" and lost.value is None


def test_a_cancel_never_answered_ends_info_and_the_cut_channel_is_recorded():
    broker = FakeBroker(silent_on=pika.spec.Basic.Cancel)
    try:
        broker.put("q", "0-1")
        h = ListRecorder()
        con = consumer(broker, h)
        con.open()
        poll_until(con, lambda: con.delivered == 1)
        t0 = time.monotonic()
        con.close()
        assert time.monotonic() - t0 < 5
        assert ends(h) == [("cancel", "invoke", "harness"), ("cancel", "info", None),
                           ("close", "info", "broker")]
        assert "no answer to basic.cancel or channel.close within 1s" in (h.ops[-2].error or "")
    finally:
        broker.close()


def test_the_workers_end_of_the_main_phase_is_recorded_per_consumer(broker):
    for seq in range(50):
        broker.put("q", f"0-{seq}")
    h = ListRecorder()
    nodes = [Node("n1", "127.0.0.1", None)]  # type: ignore[arg-type]
    opts = WorkloadOptions(publishers=1, consumers=2, rate=20.0, consume_rate=10.0,
                           client=ClientOptions(port=broker.port, heartbeat_s=0, prefetch=1))
    w = QueueWorkload(QueueSpec(name="q"), opts, nodes, h)
    stop = threading.Event()
    w.start(stop)
    deadline = time.monotonic() + 5
    while sum(o.f == "ack" for o in h.ops) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    w.join(10)
    # The fake hands every message to the first consumer; the other one ends holding nothing.
    consumers = sorted({o.process for o in h.ops if (o.consumer or "").startswith("consume-")})
    assert len(consumers) == 2
    for p in consumers:
        mine: list[Op] = [o for o in h.ops if o.process == p and o.f in ("cancel", "close")]
        assert [(o.f, o.type) for o in mine] == [("cancel", "invoke"), ("cancel", "ok"),
                                                ("close", "invoke"), ("close", "ok")]
        assert {o.phase for o in mine} == {"main"}
        # Nothing of the consumer's comes after its channel's close.
        last = max(i for i, o in enumerate(h.ops) if o.process == p)
        assert h.ops[last] is mine[-1]


def test_a_second_cancel_from_the_broker_is_recorded_and_kept_from_pika(broker):
    # RabbitMQ 4.3 sends basic.cancel for each release of a timed-out consumer's messages; pika's
    # BlockingChannel raised KeyError on the second (quorum-consumer-timeout-healthy, 4.3.6,
    # seed 4001, consumers 29-31: a workload thread ended, two connections torn down).
    broker.put("q", "0-1")
    h = ListRecorder()
    con = consumer(broker, h)
    con.open()
    # Generous limits: each wait ends as soon as its event comes. The test failed once on a
    # loaded machine (the unit tests beside a cluster and Spark), its message not kept; 40 runs
    # since passed, so a wait cut short by the default 5 s is the likely cause, not proven.
    poll_until(con, lambda: con.acked == 1, 30.0)
    broker.cancel_consumers()
    broker.cancel_consumers()
    with pytest.raises(ClientError, match="cancelled by the broker"):
        poll_until(con, lambda: False, 30.0)
    # The second cancel may come after the first was dispatched: poll until it is recorded (a
    # loaded machine can take a while), then look at what was recorded.
    deadline = time.monotonic() + 10.0
    while sum(o.f == "cancel" for o in h.ops) < 2 and time.monotonic() < deadline:
        with contextlib.suppress(ClientError):
            con.poll(0.1)
    cancels = [(o.type, o.extra.get("by"), o.error) for o in h.ops if o.f == "cancel"]
    assert cancels == [("ok", "broker", None),
                       ("info", "broker", "the broker sent basic.cancel again for this consumer")]
    con.close()
