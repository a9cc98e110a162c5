"""Anomaly explanations from a literal history and literal broker logs."""

import json
from datetime import UTC, datetime

from harness.explain import explain, pick_lines, read_log_lines

S = 1_000_000_000
START = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC).timestamp()


def op(t, type_, process, f, value=None, **kw):
    return json.dumps({"type": type_, "process": process, "f": f, "value": value,
                       "time": int(t * S), "index": 0, **kw})


HISTORY = [
    op(1, "info", "harness", "placement", {"leader": "n1", "members": ["n1", "n2", "n3"]}),
    op(2, "invoke", 4, "publish", "0-1", node="n2", publisher=0, seq=1),
    op(2.1, "ok", 4, "publish", "0-1", node="n2", publisher=0, seq=1),
    op(3, "invoke", "nemesis", "start-partition", {"fault": "partition-one"}),
    op(3.2, "info", "nemesis", "start-partition",
       {"fault": "partition-one", "nodes": ["n2"], "grudge": {"n2": ["n1", "n3"]}}, node="n2"),
    op(4, "invoke", 5, "publish", "0-2", node="n2", publisher=0, seq=2),
    op(4.1, "ok", 5, "publish", "0-2", node="n2", publisher=0, seq=2),
    op(5, "info", "harness", "placement", {"leader": "n2", "members": ["n1", "n2", "n3"]}),
    op(6, "ok", 7, "consume", "0-1", node="n1", consumer="consume-7", redelivered=False,
       phase="main"),
    op(6.5, "ok", 8, "consume", "0-1", node="n3", consumer="consume-8", redelivered=True,
       phase="main"),
    op(6.6, "ok", 8, "ack", "0-1", node="n3", consumer="consume-8", phase="main"),
    op(9, "invoke", "nemesis", "stop-partition", {"fault": "partition-one"}),
    op(9.1, "info", "nemesis", "stop-partition", {"fault": "partition-one", "nodes": ["n2"]}),
    op(30, "info", "harness", "recover-node", {"node": "n2", "action": "restart-app"}),
]
LOG = """2026-11-23 12:00:03.900000+00:00 [info] <0.1.0> rabbit on node 'rabbit@10.0.0.2' down
2026-11-23 12:00:03.950000+00:00 [info] <0.1.0> Node rabbit@10.0.0.2 is down, deleting its listeners
2026-11-23 12:00:04.500000+00:00 [info] <0.2.0> Mirrored queue 'q' in vhost '/': Promoting mirror <x> to leader
2026-11-23 12:00:20.000000+00:00 [info] <0.3.0> Something unrelated
2026-11-23 12:00:29.900000+00:00 [warning] <0.4.0> Mirrored queue 'q' in vhost '/': Stopping all nodes on master shutdown since no synchronised mirror (replica) is available
not a log line
"""


def write_run(tmp_path):
    (tmp_path / "history.jsonl").write_text("\n".join(HISTORY) + "\n")
    (tmp_path / "nodes" / "n2").mkdir(parents=True)
    (tmp_path / "nodes" / "n2" / "rabbit.log").write_text(LOG)
    return tmp_path


def test_a_lost_message_is_told_with_its_fault_leader_mend_and_log_lines(tmp_path):
    run = write_run(tmp_path)
    out = explain(run / "history.jsonl", {"lost": ["0-2"], "duplicated": ["0-1"], "none": []},
                  nodes_dir=run / "nodes", start_unix=START)
    assert set(out) == {"lost", "duplicated"}
    lost = out["lost"][0]
    assert lost["id"] == "0-2"
    assert lost["publish"] == {"process": 5, "node": "n2", "invoke_s": 4.0, "type": "ok",
                               "error": None, "complete_s": 4.1}
    assert lost["faults_at_publish"] == ["partition-one on n2"]
    assert lost["faults_at_confirm"] == ["partition-one on n2"]
    assert lost["leader_at_publish"] == "n1"
    assert lost["deliveries"] == []
    assert lost["harness_mends_after_confirm"] == [
        {"t_s": 30.0, "node": "n2", "action": "restart-app", "f": "recover-node"}]
    assert [(x["label"], x["t_s"]) for x in lost["log"]] == [
        ("node down", 3.9), ("promotion", 4.5), ("no synchronised mirror", 29.9)]


