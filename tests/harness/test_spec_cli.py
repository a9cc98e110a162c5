"""Tests of the spec and the CLI: impossible options fail at once with exit 2, specs roundtrip."""

import dataclasses
import json

import pytest

from checkers.options import CheckOptions
from harness.check import compose_valid, exit_code, run_section
from harness.cli import UsageError, build_parser, main, spec_from_args
from harness.scenarios import SCENARIOS, scenario
from harness.spec import SpecError, TestSpec, spec_from_dict
from harness.store import new_run_dir
from workloads.queue_spec import queue_arguments


@pytest.mark.parametrize("argv,msg", [
    (["run", "--nodes", "0"], "node count"),
    (["run", "--nodes", "12"], "node count"),
    (["run", "--time-limit", "-5"], "time limit"),
    (["run", "--nemesis", "partition-sideways"], "partition-sideways"),
    (["run", "--scenario", "nope"], "unknown scenario"),
    (["run", "--queue-type", "lifo"], "invalid choice"),
    (["run", "--queue-type", "stream", "--prefetch", "0"], "prefetch"),
    (["run", "--publishers", "0"], "publishers"),
    (["run", "--quorum-initial-group-size", "5"], "initial group size"),
    (["run", "--queue-type", "mirrored", "--ha-mode", "exactly"], "ha-params"),
    (["run", "--nemesis-duration", "-1"], "duration"),
    (["run", "--nemesis-duration", "0"], "duration_s (--nemesis-duration) must be > 0"),
    (["run", "--nemesis-interval", "0"], "interval_s (--nemesis-interval) must be > 0"),
    (["run", "--nemesis", "pause:duration=-2"], "fault entry 'pause:duration=-2': duration_s must"),
    (["run", "--consumers", "0", "--consume-rate", "30"], "needs consumers"),
    (["run", "--consume-rate", "0"], "consume rate must be > 0"),
    (["run", "--consumers", "0", "--pause-consumers-in-faults"], "needs consumers"),
    (["run", "--window", "0"], "window"),
    (["run", "--backlog", "5000", "--max-length", "1000"],
     "a backlog of 5000 messages cannot stand in a queue of max length 1000"),
    (["run", "--backlog", "5000", "--max-length", "1000", "--overflow", "reject-publish"],
     "(its overflow, reject-publish, would nack the rest)"),
    (["run", "--backlog", "-1"], "backlog (--backlog) must be >= 0"),
    (["run", "--max-length", "0"], "max length must be >= 1"),
    (["run", "--overflow", "drop-head"], "an overflow behaviour needs a max length"),
    (["run", "--overflow", "reject-publish-dlx"], "invalid choice"),
    (["run", "--queue-type", "stream", "--max-length", "10"], "streams have no max length"),
    (["run", "--delivery-limit", "0"], "--delivery-limit must be > 0 deliveries, got 0"),
    (["run", "--queue-type", "classic", "--delivery-limit", "5"],
     "--delivery-limit applies to quorum queues, not classic"),
    (["run", "--queue-type", "mirrored", "--delivery-limit", "5"],
     "--delivery-limit applies to quorum queues, not mirrored"),
    (["run", "--max-priority", "0"], "--max-priority must be an integer 1..255, got 0"),
    (["run", "--max-priority", "256"], "--max-priority must be an integer 1..255, got 256"),
    (["run", "--max-priority", "-3"], "--max-priority must be an integer 1..255, got -3"),
    (["run", "--max-priority", "ten"], "argument --max-priority: invalid int value: 'ten'"),
    (["run", "--rabbitmq", "4.0", "--queue-type", "classic", "--max-priority", "10",
      "--priorities", "1,9"], "--max-priority only declares x-max-priority"),
    (["run", "--queue-type", "stream", "--dead-letter-exchange", "x"],
     "streams do not dead-letter (--dead-letter-exchange)"),
    (["run", "--nemesis", "kill@n7"], "n7"),
    (["run", "--queue-type", "classic", "--nemesis", "member-remove@leader"],
     "fault member-remove@leader acts on a quorum queue; this test's queue is classic"),
    (["run", "--nemesis", "leader-transfer@n1"], "leader-transfer picks its own nodes"),
    (["run", "--nemesis-order", "sorted"], "invalid choice"),
    (["run", "--repeat", "0"], "--repeat must be >= 1"),
    (["matrix", "--scenarios", "healthy", "--repeat", "-2"], "--repeat must be >= 1"),
    (["frobnicate"], "invalid choice"),
    (["run", "--rabbitmq", "3.8"], "unknown RabbitMQ release 3.8; known: 3.10, 4.0"),
    (["run", "--rabbitmq", "4.0", "--queue-type", "mirrored"],
     "classic queue mirroring was removed in RabbitMQ 4.0"),
    (["run", "--rabbitmq", "4.0", "--scenario", "mirrored-master-partition"],
     "classic queue mirroring was removed in RabbitMQ 4.0"),
    (["run", "--metadata-store", "khepri"], "RabbitMQ 3.10 has no khepri metadata store"),
    (["table", "/nonexistent/matrix.json"], "no such file: /nonexistent/matrix.json"),
    (["archive", "/nonexistent/matrix.json", "--out", "a.jsonl"], "no such file"),
    (["archive", "README.md", "--out", "a.json"], "an archive is a .jsonl file"),
])
def test_impossible_options_exit_2_before_anything_starts(argv, msg, capsys, monkeypatch):
    # Nothing may start: fail loudly if the runner is reached at all.
    import harness.runner
    monkeypatch.setattr(harness.runner, "run_test", lambda *a, **k: pytest.fail("run started"))
    assert main(argv) == 2
    assert msg in capsys.readouterr().err


