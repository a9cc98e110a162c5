"""Queue kinds: each kind's depth source and drain end, and the registry."""

from __future__ import annotations

from typing import Any

import pytest

from clusters.base import Node
from clusters.rabbitmq_admin import QueueDepth
from workloads.kinds import KINDS, QueueConfigError, kind_of
from workloads.queue_spec import QueueSpec

NODE = Node("n1", "10.0.0.1", None)  # type: ignore[arg-type]


class Broker:
    """Answers the queue primitives from fixed values (None: the record is gone), recording
    which were asked."""

    def __init__(self, classic: QueueDepth | None = None, quorum: QueueDepth | None = None,
                 end: int | None = None) -> None:
        self.classic, self.quorum, self.end = classic, quorum, end
        self.asked: list[str] = []

    def classic_depth(self, node: Node, queue: str) -> QueueDepth:
        self.asked.append("process")
        return self.classic or QueueDepth(False)

    def quorum_depth(self, node: Node, queue: str) -> QueueDepth:
        self.asked.append("leader")
        return self.quorum or QueueDepth(False)

    def queue_exists(self, node: Node, queue: str) -> bool:
        self.asked.append("record")
        return self.end is not None

    def stream_end(self, node: Node, queue: str) -> int:
        self.asked.append("stream_status")
        assert self.end is not None
        return self.end

    def queue_stats(self, node: Node, queue: str, timeout: float = 10.0) -> dict[str, Any] | None:
        raise AssertionError("list_queues leaves out a queue whose process hangs: no proof")


def test_each_kind_asks_its_own_fresh_source():
    classic = Broker(QueueDepth(True, "classic", 5, 1))
    assert kind_of(QueueSpec(type="classic")).depth(classic, NODE, "q") == QueueDepth(
        True, "classic", 5, 1)
    assert classic.asked == ["process"]
    mirrored = kind_of(QueueSpec(type="mirrored")).depth(classic, NODE, "q")
    assert mirrored == QueueDepth(True, "mirrored", 5, 1)  # named by its kind
    quorum = Broker(quorum=QueueDepth(True, "quorum", 700, 20))
    assert kind_of(QueueSpec()).depth(quorum, NODE, "q").ready == 700
    assert quorum.asked == ["leader"]
    stream = Broker(end=4999)
    assert kind_of(QueueSpec(type="stream")).depth(stream, NODE, "q").last_offset == 4999
    assert stream.asked == ["record", "stream_status"]
    for t in KINDS:
        assert kind_of(QueueSpec(type=t)).depth(Broker(), NODE, "q") == QueueDepth(False)


def test_a_queue_is_drained_only_when_every_node_says_empty_or_it_is_gone():
    quorum = kind_of(QueueSpec())
    empty = QueueDepth(True, "quorum", 0, 0)
    assert quorum.drained({"n1": empty, "n2": empty}, {}) == (True, None)
    done, why = quorum.drained({"n1": empty, "n2": QueueDepth(True, "quorum", 3, 1)}, {})
    assert not done and why == "the queue still holds messages (n2: 3 ready, 1 unacked)"
    gone = QueueDepth(False)
    assert quorum.drained({"n1": gone, "n2": gone}, {}) == (
        True, "the queue no longer exists on any node")


def test_a_stream_is_drained_when_a_node_read_to_its_last_offset():
    stream = kind_of(QueueSpec(type="stream"))
    ends = {"n1": QueueDepth(True, "stream", last_offset=99),
            "n2": QueueDepth(True, "stream", last_offset=99)}
    assert stream.drained(ends, {"n1": 98, "n2": None}) == (
        False, "no node's drain reached the stream's last committed offset 99")
    assert stream.drained(ends, {"n1": 98, "n2": 99}) == (
        True, "n2 read the stream to its last offset 99")
    empty = {"n1": QueueDepth(True, "stream", last_offset=-1)}
    assert stream.drained(empty, {"n1": None})[0]


def test_settings_of_another_kind_are_refused():
    with pytest.raises(QueueConfigError, match="ha-promote-on-failure applies to mirrored"):
        QueueSpec(type="quorum", ha_promote_on_failure="always").validate(3)
    with pytest.raises(QueueConfigError, match="unknown queue type 'lifo'"):
        QueueSpec(type="lifo").validate(3)


def test_the_registry_names_every_kind_by_its_own_name():
    assert set(KINDS) == {"quorum", "mirrored", "classic", "stream"}
    assert all(KINDS[n].name == n and KINDS[n].summary for n in KINDS)
    assert [n for n in KINDS if KINDS[n].reads_whole_log] == ["stream"]


def test_each_kind_says_what_of_its_settings_a_report_shows():
    from workloads.kinds import KINDS, QueueKind

    stored = {"type": "mirrored", "quorum_initial_group_size": 3, "delivery_limit": 5,
              "ha_mode": "exactly", "ha_params": 2, "ha_sync_mode": "manual",
              "ha_promote_on_failure": "always"}
    assert KINDS["quorum"].describe(stored) == ["initial group size 3", "delivery limit 5"]
    assert KINDS["stream"].describe({"quorum_initial_group_size": 2}) == ["initial group size 2"]
    assert KINDS["mirrored"].describe(stored) == [
        "delivery limit 5", "ha-mode exactly 2", "ha-sync-mode manual",
        "ha-promote-on-failure always"]
    assert KINDS["mirrored"].describe({"ha_mode": "nodes", "ha_params": ["n1", "n2"],
                                       "ha_sync_mode": "automatic"})[0] == "ha-mode nodes n1, n2"
    assert KINDS["classic"].describe(stored) == ["delivery limit 5"]
    assert QueueKind().describe({}) == []
    assert KINDS["quorum"].describe({"max_length": 100}) == ["max length 100 (drop-head)"]
    assert KINDS["classic"].describe({"max_length": 9, "overflow": "reject-publish"}) == [
        "max length 9 (reject-publish)"]