def test_deliveries_carry_their_ack_and_flag(tmp_path):
    run = write_run(tmp_path)
    dup = explain(run / "history.jsonl", {"duplicated": ["0-1"]})["duplicated"][0]
    assert [(d["node"], d["redelivered"], d["acked"]) for d in dup["deliveries"]] == [
        ("n1", False, False), ("n3", True, True)]
    assert dup["faults_at_publish"] == [] and dup["log"] == []


def test_log_lines_are_chosen_by_importance_and_deduplicated(tmp_path):
    run = write_run(tmp_path)
    lines = read_log_lines(run / "nodes", START)
    assert [x.label for x in lines] == ["node down", "node down", "promotion",
                                       "no synchronised mirror"]
    assert [x.label for x in pick_lines(lines, limit=2)] == ["promotion", "no synchronised mirror"]


def test_check_attaches_readable_stories_to_the_queue_section(tmp_path):
    from harness.check import _explain_anomalies

    run = write_run(tmp_path)
    results = {"queue": {"lost_count": 1, "lost": ["0-2"], "duplicated_count": 1,
                         "duplicated": ["0-1"], "recovered_count": 0, "recovered": []}}
    _explain_anomalies(run, results, {"history_start_unix": START})
    (story,) = results["queue"]["details"]["lost"]
    assert set(results["queue"]["details"]) == {"lost"}  # only the classes it tells
    assert story["id"] == "0-2" and story["deliveries"] == "never delivered"
    assert story["published"] == "process 5 on n2 at 4 s: ok at 4.1 s"
    assert story["faults then"] == "partition-one on n2" and story["leader then"] == "n1"
    assert story["harness restarts after the confirm"] == "n2 restart-app at 30 s"
    assert "no synchronised mirror" in story["broker log"]
    assert all(isinstance(v, str) and v for v in story.values())


def test_mends_weigh_what_vanished_across_the_harness_restarts(tmp_path):
    from harness.mends import mend_section

    lines = [
        op(1, "info", "harness", "depth", {"nodes": {"n1": {"ready": 900, "unacked": 10},
                                                     "n2": {"error": "timeout"}}}),
        op(2, "ok", 3, "consume", "0-1", consumer="c"),  # before the mend: does not count
        op(2.1, "ok", 3, "ack", "0-1", consumer="c"),
        op(5, "info", "harness", "recover-node", {"node": "n2", "action": "restart-app"}),
        op(6, "ok", 4, "drain", "0-2", consumer="d", phase="drain"),
        op(6.1, "ok", 4, "ack", "0-2", consumer="d", phase="drain"),
        op(6.2, "ok", 4, "drain", "0-3", consumer="d", phase="drain"),  # never acked
    ]
    (tmp_path / "h.jsonl").write_text("\n".join(lines) + "\n")
    m = mend_section(tmp_path / "h.jsonl", lost_count=2000)
    assert m["mends"] == [{"t_s": 5.0, "f": "recover-node", "node": "n2",
                           "action": "restart-app"}]
    assert m["delivered_after_first_mend"] == 1 and m["vanished_across_mends_at_least"] == 909
    assert "at least 909 of the 2000 lost" in m["statement"] and m["valid"] is True
    (tmp_path / "quiet.jsonl").write_text("\n".join(lines[:3]) + "\n")
    quiet = mend_section(tmp_path / "quiet.jsonl", lost_count=0)
    assert quiet["mends"] == [] and "restarted nothing" in quiet["statement"]


def test_mends_say_what_the_nodes_said_when_the_sample_before_had_no_count(tmp_path):
    from harness.mends import mend_section

    lines = [
        op(1, "info", "harness", "depth", {"nodes": {
            "n1": {"absent": True},
            "n2": {"error": "not listed by list_queues, and asked itself: CommandTimeout"}}}),
        op(5, "info", "harness", "recover-queue", {"node": "n1", "action": "restart-app"}),
    ]
    (tmp_path / "h.jsonl").write_text("\n".join(lines) + "\n")
    m = mend_section(tmp_path / "h.jsonl", lost_count=30)
    assert m["vanished_across_mends_at_least"] is None
    assert ("the last depth sample before it (1.0 s) had no count from any node: n1 no such "
            "queue; n2 not listed by list_queues, and asked itself: CommandTimeout, so how much "
            "of the loss is theirs cannot be said") in m["statement"]
    (tmp_path / "none.jsonl").write_text(lines[1] + "\n")
    assert "no depth sample came before it" in mend_section(tmp_path / "none.jsonl", 30)[
        "statement"]