def test_check_of_a_directory_without_history_exits_2(tmp_path, capsys):
    assert main(["check", str(tmp_path)]) == 2
    assert "no history.jsonl" in capsys.readouterr().err


def test_options_override_the_scenario_and_a_seed_is_drawn():
    a = build_parser().parse_args(
        ["run", "--scenario", "mirrored-partition", "--nodes", "5", "--ha-mode", "exactly",
         "--ha-params", "2", "--rate", "50", "--nemesis", "kill,pause", "--net-ticktime", "5"])
    spec = spec_from_args(a)
    assert spec.nodes == 5 and spec.queue.type == "mirrored"
    assert spec.queue.ha_mode == "exactly" and spec.queue.ha_params == 2
    assert spec.broker.partition_handling == "autoheal" and spec.broker.net_ticktime == 5
    assert spec.workload.rate == 50
    assert spec.nemesis.faults == ("kill", "pause")
    assert isinstance(spec.seed, int)


def test_nemesis_none_means_no_faults():
    spec = spec_from_args(build_parser().parse_args(["run", "--nemesis", "none"]))
    assert spec.nemesis.faults == ()


def test_spec_roundtrips_through_json():
    spec = dataclasses.replace(scenario("mirrored-partition"), seed=7)
    again = spec_from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec


def test_spec_from_dict_rejects_unknown_keys():
    with pytest.raises(SpecError, match="bogus"):
        spec_from_dict({"bogus": 1})


def test_every_scenario_is_valid():
    for name, sc in SCENARIOS.items():
        sc.spec.validate()
        assert sc.spec.name == name and sc.expect


def test_compose_valid_is_false_over_unknown_over_true():
    assert compose_valid({"a": {"valid": True}, "b": {"valid": True}}) is True
    assert compose_valid({"a": {"valid": True}, "b": {"valid": "unknown"}}) == "unknown"
    assert compose_valid({"a": {"valid": False}, "b": {"valid": "unknown"}}) is False
    assert [exit_code({"valid": v}) for v in (True, False, "unknown")] == [0, 1, 2]
    assert exit_code(None) == 2


def test_run_section_is_unknown_when_the_run_cannot_vouch_for_its_history():
    assert run_section({"interrupted": False, "error": None})["valid"] is True
    assert run_section({"interrupted": True})["valid"] == "unknown"
    assert run_section({"recovery": {"healthy": False, "actions": []}})["valid"] == "unknown"
    # The queue section owns the drain: an unproven drain makes lost messages unknown there, and
    # a run with nothing lost is not unknown for it alone (issue: verdicts a user can trust).
    assert run_section({"drain": {"complete": False}})["valid"] is True
    assert run_section(None)["valid"] == "unknown"


