"""Tests of the queue sampler: depth every sample, node by node; placement at start and on change."""

import threading

from clusters.base import Node
from clusters.remote import CommandTimeout, RemoteError
from harness.placement import QueueSampler
from history import HistoryWriter, read_history

NODES = [Node(f"n{i}", f"10.0.0.{i}", None) for i in (1, 2, 3)]  # type: ignore[arg-type]


class Source:
    """Answers queue_stats from a script: one answer per node per sample, in node order."""

    def __init__(self, samples):
        self.samples = [dict(s) for s in samples]

    def queue_stats(self, node, queue, timeout=10.0):
        a = self.samples[0].pop(node.name)
        if not self.samples[0]:
            self.samples.pop(0)
        if isinstance(a, Exception):
            raise a
        return a


def row(leader, ready, unacked=0):
    return {"type": "quorum", "leader": leader, "members": ["n1", "n2", "n3"], "mirrors": [],
            "synchronised_mirrors": [], "ready": ready, "unacked": unacked, "messages": ready}


def sample(src, times, tmp_path):
    h = HistoryWriter(tmp_path / "h.jsonl")
    s = QueueSampler(src, NODES, "q", h, 1.0, threading.Event())
    for _ in range(times):
        s.sample()
    s.join()
    h.close()
    return s, read_history(tmp_path / "h.jsonl")


def test_depth_every_sample_placement_only_on_change(tmp_path):
    a, b = "n1", "n2"
    src = Source([
        {"n1": row(a, 10), "n2": row(a, 10), "n3": row(a, 10)},
        {"n1": row(a, 500, 3), "n2": RuntimeError("cli timed out"), "n3": None},
        {"n1": RuntimeError("down"), "n2": row(b, 40), "n3": row(b, 900, 5)},
    ])
    s, ops = sample(src, 3, tmp_path)
    depths = [o for o in ops if o.f == "depth"]
    assert [(d.value["ready"], d.value["unacked"]) for d in depths] == [(10, 0), (500, 3), (900, 5)]
    assert depths[1].value["nodes"] == {
        "n1": {"ready": 500, "unacked": 3},
        "n2": {"error": "RuntimeError: cli timed out"},
        "n3": {"absent": True},
    }
    placements = [o for o in ops if o.f == "placement"]
    assert [(p.value["leader"], p.node) for p in placements] == [("n1", "n1"), ("n2", "n2")]
    assert all(o.process == "harness" and o.type == "info" and o.value["queue"] == "q" for o in ops)
    assert s.samples == 3 and s.changes == 2


def test_no_answer_anywhere_records_unknown_depth_and_no_placement(tmp_path):
    err = RuntimeError("partitioned")
    _, ops = sample(Source([{"n1": err, "n2": err, "n3": err}]), 1, tmp_path)
    assert [o.f for o in ops] == ["depth"]
    assert ops[0].value["ready"] is None and ops[0].value["unacked"] is None


def test_a_failed_cli_call_is_recorded_by_the_brokers_own_words(tmp_path):
    """A node's error keeps the exit code and the broker's error line; the command line and the
    usage text after it would hide them (CI once kept only the usage's tail)."""
    argv = "/usr/lib/rabbitmq/bin/rabbitmqctl -n rabbit@10.0.0.1 list_queues --silent name type"
    usage = "\n\n\x1b[1mUsage\x1b[0m\n\nrabbitmqctl [--node <node>] list_queues " + "x " * 200
    paused = RemoteError(f"{argv} exited 64: Error: this command requires the 'rabbit' app to "
                         f"be running on the target node.{usage}")
    hung = CommandTimeout(f"{argv} timed out after 5s")
    _, ops = sample(Source([{"n1": paused, "n2": hung, "n3": None}]), 1, tmp_path)
    nodes = ops[0].value["nodes"]
    assert nodes["n1"] == {"error": "RemoteError: exited 64: Error: this command requires the "
                                    "'rabbit' app to be running on the target node."}
    assert nodes["n2"] == {"error": "CommandTimeout: timed out after 5s"}


def test_a_node_that_does_not_list_the_queue_is_asked_the_queue_itself(tmp_path):
    """list_queues leaves out a queue whose process hangs: only the queue's own record and
    process (the kind's depth source, the drain's) may say it is absent."""
    from clusters.rabbitmq_admin import QueueDepth

    asked = []

    def depth(node):
        asked.append(node.name)
        if node.name == "n2":
            raise CommandTimeout("rabbitmqctl eval timed out after 20s")
        return QueueDepth(True, "mirrored", 3605, 0) if node.name == "n3" else QueueDepth(False)

    h = HistoryWriter(tmp_path / "h.jsonl")
    s = QueueSampler(Source([{"n1": None, "n2": None, "n3": None}]), NODES, "q", h, 1.0,
                     threading.Event(), depth=depth)
    s.sample()
    s.join()
    h.close()
    (d,) = read_history(tmp_path / "h.jsonl")
    assert sorted(asked) == ["n1", "n2", "n3"]
    assert d.value["nodes"] == {
        "n1": {"absent": True},
        "n2": {"error": "not listed by list_queues, and asked itself: "
                        "CommandTimeout: timed out after 20s"},
        "n3": {"ready": 3605, "unacked": 0, "unlisted": True},
    }
    assert (d.value["ready"], d.value["unacked"]) == (3605, 0)


def test_a_listed_queue_is_not_asked_again(tmp_path):
    def depth(node):
        raise AssertionError("asked although listed")

    h = HistoryWriter(tmp_path / "h.jsonl")
    s = QueueSampler(Source([{"n1": row("n1", 5), "n2": row("n1", 5), "n3": RuntimeError("x")}]),
                     NODES, "q", h, 1.0, threading.Event(), depth=depth)
    s.sample()
    s.join()
    h.close()
    assert read_history(tmp_path / "h.jsonl")[0].value["ready"] == 5


def test_the_leader_most_nodes_name_is_recorded_not_a_cut_node_s_stale_one(tmp_path):
    # n1 is cut off and still names itself; n2 and n3, the majority side, elected n2. Then the
    # heal: all three name n2. A tie (one view each) goes to the first node's.
    src = Source([
        {"n1": row("n1", 10), "n2": row("n1", 10), "n3": row("n1", 10)},
        {"n1": row("n1", 10), "n2": row("n2", 12), "n3": row("n2", 12)},
        {"n1": row("n2", 12), "n2": row("n2", 12), "n3": row("n2", 12)},
        {"n1": RuntimeError("down"), "n2": row("n3", 1), "n3": row("n2", 1)},
    ])
    _s, ops = sample(src, 4, tmp_path)
    assert [o.value["leader"] for o in ops if o.f == "placement"] == ["n1", "n2", "n3"]
