"""A disk corruption's efficacy (issue 32) on planted histories: its entry carries what was
damaged on each node (files, bytes, bits, each damage), and a run whose corruptions found no file
of the queue's to damage is weak, however noticed: each was no more than a kill."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkers.efficacy import judge_faults, strength
from history import Op
from history.faults import fault_windows
from tests.checkers.test_efficacy_power_loss import evidence, power_loss

S = 1_000_000_000
SEGMENT = "rabbit@10.0.0.1/quorum/rabbit@10.0.0.1/2F_JEPABCDEFGHIJKL/00000001.segment"


def damage(files: int, size: int) -> dict[str, Any]:
    paths = [{"path": SEGMENT, "role": "segment", "shared": False, "mode": "bitflip",
              "size_before": 4096, "offset": 100, "length": 64, "bytes": size,
              "size_after": 4096, "bits": list(range(800, 800 + size))}] if files else []
    return {"candidates": files, "files": files, "bytes": size, "bits": size, "paths": paths}


def corruption(start_s: int, damaged: dict[str, tuple[int, int]], index: int = 1) -> list[Op]:
    nodes = sorted(damaged)
    value = {"fault": "disk-corrupt", "nodes": nodes, "mode": "bitflip",
             "damaged": {n: damage(*d) for n, d in damaged.items()}}
    stop = {"fault": "disk-corrupt", "nodes": nodes}
    return [Op(type="invoke", process="nemesis", f="start-disk-corrupt", time=start_s * S,
               index=index),
            Op(type="info", process="nemesis", f="start-disk-corrupt", time=start_s * S,
               index=index + 1, value=value, node=nodes[0]),
            Op(type="invoke", process="nemesis", f="stop-disk-corrupt", time=(start_s + 10) * S,
               index=index + 2),
            Op(type="info", process="nemesis", f="stop-disk-corrupt", time=(start_s + 10) * S,
               index=index + 3, value=stop, node=nodes[0])]


def judged(ops: list[Op], at_risk: int = 50) -> list[dict[str, Any]]:
    windows = fault_windows(ops)
    ev = evidence(*((w.start_ns // S + 1, w.target[0]) for w in windows if w.target))
    return judge_faults(windows, [{"at_risk": at_risk}] * len(windows), [], ev)


def test_the_entry_says_what_was_damaged_on_each_node_and_damage_makes_it_strong() -> None:
    [f] = judged(corruption(10, {"n2": (1, 3)}))
    assert f["kind"] == "disk-corrupt" and f["noticed"] is True
    d = f["damaged"]
    assert (d["mode"], d["files"], d["bytes"]) == ("bitflip", 1, 3)
    assert d["nodes"]["n2"]["bits"] == 3 and d["nodes"]["n2"]["paths"][0]["path"] == SEGMENT
    st = strength([f], evidence())
    assert st["weak"] is False and st["damaged_bytes"] == 3 and st["dropped_bytes"] is None


def test_corruptions_that_found_nothing_to_damage_make_a_weak_run() -> None:
    faults = judged(corruption(10, {"n1": (0, 0)}) + corruption(40, {"n3": (0, 0)}, index=5))
    assert [f["noticed"] for f in faults] == [True, True]
    st = strength(faults, evidence())
    assert st["weak"] is True and st["damaged_bytes"] == 0
    assert st["reason"] == ("none of the 2 disk corruptions damaged a file: no file of the "
                            "queue's was found on the nodes hit, so each was no more than a kill")


def test_one_corruption_that_damaged_something_is_enough() -> None:
    ops = corruption(10, {"n1": (0, 0)}) + corruption(40, {"n3": (1, 8)}, index=5)
    assert strength(judged(ops), evidence())["weak"] is False


def test_a_power_loss_that_dropped_nothing_beside_a_damaging_corruption_is_not_weak() -> None:
    ops = power_loss(10, {"n1": (0, 0)}) + corruption(40, {"n3": (1, 8)}, index=5)
    assert strength(judged(ops), evidence())["weak"] is False
    ops = power_loss(10, {"n1": (0, 0)}) + corruption(40, {"n3": (0, 0)}, index=5)
    st = strength(judged(ops), evidence())
    assert st["weak"] is True and "power loss" in st["reason"] and "disk corruption" in st[
        "reason"]


def test_other_faults_have_no_damaged_entry_and_no_figure() -> None:
    [f] = judged(power_loss(10, {"n1": (4096, 1)}))
    assert "damaged" not in f and strength([f], evidence())["damaged_bytes"] is None


def test_what_a_damaged_members_ra_says_is_read_on_every_line() -> None:
    from checkers.broker_log import PATTERNS, parse_line

    lines = {
        "WAL: record failed CRC check during recovery. Unable to recover WAL data safely":
            "wal-checksum-failed",
        "WAL in quorum_queues: record failed CRC check during recovery. Unable to recover WAL "
        "data safely": "wal-checksum-failed",
        "    reason: {ra_log_segment_crc_check_failure,12,{3,4096,210,1234},"
        "\"/data/00000001.segment\"}": "segment-checksum-failed",
        "** Reason for termination ==\n** {ra_log_segment_unexpected_eof,7,{3,0,10,1}}":
            "segment-checksum-failed",
    }
    for text, kind in lines.items():
        for table in PATTERNS.values():
            hit = parse_line(text, table)
            assert hit is not None and (hit[0].kind, hit[0].detector) == (kind, None), text
    # A damaged last record is dropped in silence (Ra's debug line): no effect.
    quiet = ("WAL in quorum_queues: record failed CRC check. If this is the last record "
             "recovery can resume")
    assert all(parse_line(quiet, table) is None for table in PATTERNS.values())


def test_the_damaged_member_refusing_its_wal_is_the_faults_effect(tmp_path: Path) -> None:
    from tests.checkers.test_efficacy_operations import fault, kinds, run, stamp

    value = {"fault": "disk-corrupt", "nodes": ["n2"], "mode": "bitflip",
             "damaged": {"n2": damage(1, 5)}}
    ops = fault("start-disk-corrupt", "stop-disk-corrupt", value, 10, 20)
    n2 = [stamp(21, "error", "WAL: record failed CRC check during recovery. Unable to recover "
                             "WAL data safely", "<0.250.0>")]
    down = [stamp(10.2, "info", "node 'rabbit@10.213.0.12' down: connection_closed")]
    [f], st = run(tmp_path, {"n1": down, "n2": n2}, ops)
    assert f["noticed"] is True and f["damaged"]["bytes"] == 5
    assert ("wal-checksum-failed", "n2") in kinds(f)
    assert st["effects"]["wal-checksum-failed"] == 1 and st["weak"] is False