def test_new_run_dir_moves_latest(tmp_path):
    a = new_run_dir(tmp_path, "t")
    b = new_run_dir(tmp_path, "t")
    assert a != b and (tmp_path / "latest").resolve() == b.resolve()


def test_default_spec_is_the_partition_test():
    assert TestSpec().name == "partition" and TestSpec().nodes == 3


def test_makefile_has_a_target_per_scenario():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    block = re.search(r"^SCENARIOS := ((?:.*\\\n)*.*)$", text, re.M)
    assert block is not None
    names = block.group(1).replace("\\\n", " ").split()
    assert names == list(SCENARIOS)
    assert {"partition", "kill", "pause"} <= set(names)


def test_a_stream_test_lets_readers_repeat_messages_but_keeps_loss_and_order():
    spec = spec_from_args(build_parser().parse_args(["run", "--queue-type", "stream"]))
    assert spec.queue.type == "stream"
    assert not spec.check.unflagged_duplicates_invalid and not spec.check.flagged_duplicates_invalid
    assert spec.to_dict()["check"]["unflagged_duplicates_invalid"] is False
    quorum = spec_from_args(build_parser().parse_args(["run"]))
    assert quorum.check.unflagged_duplicates_invalid and quorum.for_queue() is quorum
    with pytest.raises(SpecError, match="duplicates"):
        dataclasses.replace(spec, check=CheckOptions()).validate()


def test_scenarios_that_say_a_random_node_hit_exactly_one():
    # "random" targets a random non-empty subset (Jepsen's default): it can kill every node.
    for name in ("kill", "pause", "quorum-packet-loss", "quorum-sac-fifo"):
        assert SCENARIOS[name].spec.nemesis.targets == "one", name


def test_the_default_workload_keeps_a_backlog_and_publish_only_drops_the_consume_rate():
    spec = spec_from_args(build_parser().parse_args(["run"]))
    assert spec.workload.consume_rate is not None
    assert spec.workload.consume_rate < spec.workload.rate
    publish_only = spec_from_args(build_parser().parse_args(["run", "--consumers", "0"]))
    assert publish_only.workload.consumers == 0 and publish_only.workload.consume_rate is None
    unlimited = spec_from_args(build_parser().parse_args(["run", "--consume-rate", "unlimited"]))
    assert unlimited.workload.consume_rate is None
    piped = spec_from_args(build_parser().parse_args(
        ["run", "--window", "32", "--nemesis", "stop@follower,kill@leader",
         "--nemesis-order", "cycle", "--pause-consumers-in-faults"]))
    assert piped.workload.client.window == 32 and piped.workload.pause_consumers_in_faults
    assert piped.nemesis.faults == ("stop@follower", "kill@leader")
    assert piped.nemesis.order == "cycle"
    capped = spec_from_args(build_parser().parse_args(
        ["run", "--queue-type", "mirrored", "--backlog", "2000", "--max-length", "2000",
         "--overflow", "reject-publish"]))
    assert capped.workload.backlog == 2000
    assert queue_arguments(capped.queue) == {"x-queue-type": "classic", "x-max-length": 2000,
                                             "x-overflow": "reject-publish"}


def test_older_test_json_with_a_fixed_cookie_still_reads_and_the_cookie_is_gone():
    d = TestSpec().to_dict()
    assert "cookie" not in json.dumps(d)
    d["broker"]["cookie"] = "RMQHARNESSCOOKIE"
    assert spec_from_dict(d) == TestSpec()


def test_each_fault_takes_its_own_options_on_the_command_line():
    spec = spec_from_args(build_parser().parse_args(
        ["run", "--nemesis", "partition-leader,kill@leader:duration=10:interval=20",
         "--nemesis-duration", "5"]))
    assert spec.nemesis.faults == ("partition-leader", "kill@leader:duration=10:interval=20")
    assert spec.nemesis.resolve(spec.nemesis.faults[1]).duration_s == 10
    assert spec.nemesis.resolve(spec.nemesis.faults[0]).duration_s == 5


