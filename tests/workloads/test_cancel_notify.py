"""Consumers that do not advertise consumer_cancel_notify (ClientOptions.consumer_cancel_notify
False, --consumer-cancel-notify off): their connection's client properties keep pika's other
capabilities and say false for that one; a channel.close the broker sends (as RabbitMQ does to a
timed-out consumer of such a client: 406 PRECONDITION_FAILED) is recorded as one info op f
"close" by the broker, with the reply code and text and what the consumer held, and nothing
more is recorded for that consumer. Against an AMQP server on loopback (tests.fake_amqp)."""

from __future__ import annotations

import pytest

from tests.fake_amqp import FakeBroker, poll_until
from tests.fakes import ListRecorder
from workloads.clients import PIKA_CAPABILITIES, ClientError, ClientOptions, Consumer

pytestmark = pytest.mark.timeout(30)
TEXT = ("PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value "
        "used: 5000 ms")


def consumer(broker: FakeBroker, h: ListRecorder, **opts: object) -> Consumer:
    """A main-phase consumer, process 7, holding every delivery (it never acks in the test)."""
    o = ClientOptions(port=broker.port, heartbeat_s=0, answer_timeout_s=1.0, hold_share=1.0,
                      hold_s=100.0, **opts)  # type: ignore[arg-type]
    return Consumer(h, "q", "n1", "127.0.0.1", 7, o)


@pytest.mark.parametrize("notify, advertised", [(True, True), (False, False)])
def test_the_capability_is_advertised_as_the_option_says_and_the_others_kept(
        broker, notify, advertised):
    con = consumer(broker, ListRecorder(), consumer_cancel_notify=notify)
    con.open()
    con.close()
    (props,) = broker.client_properties
    assert props["capabilities"] == {**PIKA_CAPABILITIES, "consumer_cancel_notify": advertised}
    assert {"product", "platform", "version"} <= set(props)  # pika's own properties kept


def test_a_channel_closed_by_the_broker_is_one_close_op_with_its_reply_and_what_was_held(broker):
    for seq in range(2):
        broker.put("q", f"0-{seq}")
    h = ListRecorder()
    con = consumer(broker, h, consumer_cancel_notify=False)
    con.open()
    poll_until(con, lambda: con.delivered == 2)
    broker.close_consumer_channels(406, TEXT)
    with pytest.raises(ClientError, match="its channel closed"):
        poll_until(con, lambda: False)
    con.close()
    ends = [o for o in h.ops if o.f in ("cancel", "close")]
    assert [(o.type, o.f, o.extra.get("by")) for o in ends] == [("info", "close", "broker")]
    (closed,) = ends
    assert (closed.extra["reply_code"], closed.extra["reply_text"]) == (406, TEXT)
    assert sorted(closed.extra["holding"]) == ["0-0", "0-1"]
    assert closed.consumer == "consume-7" and closed.value is None
    assert (closed.error or "").startswith("the channel closed: ChannelClosedByBroker: (406")
    assert [o.f for o in h.ops] == ["consume", "consume", "close"]  # no ack after the close
    assert broker.depth("q") == (2, 0)  # the broker has them back


def test_the_harness_closing_its_own_channel_is_not_taken_for_the_broker(broker):
    broker.put("q", "0-0")
    h = ListRecorder()
    con = consumer(broker, h, consumer_cancel_notify=False)
    con.open()
    poll_until(con, lambda: con.delivered == 1)
    con.close()
    assert [(o.type, o.f, o.extra.get("by")) for o in h.ops if o.f == "close"] == [
        ("invoke", "close", "harness"), ("ok", "close", None)]
