"""A node that would not boot again after the faults (issue 32, item 4): its boot failure read from
its logs with file and line, recorded as an outcome (f "node-unrecoverable") once recovery gives
up, and the drain then proven from the nodes that serve, so the verdict is judged (the oracle
judges the history the harness recorded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clusters.base import Node
from clusters.rabbitmq import NodeStatus
from harness.boot_logs import boot_failure, evidence_of, failure_since
from harness.recovery import RecoveryReport, recover
from harness.unbootable import down_nodes, observation, record_unbootable
from history import HARNESS, UNRECOVERABLE, HistoryWriter, Op, read_history
from tests.checkers import oracle
from tests.fake_amqp import FakeBroker
from tests.workloads.test_drain_without import Admin
from workloads.clients import ClientOptions
from workloads.queue_spec import QueueSpec
from workloads.queue_workload import QueueWorkload, WorkloadOptions

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
# The first real power-loss run: n1's output over its failed boots (3.10.8, seed 4001).
ARCHIVED = ROOT / "measurements/findings/quorum-power-loss-minority-3.10-seed4001/nodes/n1"
NODES = [Node(n, "127.0.0.1", None) for n in ("n1", "n2", "n3")]  # type: ignore[arg-type]
# The same nodes as the broker knows them: their Erlang names tell them apart.
BROKER_NODES = [Node(n.name, f"10.0.0.{i}", None)  # type: ignore[arg-type]
                for i, n in enumerate(NODES, 1)]
CASE_CLAUSE = "error:{case_clause,{ok,[]}}"
FRAME = "rabbit_feature_flags:try_to_read_enabled_feature_flags_list/0, line 1409"


def test_the_archived_boot_failure_is_read_with_its_file_lines():
    found = boot_failure((ARCHIVED / "startup.out").read_text())
    assert found == [(424, "BOOT FAILED"), (428, CASE_CLAUSE), (430, FRAME)]
    # Its rabbit.log ends before the boots that failed: nothing there.
    assert boot_failure((ARCHIVED / "rabbit.log").read_text()) == []


def test_a_logs_prefix_is_left_out_and_a_terminated_kernel_is_the_last_word():
    log = ("2026-11-27 11:32:28.607720+00:00 [error] <0.233.0> BOOT FAILED\n"
           "2026-11-27 11:32:28.607720+00:00 [error] <0.233.0> ===========\n"
           "2026-11-27 11:32:28.607720+00:00 [error] <0.233.0> exit:{badmatch,eio}\n"
           "2026-11-27 11:32:28.607720+00:00 [error] <0.233.0> \n"
           "2026-11-27 11:32:28.607720+00:00 [error] <0.233.0>     rabbit_x:y/0, line 3\n")
    assert boot_failure(log) == [(1, "BOOT FAILED"), (3, "exit:{badmatch,eio}"),
                                 (5, "rabbit_x:y/0, line 3")]
    out = "starting\nKernel pid terminated (application_controller) ({shutdown})\nbye\n"
    assert boot_failure(out) == [(2, "Kernel pid terminated (application_controller) "
                                     "({shutdown})")]
    assert boot_failure("all is well\n") == []


# 3.10.8's rabbit.log after a power cut of a classic queue's node (classic-power-loss-node, seed
# 4001): the first boot completed; the one after the cut began, the message store's rebuild
# crashed, and the boot hung until the harness killed it (no banner, no last words).
_P = "2026-11-27 18:09:51.788493+00:00 [error] <0.412.0> "
HUNG_BOOT = (
    "2026-11-27 18:03:08.797542+00:00 [info] <0.223.0>  Starting RabbitMQ 3.10.8 on Erlang 25.2.3\n"
    "2026-11-27 18:03:13.789388+00:00 [info] <0.893.0> Server startup complete; 0 plugins started.\n"
    "2026-11-27 18:09:51.630981+00:00 [info] <0.223.0>  Starting RabbitMQ 3.10.8 on Erlang 25.2.3\n"
    "2026-11-27 18:09:51.7+00:00 [warning] <0.516.0> Message store: rebuilding indices from scratch\n"
    f"{_P}** Generic server <0.412.0> terminating\n"
    f"{_P}** Reason for termination ==\n"
    f"{_P}** {{{{badmatch,#{{}}}},\n"
    f"{_P}    [{{rabbit_queue_index,scan_queue_segments,3,\n"
    f"{_P}         [{{file,\"rabbit_queue_index.erl\"}},{{line,856}}]}},\n"
    f"{_P}     {{rabbit_queue_index,queue_index_walker_reader,2,\n")


def test_a_crash_in_a_boot_that_hung_is_its_evidence_with_the_frame_that_raised_it():
    assert boot_failure(HUNG_BOOT) == [
        (7, "{{badmatch,#{}},"), (8, "[{rabbit_queue_index,scan_queue_segments,3,"),
        (9, '[{file,"rabbit_queue_index.erl"},{line,856}]},')]
    ev = evidence_of("n1", {"rabbit.log": HUNG_BOOT, "startup.out": "Starting broker...Killed\n"})
    v = observation(NODES[0], ev, RecoveryReport(healthy=False), None)
    assert v["error"] == "{{badmatch,#{}},"
    assert v["where"] == ('[{rabbit_queue_index,scan_queue_segments,3, '
                          '[{file,"rabbit_queue_index.erl"},{line,856}]},')
    assert [e["at"] for e in ev] == ["n1/rabbit.log:7", "n1/rabbit.log:8", "n1/rabbit.log:9"]
    # The same crash in a boot that then completed is not why the node is down; nor is a
    # crash with no boot begun in the file.
    done = HUNG_BOOT + "2026-11-27 18:09:53.0+00:00 [info] <0.9.0> Server startup complete\n"
    assert boot_failure(done) == []
    assert boot_failure("\n".join(HUNG_BOOT.splitlines()[4:])) == []


def test_the_evidence_names_the_file_and_line_the_runs_copy_will_hold():
    logs = {"rabbit.log": "x\nBOOT FAILED\nerror:foo\n", "startup.out": "BOOT FAILED\n"}
    assert evidence_of("n1", logs) == [
        {"at": "n1/startup.out:1", "text": "BOOT FAILED"},
        {"at": "n1/rabbit.log:2", "text": "BOOT FAILED"},
        {"at": "n1/rabbit.log:3", "text": "error:foo"}]


class NeverBoots:
    """A broker whose n1 never comes back (its kill-restart fails as 3.10's did), with n1's
    archived logs; n2 and n3 run and see each other."""

    nodes = BROKER_NODES

    def __init__(self) -> None:
        self.mended: list[str] = []

    def statuses(self) -> list[NodeStatus]:
        n1, n2, n3 = (n.erlang_name for n in BROKER_NODES)
        return [NodeStatus(n1, False, error="nodedown"),
                NodeStatus(n2, True, frozenset({n2, n3})),
                NodeStatus(n3, True, frozenset({n2, n3}))]

    def resume(self, node: Node) -> None:
        pass

    def restart_app(self, node: Node) -> None:
        self.mended.append(node.name)

    def kill(self, node: Node) -> None:
        pass

    def start(self, node: Node) -> None:
        from clusters.rabbitmq import BrokerError
        raise BrokerError(f"{node.name} did not boot: its broker exited (case_clause)")

    def read_logs(self, node: Node) -> dict[str, str]:
        assert node.name == "n1"
        return {p.name: p.read_text() for p in ARCHIVED.iterdir() if p.suffix in (".log", ".out")}


def test_a_node_that_never_boots_is_recorded_with_its_log_lines_and_what_was_tried(tmp_path):
    h = HistoryWriter(tmp_path / "h.jsonl")
    broker = NeverBoots()
    rep = recover(broker, h, timeout=0.5, grace=0)  # type: ignore[arg-type]
    assert record_unbootable(broker, h, rep) == ["n1"]
    h.close()
    *mends, seen = read_history(tmp_path / "h.jsonl")
    assert {m.f for m in mends} == {"recover-node"}
    assert (seen.type, seen.process, seen.f, seen.node) == ("info", HARNESS, UNRECOVERABLE, "n1")
    v = seen.value
    assert v["node"] == "n1" and v["erlang_node"] == "rabbit@10.0.0.1"
    assert (v["error"], v["where"]) == (CASE_CLAUSE, FRAME)
    assert v["evidence"] == [{"at": "n1/startup.out:424", "text": "BOOT FAILED"},
                             {"at": "n1/startup.out:428", "text": CASE_CLAUSE},
                             {"at": "n1/startup.out:430", "text": FRAME}]
    assert [t["action"] for t in v["tried"]][:2] == ["restart-app", "kill-restart"]
    assert v["tried"][1]["outcome"] == ("failed: n1 did not boot: its broker exited "
                                        "(case_clause)")
    assert v["status"] == "nodedown"


def test_a_healthy_recovery_records_nothing(tmp_path):
    rep = RecoveryReport(healthy=True, last_status=[{"node": "rabbit@10.0.0.1",
                                                     "running": False}])
    assert down_nodes(rep, BROKER_NODES) == []
    h = HistoryWriter(tmp_path / "h.jsonl")
    assert record_unbootable(NeverBoots(), h, rep) == []
    h.close()
    assert read_history(tmp_path / "h.jsonl") == []


def run_without_n1(tmp_path: Path, spec: QueueSpec, placement: dict[str, Any]) -> Path:
    """Plays a run's end as the runner does: three confirmed publishes, recovery giving up on
    n1, its record, then the drain without it (the broker holds 0-0 and 0-1: 0-2 is gone) and
    the drain's end event. Returns the history."""
    path = tmp_path / "history.jsonl"
    h = HistoryWriter(path)
    for seq in range(3):
        for t in ("invoke", "ok"):
            h.append(Op(type=t, process=0, f="publish", value=f"0-{seq}", node="n2", queue="q",
                        publisher=0, seq=seq, phase="main"))
    broker = NeverBoots()
    down = record_unbootable(broker, h, recover(broker, h, timeout=0.3, grace=0))  # type: ignore[arg-type]
    amqp = FakeBroker(version="3.10.25")
    try:
        for mid in ("0-0", "0-1"):
            amqp.put("q", mid)
        opts = WorkloadOptions(client=ClientOptions(port=amqp.port, heartbeat_s=0),
                               drain_idle_s=0.3, drain_timeout_s=3.0)
        h.append(Op(type="info", process=HARNESS, f="phase",
                    value={"phase": "drain", "state": "start"}))
        rep = QueueWorkload(spec, opts, NODES, h).drain(Admin(amqp, placement), down)  # type: ignore[arg-type]
        h.append(Op(type="info", process=HARNESS, f="phase", value={
            "phase": "drain", "state": "end" if rep.complete else "incomplete", **rep.__dict__}))
    finally:
        amqp.close()
        h.close()
    return path


def test_without_a_node_that_never_boots_the_quorum_drain_is_proven_and_the_loss_judged(
        tmp_path):
    path = run_without_n1(tmp_path, QueueSpec(name="q"),
                          {"leader": "n2", "members": ["n1", "n2", "n3"]})
    queue = oracle.judge(path)["queue"]
    assert queue["drain_complete"] is True
    assert queue["valid"] is False and queue["lost"] == ["0-2"]


def test_a_classic_queue_at_home_on_the_dead_node_leaves_the_verdict_unknown(tmp_path):
    path = run_without_n1(tmp_path, QueueSpec(name="q", type="classic"),
                          {"leader": "n1", "members": ["n1"]})
    queue = oracle.judge(path)["queue"]
    assert queue["drain_complete"] is False
    # Nothing is called lost on an unproven drain: the counts stay, the verdict is unknown.
    assert queue["valid"] == "unknown" and queue["lost_count"] == 1
    end = [o for o in read_history(path) if o.f == "phase"][-1]
    assert end.value["reason"].startswith("n1 did not boot again, and its home node n1 did "
                                          "not boot")


class DrainWithout:
    """A workload whose drain records the nodes it was told to do without."""

    def __init__(self) -> None:
        self.down: list[tuple[str, ...]] = []

    def drain(self, admin: object, down: tuple[str, ...] = ()) -> Any:
        from workloads.queue_workload import DrainReport

        self.down.append(tuple(down))
        return DrainReport(delivered={"n2": 5, "n3": 0}, complete=True, without=list(down),
                           reason="proven empty without n1, which did not boot")


def test_the_runner_records_the_node_after_recovery_and_drains_without_it(tmp_path):
    import dataclasses

    from harness.runner import Run, RunOutcome
    from harness.spec import TestSpec

    run = Run.__new__(Run)
    run.spec = dataclasses.replace(TestSpec(), recovery_timeout_s=0.3)
    run.history = HistoryWriter(tmp_path / "history.jsonl")  # type: ignore[assignment]
    run.broker = NeverBoots()  # type: ignore[assignment]
    run.admin = type("Admin", (), {"queue_placement": lambda self, q: {}})()  # type: ignore[assignment]
    run.outcome, run.test_info = RunOutcome(tmp_path), {}
    workload = DrainWithout()
    run.workload = workload  # type: ignore[assignment]
    run.grace = lambda: 0.0  # type: ignore[method-assign]
    run.recover()
    run.drain()
    run.history.close()
    assert run.outcome.unrecoverable == ["n1"] and workload.down == [("n1",)]
    ops = read_history(tmp_path / "history.jsonl")
    phases = [(o.value["phase"], o.value["state"]) for o in ops if o.f == "phase"]
    assert phases == [("recovery", "start"), ("recovery", "end"), ("drain", "start"),
                      ("drain", "end")]
    recovery = ops[:[o.f for o in ops].index("phase", 1)]
    assert recovery[-1].f == UNRECOVERABLE  # recorded inside the recovery phase
    assert ops[-1].value["without"] == ["n1"] and ops[-1].value["complete"] is True


BANNER = ("2026-12-03 15:00:00.000000+00:00 [error] <0.254.0> BOOT FAILED\n"
          "2026-12-03 15:00:00.000000+00:00 [error] <0.254.0> ===========\n"
          "2026-12-03 15:00:00.000000+00:00 [error] <0.254.0> {error} in <0.{pid}.0>\n"
          "2026-12-03 15:00:00.000000+00:00 [error] <0.254.0>   ra_log:init/1, line 190\n")


def failed_boot(error: str, pid: int) -> str:
    return BANNER.format(error=error, pid=pid)


class FailsEachBoot(NeverBoots):
    """NeverBoots whose every boot appends its failure to n1's rabbit.log, as a real broker's
    does: `error` with its "#" the boot's number, or nothing when `silent`; `whole` says
    whether n2 and n3 see each other; after `boots` boots (None: never) the cluster is whole."""

    def __init__(self, error: str, silent: bool = False, whole: bool = True,
                 boots: int | None = None) -> None:
        super().__init__()
        self.error = error
        self.silent = silent
        self.whole = whole
        self.heal_after = boots
        self.log = "2026-12-03 14:59:00.000000+00:00 [info] <0.1.0> Starting RabbitMQ\n" + \
            failed_boot(error.replace("#", "0"), 100)  # the boot after the fault, before recovery
        self.boots = 0

    def statuses(self) -> list[NodeStatus]:
        n1, n2, n3 = (n.erlang_name for n in BROKER_NODES)
        if self.heal_after is not None and self.boots >= self.heal_after:
            return [NodeStatus(n, True, frozenset({n1, n2, n3})) for n in (n1, n2, n3)]
        return [NodeStatus(n1, False, error="nodedown"),
                NodeStatus(n2, True, frozenset({n2, n3} if self.whole else {n2})),
                NodeStatus(n3, True, frozenset({n2, n3}))]

    def start(self, node: Node) -> None:
        self.boots += 1
        if not self.silent:
            self.log += failed_boot(self.error.replace("#", str(self.boots)), 100 + self.boots)
        super().start(node)

    def read_logs(self, node: Node) -> dict[str, str]:
        return {"rabbit.log": self.log}


def recovered(broker: FailsEachBoot, tmp_path: Path, timeout: float) -> tuple[RecoveryReport, float]:
    import time
    h = HistoryWriter(tmp_path / "h.jsonl")
    t0 = time.monotonic()
    rep = recover(broker, h, timeout=timeout, grace=0,  # type: ignore[arg-type]
                  read_logs=broker.read_logs)
    took = time.monotonic() - t0
    record_unbootable(broker, h, rep)
    h.close()
    return rep, took


def test_a_node_whose_boots_fail_alike_is_given_up_on_after_two_kill_restarts(tmp_path):
    # Each boot's failure names a different pid: the same failure all the same.
    broker = FailsEachBoot("error:{badmatch,{error,enoent}}")
    rep, took = recovered(broker, tmp_path, timeout=30)
    assert took < 10 and not rep.healthy
    assert [a["action"] for a in rep.actions] == ["restart-app", "kill-restart", "kill-restart"]
    assert rep.gave_up == {"n1": "its boot failed alike after 2 kill-restarts in a row, every "
                                 "other node whole"}
    *_, seen = read_history(tmp_path / "h.jsonl")
    assert seen.f == UNRECOVERABLE and seen.value["gave_up"] == rep.gave_up["n1"]
    assert seen.value["error"] == "error:{badmatch,{error,enoent}} in <0.102.0>"
    from checkers.unrecoverable import unrecoverable_nodes
    [n1] = unrecoverable_nodes([seen])
    assert n1["text"].endswith("the harness tried restart-app, kill-restart x2 and gave up (its "
                               "boot failed alike after 2 kill-restarts in a row, every other "
                               "node whole), and the drain did without it.")


@pytest.mark.parametrize("broker", [
    # The boots fail, but each otherwise than the last.
    FailsEachBoot("error:{badmatch,#}", boots=4),
    # The boots fail and write nothing: the banner in the log is the boot before recovery's.
    FailsEachBoot("error:a", silent=True, boots=4),
    # The boots fail alike, but another node does not see every node but n1.
    FailsEachBoot("error:a", whole=False, boots=4),
], ids=["each-otherwise", "nothing-written", "another-not-whole"])
def test_a_node_is_mended_on_unless_its_new_failures_are_alike_and_all_else_whole(
        broker, tmp_path):
    # The cluster is whole after the fourth boot: recovery that mended on gets there.
    rep, _took = recovered(broker, tmp_path, timeout=30)
    assert rep.healthy and rep.gave_up == {}
    assert [a["action"] for a in rep.actions] == ["restart-app"] + ["kill-restart"] * 4
    assert [o.f for o in read_history(tmp_path / "h.jsonl")] == ["recover-node"] * 5


def test_without_a_log_reader_recovery_mends_to_its_timeout(tmp_path):
    broker = FailsEachBoot("error:a")
    h = HistoryWriter(tmp_path / "h.jsonl")
    rep = recover(broker, h, timeout=1.0, grace=0)  # type: ignore[arg-type]
    h.close()
    assert rep.gave_up == {} and [a["action"] for a in rep.actions].count("kill-restart") > 2


def test_a_failure_since_is_only_what_the_boot_wrote():
    before = {"rabbit.log": failed_boot("error:old", 7), "startup.out": "BOOT FAILED\nerror:x\n"}
    # Nothing new: the old banner is not a new failure.
    assert failure_since(before, before) == ()
    after = {"rabbit.log": before["rabbit.log"] + failed_boot("error:new", 8),
             "startup.out": "BOOT FAILED\nerror:x\n"}
    assert failure_since(before, after) == (
        "BOOT FAILED", "error:new in <pid>", "ra_log:init/1, line 190")
    # A file the boot wrote anew (startup.out is each boot's own output) is read whole.
    rewritten = {"startup.out": "BOOT FAILED\nerror:y\n"}
    assert failure_since(before, rewritten) == ("BOOT FAILED", "error:y")
    # Two boots that failed alike, in other pids, give the same.
    again = {"rabbit.log": after["rabbit.log"] + failed_boot("error:new", 9)}
    assert failure_since(after, again) == failure_since(before, after)