@pytest.mark.parametrize("entry,msg", [
    ("kill@leader:duration", "'duration' is not KEY=VALUE"),
    ("kill:duration=soon", "duration must be a number, got 'soon'"),
    ("kill:loss=0.5", "kill takes no option 'loss'; it takes duration, interval"),
    ("partition-halves@n2", "partition-halves picks its own nodes"),
])
def test_a_malformed_fault_entry_exits_2_saying_what_is_wrong(entry, msg, capsys, monkeypatch):
    import harness.runner
    monkeypatch.setattr(harness.runner, "run_test", lambda *a, **k: pytest.fail("run started"))
    assert main(["run", "--nemesis", f"partition-one,{entry}"]) == 2
    assert msg in capsys.readouterr().err


def test_a_fault_nobody_timed_lasts_long_enough_for_rabbitmq_to_notice_it():
    spec = TestSpec().resolved()
    assert spec.nemesis.duration_s == 20.0  # 2 x net_ticktime 10: noticed by 12.5 s
    assert spec.detection_s() == (7.5, 12.5)
    slow = dataclasses.replace(TestSpec(), broker=dataclasses.replace(TestSpec().broker,
                                                                      net_ticktime=30))
    assert slow.resolved().nemesis.duration_s == 60.0  # it moves with net_ticktime
    assert spec.warnings() == [] and slow.warnings() == []
    asked = dataclasses.replace(TestSpec(), nemesis=dataclasses.replace(
        TestSpec().nemesis, duration_s=5.0)).resolved()
    assert asked.nemesis.duration_s == 5.0  # a shorter fault is played as asked...
    [warning] = asked.warnings()  # ...with a warning before the run
    assert warning.startswith("fault partition-random-halves lasts 5 s, but RabbitMQ declares a "
                              "silent peer down only after 7.5-12.5 s (net_ticktime 10 s)")


def test_every_catalogue_partition_and_pause_follows_net_ticktime():
    a = build_parser().parse_args(["run", "--scenario", "partition", "--net-ticktime", "30"])
    assert spec_from_args(a).nemesis.duration_s == 60.0
    for name, sc in SCENARIOS.items():
        spec = sc.spec.resolved()
        assert spec.warnings() == [], name  # no scenario plays a fault too short to notice


def test_kills_are_noticed_at_once_and_a_short_one_is_no_warning():
    spec = dataclasses.replace(TestSpec(), nemesis=dataclasses.replace(
        TestSpec().nemesis, faults=("kill", "partition-one:duration=30"), duration_s=3.0))
    assert spec.warnings() == []


def test_the_broker_settings_that_differ_from_rabbitmqs_are_said():
    diff = TestSpec().broker_differences()
    assert [(d["setting"], d["harness"], d["rabbitmq"]) for d in diff] == [
        ("partition_handling", "pause_minority", "ignore"), ("net_ticktime", 10, 60)]
    assert all(d["why"] for d in diff)
    same = dataclasses.replace(TestSpec(), broker=dataclasses.replace(
        TestSpec().broker, partition_handling="ignore", net_ticktime=60))
    assert same.broker_differences() == []


def test_a_khepri_run_says_partition_handling_does_not_apply():
    a = build_parser().parse_args(["run", "--rabbitmq", "4.0", "--metadata-store", "khepri"])
    spec = spec_from_args(a)
    spec.validate()
    assert spec.broker.rabbitmq == "4.0" and spec.broker.metadata_store == "khepri"
    said = spec.warnings()
    assert any("cluster_partition_handling = pause_minority does not apply to the khepri "
               "metadata store" in w for w in said)
    mnesia = spec_from_args(build_parser().parse_args(["run", "--rabbitmq", "4.0"]))
    assert mnesia.not_applying() == []
    assert spec_from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_a_delivery_limit_is_declared_and_recorded_and_the_default_is_known_by_release_line():
    spec = spec_from_args(build_parser().parse_args(
        ["run", "--delivery-limit", "7", "--dead-letter-exchange", "mine"]))
    assert spec.to_dict()["queue"]["delivery_limit"] == 7
    assert spec.to_dict()["queue"]["dead_letter_exchange"] == "mine"
    assert spec_from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert queue_arguments(spec.queue)["x-delivery-limit"] == 7
    default = TestSpec()
    assert default.to_dict()["queue"]["delivery_limit"] is None


