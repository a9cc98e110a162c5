"""Message priorities: the distribution's text, its seeded draws, what a publisher sends and
records, what a delivery records, the observation a run's setup writes, and what the spec and
the release line refuse (exit 2)."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from types import SimpleNamespace

import pytest

from clusters.base import Node
from clusters.releases import Release, release
from harness.spec import SpecError, TestSpec
from history import PRIORITIES, Op
from tests.fake_amqp import FakeBroker
from tests.fakes import ListRecorder
from tests.workloads.test_publisher import completions, publisher
from workloads.clients import ClientOptions, Consumer, acquired_count
from workloads.priorities import Choice, PriorityDraw, PriorityError, levels, parse
from workloads.queue_spec import QueueSpec
from workloads.queue_workload import (
    DRAIN_PREFETCH,
    QueueWorkload,
    WorkloadOptions,
    priorities_observation,
)


def test_a_distribution_is_values_with_weights():
    assert parse("0,9") == (Choice(0, 1.0), Choice(9, 1.0))
    assert parse(" none:2, 1 ,255:0.5") == (Choice(None, 2.0), Choice(1, 1.0), Choice(255, 0.5))
    assert levels("none:2,9,1") == [1, 9] and levels("none") == [] and levels(None) == []


@pytest.mark.parametrize(("text", "said"), [
    ("", "expected VALUE"), ("1,,2", "expected VALUE"), ("256", "'256' is not a priority"),
    ("-1", "'-1' is not a priority"), ("high", "'high' is not a priority"),
    ("1:0", "the weight must be a positive number"), ("1:x", "positive number"),
    ("1:inf", "positive number"), ("1,none,1", "1 given more than once"),
])
def test_a_distribution_that_cannot_be_read_is_refused(text, said):
    with pytest.raises(PriorityError, match=said):
        parse(text)


def test_draws_follow_the_weights_and_replay_from_the_seed():
    choices = parse("none:2,1,9")
    draw = PriorityDraw(choices, random.Random("s"))
    draws = [draw() for _ in range(3000)]
    counts = Counter(draws)
    assert set(counts) == {None, 1, 9}
    assert 1300 < counts[None] < 1700 and 600 < counts[1] < 900
    again = PriorityDraw(choices, random.Random("s"))
    assert [again() for _ in range(3000)] == draws
    assert PriorityDraw(parse("7"), random.Random(0))() == 7


def test_a_publisher_sends_the_drawn_priority_and_records_it_on_invoke_and_completion():
    pub, script, rec = publisher(window=3)
    drawn = iter([9, None, 0])
    pub._priority = lambda: next(drawn)
    for _ in range(3):
        pub.send()
    script.frames = [("ack", (3, True))]
    pub.settle()
    assert [p.priority for p in script.published] == [9, None, 0]
    assert [(o.type, o.value, o.priority) for o in rec.ops] == [
        ("invoke", "7-0", 9), ("invoke", "7-1", None), ("invoke", "7-2", 0),
        ("ok", "7-0", 9), ("ok", "7-1", None), ("ok", "7-2", 0)]
    assert completions(rec) == [("7-0", "ok", None), ("7-1", "ok", None), ("7-2", "ok", None)]


def test_a_priority_is_written_only_when_set():
    with_it = Op(type="ok", process=1, f="consume", value="1-0", priority=3, acquired_count=2)
    without = Op(type="ok", process=1, f="consume", value="1-0")
    assert b'"priority":3' in with_it.to_line() and b'"acquired_count":2' in with_it.to_line()
    assert b"priority" not in without.to_line() and b"acquired" not in without.to_line()


def test_a_delivery_records_its_priority_and_acquired_count():
    rec = ListRecorder()
    con = Consumer(rec, "q", "n1", "127.0.0.1", 4, ClientOptions())
    method = SimpleNamespace(redelivered=True, delivery_tag=1)
    con._on_message(None, method, SimpleNamespace(
        priority=5, headers={"x-delivery-count": 1, "x-acquired-count": 3}), b"1-0")
    con._on_message(None, SimpleNamespace(redelivered=False, delivery_tag=2),
                    SimpleNamespace(priority=None, headers=None), b"1-1")
    assert [(o.value, o.priority, o.delivery_count, o.acquired_count) for o in rec.ops] == [
        ("1-0", 5, 1, 3), ("1-1", None, None, None)]
    assert acquired_count({"x-acquired-count": True}) is None and acquired_count(None) is None


def test_the_setup_records_what_the_priority_check_needs_before_the_backlog():
    broker = FakeBroker(version="4.0.5")
    try:
        h = ListRecorder()
        nodes = [Node("n1", "127.0.0.1", None)]  # type: ignore[arg-type]
        opts = WorkloadOptions(priorities="none,1,9", backlog=20, client=ClientOptions(
            port=broker.port, heartbeat_s=0, prefetch=1))
        QueueWorkload(QueueSpec(name="q"), opts, nodes, h, seed=3).setup(admin=None)  # type: ignore[arg-type]
    finally:
        broker.close()
    # 4.0's default delivery limit makes the queue dead-letter: that observation comes first.
    assert [o.f for o in h.ops[:2]] == ["dead-lettering", PRIORITIES]
    assert h.ops[1].process == "harness" and h.ops[1].value == {
        "queue": "q", "type": "quorum", "version": "4.0.5", "line": "4.0", "levels": 2,
        "strict": False, "prefetch": {"consume": 1, "drain": DRAIN_PREFETCH},
        "single_active_consumer": False, "distribution": "none,1,9"}
    drawn = {o.priority for o in h.ops if o.f == "publish"}
    assert drawn == {None, 1, 9}


def test_no_observation_without_priorities_and_an_unknown_line_is_no_line():
    assert priorities_observation(QueueSpec(), WorkloadOptions(priorities="1"), None)["line"] \
        is None
    h = ListRecorder()
    broker = FakeBroker(version="4.0.5")
    try:
        nodes = [Node("n1", "127.0.0.1", None)]  # type: ignore[arg-type]
        opts = WorkloadOptions(priorities="none", client=ClientOptions(port=broker.port,
                                                                       heartbeat_s=0))
        QueueWorkload(QueueSpec(name="q"), opts, nodes, h).setup(admin=None)  # type: ignore[arg-type]
    finally:
        broker.close()
    assert [o.f for o in h.ops] == ["dead-lettering"]


def spec(line: str, priorities: str | None, kind: str = "quorum") -> TestSpec:
    s = TestSpec(workload=WorkloadOptions(priorities=priorities))
    return dataclasses.replace(s, broker=dataclasses.replace(s.broker, rabbitmq=line),
                               queue=dataclasses.replace(s.queue, type=kind))


def test_a_line_without_priorities_or_a_kind_without_them_is_refused_before_a_cluster():
    with pytest.raises(SpecError, match="RabbitMQ 3.10's quorum queues have no message "
                                        "priorities"):
        spec("3.10", "0,9").validate()
    assert spec("3.10", "0,9").refusal() is not None  # a matrix lists it as not applicable
    with pytest.raises(SpecError, match="--priorities applies to quorum queues, not classic"):
        spec("4.0", "0,9", "classic").validate()
    top = dataclasses.replace(spec("4.0", "0,9", "classic"),
                              queue=QueueSpec(type="classic", max_priority=10))
    with pytest.raises(SpecError, match="--max-priority only declares x-max-priority"):
        top.validate()  # declaring the argument does not make the check model the queue
    with pytest.raises(SpecError, match="'300' is not a priority"):
        spec("4.0", "0,300").validate()
    spec("3.10", "none").validate()  # no priority at all: nothing to refuse
    spec("4.0", "0,200").validate()  # two levels: any priority is normal or high


def test_a_strict_line_refuses_a_priority_beyond_its_levels():
    strict = Release("4.3", rootfs="4.3", priority_levels=32, strict_priority=True)
    assert strict.refuses_priorities([0, 31]) is None
    assert strict.refuses_priorities([4, 32, 40]) == (
        "RabbitMQ 4.3's quorum queues have 32 priority levels, 0-31: priority 32, 40 is not one")
    assert release("4.0").refuses_priorities([0, 255]) is None
    assert release("3.10").refuses_priorities([]) is None


def test_the_spec_warns_when_the_priority_check_will_not_judge():
    said = spec("4.0", "0,9").warnings()
    assert any("served at a ratio, not strictly: the priority check judges the two-level rule"
               in w for w in said)
    assert any("prefetch 10" in w for w in said)
    assert spec("4.0", None).warnings() == []
