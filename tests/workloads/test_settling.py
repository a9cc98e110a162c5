"""A main-phase consumer rejects, nacks (both with requeue) or holds the shares of its deliveries
its options say, each settlement recorded as an op like an ack (f "reject", "nack", "ack"),
and sends x-consumer-timeout when asked; the drain only acks. Against an AMQP server on
loopback (tests.fake_amqp). The options' bad input is tested too."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tests.fake_amqp import FakeBroker, poll_until
from tests.fakes import ListRecorder
from workloads import clients
from workloads.clients import ClientOptions, Consumer
from workloads.queue_spec import QueueSpec
from workloads.queue_workload import QueueWorkload, WorkloadConfigError, WorkloadOptions

pytestmark = pytest.mark.timeout(30)
FIELDS = ("value", "publisher", "seq", "consumer", "process", "node", "queue", "phase")


def consume(broker: FakeBroker, h: ListRecorder, n: int, phase: str = "main",
            f: str = "consume", **opts: object) -> Consumer:
    """Puts n messages in "q", then consumes them as process 7 until each is settled."""
    for seq in range(n):
        broker.put("q", f"0-{seq}")
    o = ClientOptions(port=broker.port, heartbeat_s=0, answer_timeout_s=1.0,
                      **opts)  # type: ignore[arg-type]
    con = Consumer(h, "q", "n1", "127.0.0.1", 7, o, f=f, phase=phase)
    con.open()
    poll_until(con, lambda: con.acked + con.returned >= n, 10)
    return con


def settled(h: ListRecorder) -> dict[str, list[str]]:
    """Returns the ids of each settlement op of the history, by f."""
    out: dict[str, list[str]] = {"ack": [], "reject": [], "nack": []}
    for o in h.ops:
        if o.f in out:
            out[o.f].append(str(o.value))
    return out


def test_shares_of_deliveries_are_rejected_and_nacked_with_requeue_each_recorded(broker):
    h = ListRecorder()
    con = consume(broker, h, 40, reject_share=0.3, nack_share=0.3)
    con.close()
    s = settled(h)
    assert s["reject"] and s["nack"] and s["ack"]
    assert len(s["reject"]) + len(s["nack"]) + len(s["ack"]) == 40
    assert sorted(broker.returns) == sorted(
        [("Basic.Reject", v.encode()) for v in s["reject"]]
        + [("Basic.Nack", v.encode()) for v in s["nack"]])
    assert broker.depth("q")[0] == len(s["reject"]) + len(s["nack"])  # requeued
    deliveries = {o.value: o for o in h.ops if o.f == "consume"}
    for o in h.ops:
        if o.f in ("reject", "nack"):
            d = deliveries[o.value]
            assert o.type == "ok"
            assert [getattr(o, k) for k in FIELDS] == [getattr(d, k) for k in FIELDS]
            assert h.ops.index(o) > h.ops.index(d)


def test_a_return_is_recorded_before_it_is_written_an_ack_after(broker, monkeypatch):
    # The delayed-retry check measures a return's delay from its op's time, which must not be
    # later than the broker took the return in; an ack counts only once it was written.
    h = ListRecorder()
    seen: list[tuple[str, int, int]] = []  # (kind, its ordinal, ops of that kind at the write)

    def spy(kind: str, real):  # type: ignore[no-untyped-def]
        def write(ch, tag):  # type: ignore[no-untyped-def]
            seen.append((kind, sum(1 for k, _, _ in seen if k == kind),
                         sum(1 for o in h.ops if o.f == kind)))
            real(ch, tag)
        return write

    monkeypatch.setattr(clients, "_SETTLE", {k: spy(k, v) for k, v in clients._SETTLE.items()})
    con = consume(broker, h, 40, reject_share=0.3, nack_share=0.3)
    con.close()
    kinds = {k for k, _, _ in seen}
    assert kinds == {"ack", "reject", "nack"}
    for kind, ordinal, recorded in seen:
        assert recorded == (ordinal if kind == "ack" else ordinal + 1), (kind, ordinal)


def test_the_draw_is_the_processs_own_so_a_run_repeats_it(broker):
    first, second = ListRecorder(), ListRecorder()
    consume(broker, first, 20, reject_share=0.5).close()
    other = FakeBroker()
    try:
        consume(other, second, 20, reject_share=0.5).close()
    finally:
        other.close()
    assert settled(first) == settled(second)


def test_a_held_delivery_is_acked_after_its_hold(broker):
    h = ListRecorder()
    start = time.monotonic()
    con = consume(broker, h, 4, hold_share=1.0, hold_s=0.5)
    assert time.monotonic() - start >= 0.5
    assert sorted(settled(h)["ack"]) == [f"0-{k}" for k in range(4)]
    con.close()


def test_a_hold_in_progress_is_what_the_consumer_holds_at_its_cancel(broker):
    h = ListRecorder()
    for seq in range(3):
        broker.put("q", f"0-{seq}")
    o = ClientOptions(port=broker.port, heartbeat_s=0, answer_timeout_s=1.0, hold_share=1.0,
                      hold_s=100.0)
    con = Consumer(h, "q", "n1", "127.0.0.1", 7, o)
    con.open()
    poll_until(con, lambda: con.delivered >= 3)
    con.close()
    cancel = next(o for o in h.ops if o.f == "cancel" and o.type == "invoke")
    assert sorted(cancel.extra["holding"]) == ["0-0", "0-1", "0-2"]
    assert not settled(h)["ack"]


def test_the_consumer_timeout_is_a_main_phase_consume_argument(broker):
    h = ListRecorder()
    consume(broker, h, 1, consumer_timeout_ms=5000).close()
    consume(broker, h, 1, f="drain", phase="drain", consumer_timeout_ms=5000).close()
    assert broker.consume_args == {"consume-7": {"x-consumer-timeout": 5000}, "drain-7": {}}


def test_the_drain_only_acks(broker):
    h = ListRecorder()
    consume(broker, h, 10, f="drain", phase="drain", reject_share=0.5, nack_share=0.5).close()
    assert len(settled(h)["ack"]) == 10 and not broker.returns


@pytest.mark.parametrize("client, msg", [
    ({"reject_share": 1.5}, "--reject-share must be 0..1"),
    ({"nack_share": -0.1}, "--nack-share must be 0..1"),
    ({"reject_share": 0.6, "nack_share": 0.6}, "must add up to at most 1"),
    ({"hold_share": 0.5}, "--hold-share and --hold-s go together"),
    ({"hold_s": 2.0}, "--hold-share and --hold-s go together"),
    ({"consumer_timeout_ms": 999}, "--consumer-timeout-ms must be >= 1000 ms, got 999"),
])
def test_bad_settling_options_are_refused_naming_the_option(client, msg):
    opts = WorkloadOptions(client=dataclasses.replace(ClientOptions(), **client))
    with pytest.raises(WorkloadConfigError, match=msg):
        opts.validate()


def test_settling_without_consumers_is_refused():
    opts = WorkloadOptions(consumers=0, consume_rate=None,
                           client=ClientOptions(reject_share=0.1))
    with pytest.raises(WorkloadConfigError, match="need consumers"):
        opts.validate()


def test_with_the_queues_own_consumer_timeout_the_consumers_send_none():
    # On 4.0 the harness declares the queue with the timeout (harness.spec.TestSpec
    # .consumer_timeout_as_run): its consumers' argument would be ignored, so none is sent.
    opts = WorkloadOptions(client=ClientOptions(consumer_timeout_ms=5000))
    on_queue = QueueWorkload(QueueSpec(consumer_timeout_ms=5000), opts, [], ListRecorder())
    assert on_queue.consumer_opts.consumer_timeout_ms is None
    assert on_queue.opts.client.consumer_timeout_ms == 5000  # the run's setting, as observed
    on_consumer = QueueWorkload(QueueSpec(), opts, [], ListRecorder())
    assert on_consumer.consumer_opts.consumer_timeout_ms == 5000
