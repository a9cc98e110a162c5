"""The checker's fates, its attribution of anomalies to fault windows, and the traces it gathers
for the explanations: pure parts on literal data, the Spark jobs on literal histories."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkers.fates import bucket_width, by_fault_section, fates_section, merge_by_fault
from checkers.traces import traces_from_file, traces_of
from history import Op
from tests.checkers.histories import Builder
from tests.checkers.test_literal import check

MS = 1_000_000


def test_bucket_widths_are_round_and_at_most_300() -> None:
    assert bucket_width(0, 60_000 * MS) == 200 * MS
    assert bucket_width(0, 10 * MS) == 100 * MS  # never below 100 ms
    assert bucket_width(0, 3_600_000 * MS) == 20_000 * MS
    assert bucket_width(0, 90_000 * MS) == 500 * MS
    assert bucket_width(0, 300_001 * MS) == 2000 * MS


def test_fates_section_orders_fates_and_buckets() -> None:
    got = fates_section([(3, "lost", 1), (1, "delivered", 5), (0, "delivered", 2),
                         (3, "lost", 2)], 200 * MS, drained=True)
    assert got == {"by": "publish time", "bucket_ms": 200.0, "drained": True,
                   "totals": {"delivered": 7, "lost": 3},
                   "series": {"delivered": [[0.0, 2], [200.0, 5]],
                              "lost": [[600.0, 1], [600.0, 2]]}}


def test_by_fault_section_lists_windows_in_order_and_the_unattributed_last() -> None:
    got = by_fault_section([(1.0, 2.0), (5.0, 6.0)],
                           {(None, "lost"): 1, (1, "lost"): 2, (1, "unexpected"): 0},
                           {(None, "lost"): ["0-9"], (1, "lost"): ["0-1", "0-2"]})
    assert got == [
        {"window": 1, "start_ms": 5.0, "end_ms": 6.0, "counts": {"lost": 2},
         "examples": {"lost": ["0-1", "0-2"]}},
        {"window": None, "start_ms": None, "end_ms": None, "counts": {"lost": 1},
         "examples": {"lost": ["0-9"]}}]


def test_merged_by_fault_joins_the_queues_and_the_orderings_windows() -> None:
    queue = [{"window": 1, "start_ms": 5.0, "end_ms": 6.0, "counts": {"lost": 2},
              "examples": {"lost": ["0-1"]}},
             {"window": None, "start_ms": None, "end_ms": None, "counts": {"lost": 1},
              "examples": {"lost": ["0-9"]}}]
    ordering = [{"window": 0, "start_ms": 1.0, "end_ms": 2.0, "counts": {"reordered": 1},
                 "examples": {"reordered": ["0-4"]}},
                {"window": 1, "start_ms": 5.0, "end_ms": 6.0, "counts": {"reordered": 3},
                 "examples": {"reordered": ["0-5"]}}]
    assert [(e["window"], e["counts"]) for e in merge_by_fault(queue, ordering)] == [
        (0, {"reordered": 1}), (1, {"lost": 2, "reordered": 3}), (None, {"lost": 1})]


def faulty_history(p: Path, drain_complete: bool = True) -> None:
    """Two partitions; lost messages confirmed before, during and after them; an unflagged
    duplicate; a message first consumed in the drain; a harness restart before the drain."""
    with Builder(p) as b:
        b.phase("main", "start")
        b.at(10).publish(1, 0)                    # lost, confirmed before the first partition
        b.at(20).publish(1, 1)
        b.at(25).consume(5, "1-1")                # delivered in the main phase
        b.at(100).nemesis("start-partition", {"n1": ["n2"]})
        b.at(150).publish(1, 2)                   # lost, during the first partition
        b.at(160).publish(2, 0)
        b.at(170).consume(5, "2-0")
        b.at(180).consume(6, "2-0")               # unflagged duplicate
        b.at(200).nemesis("stop-partition")
        b.at(300).nemesis("start-partition", {"n1": ["n3"]})
        b.at(350).publish(1, 3)                   # lost, during the second
        b.at(400).nemesis("stop-partition")
        b.at(500).publish(1, 4)                   # lost, after every partition
        b.at(510).publish(1, 5, "info")           # unconfirmed, never delivered
        b.at(520).publish(1, 6)
        b.phase("main", "end")
        b.at(600).op(type="info", process="harness", f="depth",
                     value={"nodes": {"n1": {"ready": 7, "unacked": 0}}})
        b.at(610).op(type="info", process="harness", f="recover-node",
                     value={"node": "n1", "action": "restart-app"})
        b.at(700).phase("drain", "start")
        b.at(710).consume(7, "1-6", f="drain")    # first consumed in the drain
        b.at(720).op(type="info", process="harness", f="phase",
                     value={"phase": "drain", "state": "end", "complete": drain_complete})


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_fates_are_the_queue_checks_classes_by_publish_time(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    faulty_history(p)
    r = check(p)
    q, fates = r["queue"], r["fates"]
    assert fates["bucket_ms"] == 100.0 and fates["drained"] is True
    assert fates["totals"] == {"delivered": 1, "delivered_in_drain": 1,
                               "unflagged_duplicated": 1, "unconfirmed": 1, "lost": 4}
    assert fates["totals"]["lost"] == q["lost_count"]
    assert fates["series"]["lost"] == [[0.0, 1], [100.0, 1], [300.0, 1], [500.0, 1]]
    assert fates["series"]["delivered_in_drain"] == [[500.0, 1]]


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_lost_is_unproven_when_the_drain_proved_nothing(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    faulty_history(p, drain_complete=False)
    fates = check(p)["fates"]
    assert fates["drained"] is False and fates["totals"]["unproven"] == 4
    assert "lost" not in fates["totals"]


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_anomalies_go_to_the_first_window_ending_at_or_after_their_confirm_else_the_last(
        tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    faulty_history(p)
    by_fault = check(p)["fates"]["by_fault"]
    assert [(e["window"], e["counts"], e["examples"]) for e in by_fault] == [
        (0, {"lost": 2, "unflagged_duplicated": 1},
         {"lost": ["1-0", "1-2"], "unflagged_duplicated": ["2-0"]}),
        # 1-4 was confirmed after both faults ended: the last fault's aftermath.
        (1, {"lost": 2}, {"lost": ["1-3", "1-4"]})]
    assert (by_fault[0]["start_ms"], by_fault[0]["end_ms"]) == (101.0, 201.0)


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_reorderings_are_attributed_by_their_later_deliverys_message(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.at(10).publish(1, 0)
        b.at(20).publish(1, 1)
        b.at(30).nemesis("kill", {"nodes": ["n2"]})
        b.at(40).nemesis("start", {"nodes": ["n2"]})
        b.at(50).consume(5, "1-1")
        b.at(60).consume(5, "1-0")                # out of order: 1-0 after 1-1
        b.drained()
    r = check(p)
    assert r["ordering"]["violation_count"] == 1 and "by_fault" not in r["ordering"]
    assert r["fates"]["by_fault"] == [{"window": 0, "start_ms": 31.0, "end_ms": 41.0,
                              "counts": {"reordered": 1}, "examples": {"reordered": ["1-0"]}}]


def told(op: Op) -> tuple[object, ...]:
    """The fields of a client op a story tells: all of them, but an ack's node and a publish's
    publisher, seq and phase (the checker keeps only what the stories read)."""
    delivery = op.f in ("consume", "drain")
    return (op.type, op.process, op.f, op.value, op.time, op.index,
            op.node if op.f != "ack" else None, op.consumer,
            op.redelivered if delivery else None, op.phase if delivery else None,
            op.error if op.f == "publish" and op.type != "invoke" else None)


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_the_checks_traces_are_the_plain_readings(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    faulty_history(p)
    r = check(p)
    traces = traces_of(r)
    assert traces is not None
    plain = traces_from_file(p, traces.ops)
    assert set(traces.ops) >= {"1-0", "1-2", "2-0"}
    assert {i: [told(o) for o in ops] for i, ops in traces.ops.items()} == {
        i: [told(o) for o in ops] for i, ops in plain.ops.items()}
    assert (traces.end_ns, traces.acks_recorded, traces.nemesis) == (
        plain.end_ns, plain.acks_recorded, plain.nemesis)
    assert [(o.f, o.value, o.node, o.time) for o in traces.harness] == [
        (o.f, o.value, o.node, o.time) for o in plain.harness]
    # After the restart only the drain's message was acked.
    assert traces.delivered_after_first_mend == plain.delivered_after_first_mend == 1
    # The traces ride along but are never written.
    assert "traces" not in r and dict(r) == r


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_without_acks_after_the_mend_its_deliveries_count(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.publish(1, 1)
        b.deliver(5, "1-0")                       # before the mend: not counted
        b.op(type="info", process="harness", f="recover-queue",
             value={"node": "n1", "action": "restart-app"})
        b.deliver(6, "1-1", f="drain")
        b.deliver(6, "1-1", f="drain", redelivered=True)
        b.drained()
    traces = traces_of(check(p))
    assert traces is not None
    assert traces.delivered_after_first_mend == 1
    assert traces.delivered_after_first_mend == traces_from_file(p, ()).delivered_after_first_mend