@pytest.mark.parametrize("kind, line", [("quorum", "4.3"), ("quorum", "3.10"),
                                        ("classic", "4.0"), ("mirrored", "3.10"),
                                        ("stream", "4.3")])
def test_a_max_priority_is_declared_as_given_to_any_kind_and_recorded(kind, line):
    """--max-priority is sent as x-max-priority whatever the queue's kind and line (a quorum
    queue's broker answers it; the harness does not refuse it for the broker), and test.json
    records it with the other queue settings; the harness's dead-letter queue is declared
    without it."""
    from workloads.kinds import kind_of
    from workloads.queue_spec import dead_letter_queue_spec

    spec = spec_from_args(build_parser().parse_args(
        ["run", "--rabbitmq", line, "--queue-type", kind, "--max-priority", "10"]))
    assert spec.refusal() is None
    assert queue_arguments(spec.queue)["x-max-priority"] == 10
    recorded = json.loads(json.dumps(spec.to_dict()))
    assert recorded["queue"]["max_priority"] == 10 and spec_from_dict(recorded) == spec
    assert "x-max-priority 10" in kind_of(spec.queue).describe(recorded["queue"])
    assert "x-max-priority" not in queue_arguments(dead_letter_queue_spec(spec.queue))
    assert "x-max-priority" not in queue_arguments(TestSpec().queue)
    assert TestSpec().to_dict()["queue"]["max_priority"] is None


@pytest.mark.parametrize("value, said", [
    ("255", None), ("1", None),
    ("256", "--max-priority must be an integer 1..255, got 256"),
    ('"10"', 'queue.max_priority: must be a whole number or "none", got "10"'),
    ("true", "queue.max_priority: must be a whole number or"),
])
def test_a_scenario_files_max_priority_is_refused_unless_1_to_255(value, said, tmp_path, capsys,
                                                                  monkeypatch):
    import harness.runner
    monkeypatch.setattr(harness.runner, "run_test", lambda *a, **k: pytest.fail("run started"))
    path = tmp_path / "s.toml"
    path.write_text(f"[queue]\nmax_priority = {value}\n")
    if said is None:
        spec = spec_from_args(build_parser().parse_args(["run", "--scenario-file", str(path)]))
        assert spec.queue.max_priority == int(value)
        return
    assert main(["run", "--scenario-file", str(path)]) == 2
    assert said in capsys.readouterr().err


def test_the_summary_says_how_many_messages_were_dropped_by_design_and_why():
    from harness.cli import summary

    text = summary({"valid": True, "queue": {
        "valid": True, "attempt_count": 7986, "acknowledged_count": 7986, "lost_count": 0,
        "dropped_by_design_count": 5485, "dropped_by_design_reasons": {"maxlen": 5485}}})
    assert "queue: attempt 7986, acknowledged 7986, lost 0 (0 unacked), dropped_by_design " \
           "5485 (maxlen 5485)  [True]" in text


@pytest.mark.parametrize(("given", "expiry"), [([], 30.0), (["--writeback-expire", "off"], None),
                                               (["--writeback-expire", "12"], 12.0)])
def test_writeback_expire_defaults_to_linuxs_30_s_and_off_is_the_worst_case(given, expiry):
    spec = spec_from_args(build_parser().parse_args(["run", "--unsynced-fs", *given]))
    assert spec.backend.writeback_expire_s == expiry
    assert spec_from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_a_bad_writeback_expire_exits_2():
    with pytest.raises(UsageError, match="not a number of seconds or off"):
        build_parser().parse_args(["run", "--writeback-expire", "-3"])
