"""A node that would not boot again after the faults, read from planted histories (issue 32, item
4): the harness's record of it becomes the run section's named outcome and an effect of the fault
that hit it ("the node did not boot: <line>"), counted in the strength."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checkers.efficacy import judge_faults, strength
from checkers.phases import HarnessEvent
from checkers.unrecoverable import did_not_boot, unrecoverable_nodes
from harness import check, store
from history import HARNESS, UNRECOVERABLE, HistoryWriter, Op
from history.faults import fault_windows
from tests.checkers.test_efficacy_power_loss import evidence, power_loss

S = 1_000_000_000
ROOT = Path(__file__).resolve().parents[2]
# The first real power-loss run, whose n1 would not boot (3.10.8, seed 4001).
ARCHIVED = ROOT / "measurements/findings/quorum-power-loss-minority-3.10-seed4001"
ERROR = "error:{case_clause,{ok,[]}}"


def record(node: str = "n1", ip: str = "10.213.0.11", t_s: int = 300,
           error: str | None = ERROR) -> dict[str, Any]:
    """The value and time of a node-unrecoverable op, as harness.unbootable writes it."""
    evidence = ([{"at": f"{node}/startup.out:424", "text": "BOOT FAILED"},
                 {"at": f"{node}/startup.out:428", "text": error}] if error else [])
    return {"time": t_s * S, "node": node, "value": {
        "node": node, "erlang_node": f"rabbit@{ip}", "error": error,
        "where": "rabbit_feature_flags:try_to_read_enabled_feature_flags_list/0, line 1409",
        "evidence": evidence,
        "tried": [{"action": "restart-app", "outcome": "failed: x", "seconds": 1.5}]
        + [{"action": "kill-restart", "outcome": "failed: y", "seconds": 5.0}] * 5,
        "recovery_s": 240.5, "status": "nodedown"}}


def event(r: dict[str, Any]) -> HarnessEvent:
    return HarnessEvent(r["time"], UNRECOVERABLE, r["value"], r["node"])


def test_the_record_names_the_node_its_line_and_what_was_tried() -> None:
    [n1] = unrecoverable_nodes([event(record())])
    assert n1["node"] == "n1" and n1["erlang_node"] == "rabbit@10.213.0.11"
    assert n1["at_s"] == 300.0 and n1["error"] == ERROR
    assert n1["tried"] == ["restart-app"] + ["kill-restart"] * 5
    assert n1["text"] == (f"n1 did not boot: {ERROR} (n1/startup.out:428); the harness tried "
                          "restart-app, kill-restart x5 and gave up, and the drain did without "
                          "it.")
    assert did_not_boot(n1) == {"kind": "node-did-not-boot", "node": "n1", "at_ms": 300000.0,
                                "evidence": "n1/startup.out:428",
                                "text": f"n1 did not boot: {ERROR}"}


def test_a_node_without_a_boot_failure_in_its_logs_is_still_named() -> None:
    [n2] = unrecoverable_nodes([event(record("n2", error=None))])
    assert n2["text"].startswith("n2 did not boot, and its logs name no boot failure;")
    assert did_not_boot(n2)["evidence"] == "history"
    other = HarnessEvent(1, "phase", {"phase": "drain", "state": "start"})
    assert unrecoverable_nodes([other]) == []


def test_the_effect_goes_to_the_fault_that_hit_the_node_and_counts_in_the_strength() -> None:
    ops = power_loss(10, {"n2": (0, 0)}) + power_loss(40, {"n1": (2939, 19)}, index=5)
    windows = fault_windows(ops)
    ev = evidence((11, "n2"), (41, "n1"))
    faults = judge_faults(windows, [{"at_risk": 50}] * 2, [event(record(t_s=300))], ev)
    assert [e["kind"] for e in faults[0]["effects"]] == []
    assert faults[1]["effects"] == [{"kind": "node-did-not-boot", "node": "n1",
                                     "at_ms": 300000.0, "evidence": "n1/startup.out:428",
                                     "text": f"n1 did not boot: {ERROR}"}]
    st = strength(faults, ev)
    assert st["effects"] == {"node-did-not-boot": 1}
    assert st["summary"].endswith(", 1 node did not boot again")


def test_a_node_no_fault_targeted_goes_to_the_last_fault_before_its_record() -> None:
    ops = power_loss(10, {"n2": (1, 1)})
    faults = judge_faults(fault_windows(ops), [{}], [event(record("n3", t_s=100))],
                          evidence((11, "n2")))
    assert [e["kind"] for e in faults[0]["effects"]] == ["node-did-not-boot"]


def archived_test_json() -> dict[str, Any]:
    return json.loads((ARCHIVED / "test.json").read_text())


def test_the_archived_run_with_n1_recorded_is_no_longer_unknown_for_its_run_section() -> None:
    info = archived_test_json()
    before = check.run_section(info)
    assert before["valid"] == "unknown" and before["unrecoverable_nodes"] == []
    after = check.run_section(info, unrecoverable_nodes([event(record())]))
    assert after["valid"] is True and after["problems"] == []
    # n2 and n3 saw each other running: missing n1 alone does not make them unhealthy.
    assert after["unhealthy_nodes"] == []
    assert [u["node"] for u in after["unrecoverable_nodes"]] == ["n1"]
    assert after["recovery_actions"] == 6


def test_another_node_still_unhealthy_keeps_the_run_unknown() -> None:
    info = archived_test_json()
    status = info["recovery"]["last_status"]
    status[2] = {**status[2], "partitions": {"rabbit@10.213.0.13": ["rabbit@10.213.0.12"]}}
    r = check.run_section(info, unrecoverable_nodes([event(record())]))
    assert r["valid"] == "unknown"
    assert [u["node"] for u in r["unhealthy_nodes"]] == ["rabbit@10.213.0.12",
                                                         "rabbit@10.213.0.13"]


def test_the_check_reads_the_record_from_the_history_into_the_run_section(tmp_path) -> None:
    h = HistoryWriter(tmp_path / store.HISTORY)
    r = record()
    h.append(Op(type="info", process=HARNESS, f=UNRECOVERABLE, value=r["value"], node="n1"))
    h.close()
    [n1] = check._unrecoverable(tmp_path, {})
    assert n1["node"] == "n1" and n1["error"] == ERROR
    assert check._unrecoverable(tmp_path / "nowhere", {}) == []


def test_the_summary_and_the_report_say_it() -> None:
    from harness.cli import summary
    from reports.report_run import _outcome_text

    run = check.run_section(archived_test_json(), unrecoverable_nodes([event(record())]))
    said = run["unrecoverable_nodes"][0]["text"]
    lines = summary({"valid": True, "queue": {"valid": True}, "run": run}).splitlines()
    assert lines[-1] == f"run: {said}"
    assert _outcome_text({}, {"run": run}) == f"ran to the end, {said}"


def stored_run(path: Path, lost: bool) -> Path:
    """A run whose power loss of n1 left it unbootable: two confirmed publishes, the loss, the
    record of n1, the drain from n2 proven without n1 (reading 1-0, and 1-1 unless `lost`)."""
    from tests.checkers.histories import Builder

    path.mkdir(parents=True)
    with Builder(path / store.HISTORY) as b:
        b.phase("main", "start")
        b.publish(1, 0)
        b.publish(1, 1)
        b.nemesis("start-power-loss", {"fault": "power-loss", "nodes": ["n1"], "dropped": {
            "n1": {"bytes": 2939, "files": 19, "namespace": 0, "paths": []}}}, node="n1")
        b.nemesis("stop-power-loss", {"fault": "power-loss", "nodes": ["n1"]}, node="n1")
        b.phase("main", "end")
        r = record()
        b.op(type="info", process=HARNESS, f=UNRECOVERABLE, value=r["value"], node="n1")
        b.phase("drain", "start")
        for mid in ("1-0",) if lost else ("1-0", "1-1"):
            b.op(type="ok", process=7, f="drain", value=mid, node="n2", queue="q",
                 publisher=1, seq=int(mid[2:]), consumer="c7", phase="drain")
        b.op(type="info", process=HARNESS, f="phase", value={
            "phase": "drain", "state": "end", "complete": True, "without": ["n1"],
            "reason": "proven empty without n1, which did not boot"})
    info = archived_test_json()
    info.pop("history_start_unix", None)
    info.pop("start_time", None)
    (path / store.TEST).write_text(json.dumps(info))
    return path


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_a_stored_run_with_a_node_that_did_not_boot_is_judged(tmp_path: Path) -> None:
    r = check.check_run(stored_run(tmp_path / "kept", lost=False))
    assert r["run"]["valid"] is True
    assert [u["node"] for u in r["run"]["unrecoverable_nodes"]] == ["n1"]
    [loss] = r["faults"]
    assert loss["effects"][-1]["text"] == f"n1 did not boot: {ERROR}"
    assert r["strength"]["effects"]["node-did-not-boot"] == 1
    assert r["queue"]["valid"] is True and r["queue"]["drain_complete"] is True
    r = check.check_run(stored_run(tmp_path / "lost", lost=True))
    # The drain was proven without n1: the missing message is lost, as on any proven drain.
    assert r["queue"]["lost"] == ["1-1"] and r["valid"] is False
    assert check.exit_code(r) == 1


def test_the_lost_messages_explanation_says_the_drain_did_without_the_node() -> None:
    run = check.run_section(archived_test_json(), unrecoverable_nodes([event(record())]))
    results: dict[str, Any] = {"run": run, "queue": {"lost_count": 1, "explanations": {
        "lost": "1 message."}}}
    check._say_unbooted(results)
    said = results["queue"]["explanations"]["lost"]
    assert said.startswith("1 message. n1 did not boot again after the faults")
    assert said.endswith("no message of the queue can be waiting there alone, so these are "
                         "lost.")
    nothing_lost: dict[str, Any] = {"run": run, "queue": {"lost_count": 0, "explanations": {
        "lost": "x"}}}
    check._say_unbooted(nothing_lost)
    assert nothing_lost["queue"]["explanations"]["lost"] == "x"
