"""Unit tests of the broker lifecycle: config rendering, CLI parsing, commands through a fake Remote."""

import dataclasses
import json
import threading
import time

import pytest

from clusters.base import Node
from clusters.rabbitmq import (
    ERL_CALL_SH,
    BrokerConfig,
    BrokerError,
    NodeStatus,
    RabbitBroker,
    atoms,
    healthy,
    node_env,
    parse_cluster_status,
    render_advanced_config,
    render_config,
)
from clusters.releases import HostLauncher
from clusters.remote import CommandResult, RemoteError
from tests.fakes import FakeRemote


def test_render_config_carries_partition_handling_and_ticktime():
    text = render_config(BrokerConfig(partition_handling="autoheal", net_ticktime=7),
                         "10.213.0.12")
    assert "cluster_partition_handling = autoheal\n" in text
    assert "net_ticktime = 7\n" in text
    assert "loopback_users.guest = false\n" in text


def test_amqp_and_distribution_listen_on_the_node_address_only():
    text = render_config(BrokerConfig(), "10.213.0.12")
    assert "listeners.tcp.1 = 10.213.0.12:5672\n" in text
    assert "listeners.tcp.default" not in text  # that one listens on every interface
    assert render_advanced_config("10.213.0.12") == (
        "[{kernel, [{inet_dist_use_interface, {10,213,0,12}}]}].\n")
    with pytest.raises(ValueError):
        render_advanced_config("n1.example")


@pytest.mark.parametrize("cfg,msg", [
    (BrokerConfig(partition_handling="bogus"), "unknown partition handling"),  # type: ignore[arg-type]
    (BrokerConfig(net_ticktime=0), "net_ticktime"),
])
def test_broker_config_validation(cfg, msg):
    with pytest.raises(ValueError, match=msg):
        cfg.validate()


def test_node_env_uses_long_names_and_private_dirs():
    n = Node("n2", "10.213.0.12", FakeRemote("n2"))
    env = node_env(n, RabbitBroker([n], BrokerConfig(), "/d").paths(n))
    assert env["RABBITMQ_NODENAME"] == "rabbit@10.213.0.12"
    assert env["RABBITMQ_USE_LONGNAME"] == "true"
    assert env["RABBITMQ_PID_FILE"] == "/d/n2/rabbit.pid"
    assert env["HOME"] == "/d/n2/home"
    assert env["RABBITMQ_MNESIA_BASE"] == "/d/n2/mnesia"


STATUS = {
    "running_nodes": ["rabbit@a", "rabbit@b"],
    "partitions": {"rabbit@a": ["rabbit@c"]},
    "alarms": [],
}


def test_parse_cluster_status():
    s = parse_cluster_status("rabbit@a", json.dumps(STATUS))
    assert s.running and s.running_nodes == {"rabbit@a", "rabbit@b"}
    assert s.partitions == {"rabbit@a": ["rabbit@c"]}
    bad = parse_cluster_status("rabbit@a", "Error: unable to perform an operation")
    assert not bad.running and "unparseable" in (bad.error or "")


def test_healthy_needs_everyone_running_and_no_partitions():
    every = frozenset({"rabbit@a", "rabbit@b"})
    ok = [NodeStatus("rabbit@a", True, every), NodeStatus("rabbit@b", True, every)]
    assert healthy(ok, every)
    assert not healthy([ok[0], NodeStatus("rabbit@b", False)], every)
    assert not healthy([ok[0], NodeStatus("rabbit@b", True, frozenset({"rabbit@b"}))], every)
    assert not healthy([ok[0], NodeStatus("rabbit@b", True, every, {"rabbit@b": ["rabbit@a"]})], every)


def _broker(respond=None):
    nodes = [Node(f"n{i}", f"10.0.0.{i}", FakeRemote(f"n{i}", respond)) for i in (1, 2, 3)]
    return nodes, RabbitBroker(nodes, BrokerConfig(), "/data")


def test_ctl_runs_the_unwrapped_cli_with_the_node_env():
    nodes, b = _broker()
    b.ctl(nodes[1], "cluster_status")
    argv, env = nodes[1].remote.calls[-1], nodes[1].remote.envs[-1]
    assert argv == ("/usr/lib/rabbitmq/bin/rabbitmqctl", "-n", "rabbit@10.0.0.2", "cluster_status")
    assert env is not None and env["HOME"] == "/data/n2/home"


def _erl_call(argv):
    """Returns (node, "module function args") when argv is an erl_call, else None."""
    if argv[:3] == ("sh", "-c", ERL_CALL_SH):
        return argv[argv.index("-name") + 1], argv[argv.index("-a") + 1]
    return None


def _status_saying(running: dict[str, list[str]], via: str = "erl_call",
                   partitions: dict[str, list[str]] | None = None):
    """Returns a responder whose nodes say, per node ip, the nodes they see running and those
    they are partitioned from: through erl_call (via="erl_call"), or only through the CLI's
    cluster_status, erl_call giving no answer ("no answer") or missing ("missing")."""
    partitions = partitions or {}

    def respond(argv):
        call = _erl_call(argv)
        if call and via == "missing":
            return CommandResult(argv, 127, "", "sh: 1: exec: erl_call: not found")
        if call and via == "no answer":
            return CommandResult(argv, 1, "", "erl_call: failed to connect to node")
        if call:
            ip = call[0].removeprefix("rabbit@")
            answer = {
                "rabbit_nodes all_running []": [f"'rabbit@{x}'" for x in running.get(ip, [])],
                "rabbit_node_monitor partitions []": [f"'rabbit@{x}'"
                                                      for x in partitions.get(ip, [])],
                "rabbit_alarm get_alarms []": []}[call[1]]
            return CommandResult(argv, 0, f"[{','.join(answer)}]", "")
        if "cluster_status" in argv:
            ip = argv[argv.index("-n") + 1].removeprefix("rabbit@")
            seen = [f"rabbit@{x}" for x in running.get(ip, [])]
            apart = {f"rabbit@{ip}": [f"rabbit@{x}" for x in partitions[ip]]} \
                if partitions.get(ip) else {}
            return CommandResult(argv, 0, json.dumps({"running_nodes": seen,
                                                      "partitions": apart}), "")
        return None
    return respond


def _verbs(node):
    """The CLI verbs a fake node was given, cluster_status and erl_call apart."""
    return [c[3:] for c in node.remote.calls if "cluster_status" not in c and not _erl_call(c)]


VIAS = ["erl_call", "no answer", "missing"]


@pytest.mark.parametrize("via", VIAS)
def test_form_cluster_joins_by_hand_only_the_nodes_that_did_not_join_at_boot(via):
    all3 = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    nodes = [Node(f"n{i}", f"10.0.0.{i}", FakeRemote(f"n{i}", _status_saying(
        {"10.0.0.1": all3[:2], "10.0.0.2": all3[:2], "10.0.0.3": ["10.0.0.3"]}, via)))
        for i in (1, 2, 3)]
    b = RabbitBroker(nodes, BrokerConfig(), "/data")
    assert b.form_cluster() is False  # joined by hand: its health is checked again
    # n2 found n1 at boot (peer discovery); n3 formed a cluster of its own and is joined.
    assert {n.name: _verbs(n) for n in nodes} == {
        "n1": [], "n2": [],
        "n3": [("stop_app",), ("join_cluster", "rabbit@10.0.0.1"), ("start_app",)]}
    assert b.joined_by_hand == ("n3",)
    asked_cli = [any("cluster_status" in c for c in n.remote.calls) for n in nodes]
    assert asked_cli == [via != "erl_call"] * 3  # the CLI only when erl_call gave no answer


@pytest.mark.parametrize("via", VIAS)
def test_nodes_that_all_joined_at_boot_are_left_alone(via):
    all3 = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    nodes = [Node(f"n{i}", f"10.0.0.{i}", FakeRemote(f"n{i}", _status_saying(
        {ip: all3 for ip in all3}, via))) for i in (1, 2, 3)]
    assert RabbitBroker(nodes, BrokerConfig(), "/data").form_cluster() is True
    assert all(_verbs(n) == [] for n in nodes)


@pytest.mark.parametrize("via", VIAS)
def test_a_cluster_formed_at_boot_but_partitioned_is_not_called_healthy(via):
    all3 = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    nodes = [Node(f"n{i}", f"10.0.0.{i}", FakeRemote(f"n{i}", _status_saying(
        {ip: all3 for ip in all3}, via, partitions={"10.0.0.1": ["10.0.0.3"]})))
        for i in (1, 2, 3)]
    assert RabbitBroker(nodes, BrokerConfig(), "/data").form_cluster() is False


def test_quick_status_reads_what_erl_call_prints():
    assert atoms("['rabbit@10.0.0.1',\n 'rabbit@10.0.0.2']") == ["rabbit@10.0.0.1",
                                                                  "rabbit@10.0.0.2"]
    assert atoms("[]") == [] and atoms("[nonode@nohost]") == ["nonode@nohost"]
    alarm = "[{{resource_limit,disk,'rabbit@10.0.0.1'},[]}]"

    def respond(argv):
        call = _erl_call(argv)
        if call:
            return CommandResult(argv, 0, {
                "rabbit_nodes all_running []": "['rabbit@10.0.0.1','rabbit@10.0.0.2']",
                "rabbit_node_monitor partitions []": "['rabbit@10.0.0.3']",
                "rabbit_alarm get_alarms []": alarm}[call[1]], "")
        return None
    nodes, b = _broker(respond)
    assert b.quick_status(nodes[0]) == NodeStatus(
        "rabbit@10.0.0.1", True, frozenset({"rabbit@10.0.0.1", "rabbit@10.0.0.2"}),
        {"rabbit@10.0.0.1": ["rabbit@10.0.0.3"]}, (alarm,))
    call = nodes[0].remote.calls[0]
    assert call[:3] == ("sh", "-c", ERL_CALL_SH)
    assert call[3:] == ("sh", "-name", "rabbit@10.0.0.1", "-timeout", "5",
                        "-a", "rabbit_nodes all_running []")
    assert nodes[0].remote.envs[0]["HOME"] == "/data/n1/home"  # its cookie is there
    # A call that failed on the node is no answer, nor is one that timed out.
    nodes, b = _broker(lambda argv: CommandResult(
        argv, 0, "{badrpc, {'EXIT', {undef, [{rabbit_nodes, all_running, [], []}]}}}", ""))
    assert b.quick_status(nodes[0]) is None
    nodes, b = _broker(lambda argv: CommandResult(argv, -14, "", ""))
    assert b.erl_call(nodes[0], "rabbit", "is_booted") is None


def test_every_node_but_the_first_joins_the_first_at_boot():
    text = render_config(BrokerConfig(), "10.0.0.2", ["rabbit@10.0.0.1"])
    assert "cluster_formation.peer_discovery_backend = classic_config" in text
    assert "cluster_formation.classic_config.nodes.1 = rabbit@10.0.0.1" in text
    assert "cluster_formation.discovery_retry_limit = 60" in text
    assert "peer_discovery" not in render_config(BrokerConfig(), "10.0.0.1")
    nodes, b = _broker()
    for n in nodes:
        b.configure(n)
    conf = {n.name: n.remote.files[f"/data/{n.name}/etc/rabbitmq.conf"] for n in nodes}
    assert "peer_discovery" not in conf["n1"]  # the first node forms the cluster at once
    assert all("classic_config.nodes.1 = rabbit@10.0.0.1" in conf[x] for x in ("n2", "n3"))
    assert all("classic_config.nodes.2" not in conf[x] for x in ("n2", "n3"))


def test_configure_writes_config_cookie_and_starts_one_epmd():
    nodes, b = _broker()
    b.configure(nodes[0])
    b.configure(nodes[0])
    files = nodes[0].remote.files
    assert "cluster_partition_handling = pause_minority" in files["/data/n1/etc/rabbitmq.conf"]
    cookie = files["/data/n1/home/.erlang.cookie"]
    assert nodes[0].remote.modes["/data/n1/home/.erlang.cookie"] == 0o400
    assert nodes[0].remote.spawned == [("epmd",)]
    # A fresh random cookie per cluster, the same on every node, never in the spec.
    b.configure(nodes[1])
    assert nodes[1].remote.files["/data/n2/home/.erlang.cookie"] == cookie
    assert len(cookie) >= 32 and cookie not in json.dumps(dataclasses.asdict(BrokerConfig()))
    _, other = _broker()
    assert other._cookie != cookie


def test_kill_pause_resume_signal_the_pid_from_the_pid_file():
    def respond(argv):
        return CommandResult(argv, 0, "", "")
    nodes, b = _broker(respond)
    nodes[0].remote.files["/data/n1/rabbit.pid"] = "4242\n"
    b.pause(nodes[0])
    b.resume(nodes[0])
    sent = [c for c in nodes[0].remote.calls if c[0] == "kill" and c[1] != "-0"]
    assert sent == [("kill", "-STOP", "4242"), ("kill", "-CONT", "4242")]


def test_pause_and_resume_wait_until_the_beam_has_changed_state():
    # A signal is delivered asynchronously: the beam reads as running for a while after
    # SIGSTOP. pause returns only once procfs says stopped, resume once it says otherwise.
    reads = {"n": 0}
    states = iter(["R", "R", "T", "T", "S"])

    def respond(argv):
        if argv[:1] == ("cat",) and argv[1] == "/proc/4242/stat":
            reads["n"] += 1
            return CommandResult(argv, 0, f"4242 (beam.smp) {next(states)} 1 4242", "")
        return CommandResult(argv, 0, "", "")
    nodes, b = _broker(respond)
    nodes[0].remote.files["/data/n1/rabbit.pid"] = "4242\n"
    b.pause(nodes[0])
    assert reads["n"] == 3
    b.resume(nodes[0])
    assert reads["n"] == 5


def test_a_beam_that_will_not_stop_is_an_error_naming_its_state():
    def respond(argv):
        if argv[:1] == ("cat",):
            return CommandResult(argv, 0, "4242 (beam.smp) D 1 4242", "")
        return CommandResult(argv, 0, "", "")
    nodes, b = _broker(respond)
    nodes[0].remote.files["/data/n1/rabbit.pid"] = "4242"
    with pytest.raises(RemoteError, match="state D"):
        b._await_state(nodes[0], 4242, "stopped", lambda s: s in "Tt", timeout=0.1)


def test_kill_waits_until_the_beam_has_exited_and_a_beam_that_outlives_it_is_an_error():
    # SIGKILL is delivered asynchronously too: kill returns once procfs says the beam is a
    # zombie (or gone), and says so loudly when it still runs at the deadline.
    states = iter(["R", "R", "Z"])

    def exiting(argv):
        if argv[:1] == ("cat",):
            return CommandResult(argv, 0, f"4242 (beam.smp) {next(states)} 1 4242", "")
        return CommandResult(argv, 0, "", "")
    nodes, b = _broker(exiting)
    nodes[0].remote.files["/data/n1/rabbit.pid"] = "4242"
    b.kill(nodes[0])
    assert ("kill", "-KILL", "4242") in nodes[0].remote.calls
    assert next(states, None) is None

    def immortal(argv):
        if argv[:1] == ("cat",):
            return CommandResult(argv, 0, "4242 (beam.smp) D 1 4242", "")
        return CommandResult(argv, 0, "", "")
    nodes, b = _broker(immortal)
    nodes[0].remote.files["/data/n1/rabbit.pid"] = "4242"
    with pytest.raises(RemoteError, match="not exited but in state D"):
        b._await_state(nodes[0], 4242, "exited", lambda s: s == "Z", timeout=0.1)


def test_beam_pid_is_none_without_pid_file_or_dead_process_or_for_a_zombie():
    # A zombie answers `kill -0`, so a beam just killed would still count as alive: procfs
    # is read instead (the CI failure of 2026-12-02: beam_pid gave the pid kill had ended).
    nodes, b = _broker(lambda argv: None)
    assert b.beam_pid(nodes[0]) is None
    nodes[0].remote.files["/data/n1/rabbit.pid"] = "4242"
    assert b.beam_pid(nodes[0]) is None  # no /proc/4242: gone
    nodes[0].remote.files["/proc/4242/stat"] = "4242 (beam.smp) Z 1 4242"
    assert b.beam_pid(nodes[0]) is None
    nodes[0].remote.files["/proc/4242/stat"] = "4242 (beam.smp) S 1 4242"
    assert b.beam_pid(nodes[0]) == 4242


SCHEMA_FAILURE = ('Kernel pid terminated (application_controller) ({application_start_failure,'
                  'rabbit,{{schema_integrity_check_failed,[{table_attributes_mismatch,rabbit_user,'
                  '[username,password_hash,tags,hashing_algorithm],[username,password_hash,tags,'
                  'hashing_algorithm,limits]}]},{rabbit,start,[normal,[]]}}})\n')


def _waits_fail(name, order, failures=1):
    """A responder whose node's first `failures` boots die (its broker exits before it
    answers that it has booted: rabbit:await_startup/1); every node's boots are noted in
    `order`, as (node, failed). A broker that boots runs until killed. Waits are erl_call asks,
    one a boot here: a booted node says ok at once, a dead one is seen dead at once (no
    /proc/PID/stat); its VM answers at once whether it is alive."""
    boots = []
    killed = []

    def respond(argv):
        if argv[:2] == ("kill", "-KILL"):
            killed.append(argv)
        if argv == ("cat", "/proc/4242/stat"):  # the pid file's beam
            return (CommandResult(argv, 1, "", "cat: /proc/4242/stat: No such file or directory")
                    if killed else CommandResult(argv, 0, "4242 (beam.smp) S 1 4242", ""))
        call = _erl_call(argv)
        if call == (f"rabbit@10.0.0.{name[1]}", "erlang is_alive []"):
            return CommandResult(argv, 0, "true", "")  # its VM answers at once
        if call == (f"rabbit@10.0.0.{name[1]}", "rabbit await_startup [1000]"):
            boots.append(argv)
            failed = len(boots) <= failures
            order.append((name, failed))
            if failed:  # and `cat /proc/PID/stat` fails: FakeRemote has no such file
                return CommandResult(argv, 1, "", "erl_call: failed to connect to node")
            return CommandResult(argv, 0, "ok", "")
        return None
    return respond


def test_a_booting_node_is_asked_until_it_has_booted_and_without_erl_call_the_cli_waits(
        monkeypatch):
    from clusters import rabbitmq

    # not up yet, still booting after the node awaited its boot for a second, booted
    answers = iter(["", "{error, timeout}", "ok"])

    def respond(argv):
        if _erl_call(argv):
            out = next(answers)
            return CommandResult(argv, 0 if out else 1, out, "")
        return None
    nodes, b = _broker(respond)
    nodes[0].remote.files["/proc/1001/stat"] = "1001 (beam.smp) S 1 1001 1001 0 -1 4194560"
    b.start(nodes[0], timeout=5)
    asked = [_erl_call(c) for c in nodes[0].remote.calls if _erl_call(c)]
    # The node awaits its own boot, a second at a time (rabbit:await_startup/1, in ms).
    assert asked == [("rabbit@10.0.0.1", "rabbit await_startup [1000]")] * 3
    assert not [c for c in nodes[0].remote.calls if "wait" in c]  # no CLI VM
    # Its process still runs but it never boots: the timeout.
    nodes, b = _broker(lambda argv: CommandResult(argv, 0, "{error, timeout}", "")
                       if _erl_call(argv) else None)
    nodes[0].remote.files["/proc/1001/stat"] = "1001 (beam.smp) S 1 1001 1001 0 -1 4194560"
    with pytest.raises(BrokerError, match="n1 did not boot within 0s"):
        b.start(nodes[0], timeout=0.3)
    # A zombie has exited.
    nodes[0].remote.files["/proc/1002/stat"] = "1002 (beam.smp) Z 1 1001 1001 0 -1 4194560"
    with pytest.raises(BrokerError, match="its broker exited"):
        b.start(nodes[0], timeout=5)
    # A runtime without erl_call: `rabbitmqctl wait` on the pid file, for what time is left.
    nodes, b = _broker(lambda argv: CommandResult(argv, 127, "", "erl_call: not found")
                       if _erl_call(argv) else None)
    b.start(nodes[0], timeout=60)
    waits = [c for c in nodes[0].remote.calls if "wait" in c]
    assert waits == [("/usr/lib/rabbitmq/bin/rabbitmqctl", "-n", "rabbit@10.0.0.1", "wait",
                      "--timeout", "59", "/data/n1/rabbit.pid")]
    # erl_call there, but no answer at all while the process runs: the CLI after the grace.
    monkeypatch.setattr(rabbitmq, "ERL_CALL_GRACE", 0.3)
    nodes, b = _broker(lambda argv: CommandResult(argv, 1, "", "erl_call: failed to connect")
                       if _erl_call(argv) else None)
    nodes[0].remote.files["/proc/1001/stat"] = "1001 (beam.smp) S 1 1001 1001 0 -1 4194560"
    b.start(nodes[0], timeout=60)
    assert len([c for c in nodes[0].remote.calls if "wait" in c]) == 1
    assert len([c for c in nodes[0].remote.calls if _erl_call(c)]) >= 3


def _servers(node):
    return [a for a in node.remote.spawned if a[-1].endswith("rabbitmq-server")]


def _cluster(failing, order, failures=1):
    nodes = [Node(f"n{i}", f"10.0.0.{i}",
                  FakeRemote(f"n{i}", _waits_fail(f"n{i}", order,
                                                  failures if f"n{i}" == failing else 0)))
             for i in (1, 2, 3)]
    for n in nodes:
        n.remote.files[f"/data/{n.name}/rabbit.pid"] = "4242"  # running until killed
    return nodes


@pytest.mark.parametrize("failing", ["n1", "n2"])
def test_a_cluster_whose_first_boot_failed_boots_once_more_from_empty_databases(failing):
    from clusters.rabbitmq import died_joining
    assert died_joining(SCHEMA_FAILURE) == "schema_integrity_check_failed"
    assert died_joining("") is None and died_joining(None) is None
    order: list[tuple[str, bool]] = []
    nodes = _cluster(failing, order)
    nodes[1].remote.files["/data/n2/log/startup.out"] = SCHEMA_FAILURE
    RabbitBroker(nodes, BrokerConfig(), "/data").start_all(timeout=5)
    for n in nodes:  # every node killed, its failed boot's output kept, its database emptied
        calls = n.remote.calls
        wiped = calls.index(("rm", "-rf", f"/data/{n.name}/mnesia"))
        assert ("kill", "-KILL", "4242") in calls[:wiped]
        assert ("mv", "-f", f"/data/{n.name}/log/startup.out",
                f"/data/{n.name}/log/startup.first-boot.out") in calls[:wiped]
        assert len(_servers(n)) == 2
    # The second boot: the first node up before the others boot, so no join can race it.
    second = order[3:]
    assert second[0][0] == "n1"
    assert sorted(name for name, _failed in second[1:]) == ["n2", "n3"]
    assert not any(failed for _name, failed in second)


def test_a_cluster_whose_second_boot_fails_too_is_an_error():
    from clusters.rabbitmq import BrokerError
    order: list[tuple[str, bool]] = []
    nodes = _cluster("n3", order, failures=2)
    with pytest.raises(BrokerError, match=r"n3 did not boot: its broker exited \(see its startup"):
        RabbitBroker(nodes, BrokerConfig(), "/data").start_all(timeout=5)
    assert all(len(_servers(n)) == 2 for n in nodes)  # once more, never a third time


def test_enabling_the_metadata_store_says_whether_the_cluster_was_switched():
    nodes, b = _broker()
    assert b.enable_metadata_store() is False and nodes[0].remote.calls == []
    khepri = RabbitBroker(nodes, BrokerConfig(rabbitmq="4.0", metadata_store="khepri"), "/data")
    assert khepri.enable_metadata_store() is True
    assert nodes[0].remote.calls[-1][-3:] == ("enable_feature_flag", "--experimental", "khepri_db")


@pytest.mark.parametrize("line, first_alone", [("3.10", False), ("4.0", True)])
def test_a_release_whose_joiners_would_select_themselves_boots_its_first_node_first(
        line, first_alone):
    # 4.0's peer discovery lets a joiner that cannot reach the first node yet select itself;
    # so on 4.0 no other node starts before the first has booted. 3.10 boots them together:
    # while the first node's boot is awaited, the others start.
    order: list[tuple[str, bool]] = []
    nodes = _cluster("", order)
    others_started_meanwhile: list[bool] = []
    respond = nodes[0].remote.respond

    def first(argv):
        if _erl_call(argv):
            deadline = time.monotonic() + 1.0
            while not all(_servers(n) for n in nodes[1:]) and time.monotonic() < deadline:
                time.sleep(0.01)
            others_started_meanwhile.append(all(_servers(n) for n in nodes[1:]))
        return respond(argv)
    nodes[0].remote.respond = first
    RabbitBroker(nodes, BrokerConfig(rabbitmq=line), "/data",
                 launcher=HostLauncher()).start_all(timeout=5)
    assert all(len(_servers(n)) == 1 for n in nodes)
    assert others_started_meanwhile == [not first_alone]


def test_on_4_3_the_others_start_once_the_first_node_answers_and_boot_while_it_does():
    # 4.3's peer discovery sorts the nodes that answer by their VMs' start: a first node whose
    # VM answers has started before any joiner, so none can select itself, and the joiners need
    # not wait for its boot.
    order: list[tuple[str, bool]] = []
    nodes = _cluster("", order)
    asked: list[tuple[str, bool]] = []  # what n1 was asked, and whether the others had started
    configured: list[bool] = []  # whether the others were configured before n1 answered
    respond = nodes[0].remote.respond

    def ready(what, deadline):
        while not all(what(n) for n in nodes[1:]) and time.monotonic() < deadline:
            time.sleep(0.01)
        return all(what(n) for n in nodes[1:])

    def first(argv):
        call = _erl_call(argv)
        if call and "is_alive" in call[1]:
            configured.append(ready(lambda n: f"/data/{n.name}/etc/rabbitmq.conf"
                                    in n.remote.files, time.monotonic() + 1.0))
        if call:
            deadline = time.monotonic() + (1.0 if "await_startup" in call[1] else 0.0)
            asked.append((call[1], ready(_servers, deadline)))
        return respond(argv)
    nodes[0].remote.respond = first
    RabbitBroker(nodes, BrokerConfig(rabbitmq="4.3"), "/data",
                 launcher=HostLauncher()).start_all(timeout=5)
    assert all(len(_servers(n)) == 1 for n in nodes)
    assert asked == [("erlang is_alive []", False), ("rabbit await_startup [1000]", True)]
    assert configured == [True]  # configured while n1's VM came up, started once it answered
    assert sorted(name for name, failed in order if not failed) == ["n1", "n2", "n3"]


def test_a_first_node_whose_runtime_has_no_erl_call_is_awaited_until_booted():
    nodes, b = _broker(lambda argv: CommandResult(argv, 127, "", "erl_call: not found")
                       if _erl_call(argv) else None)
    b.wait_answering(nodes[0], timeout=60, pid=1001)
    waits = [c for c in nodes[0].remote.calls if "wait" in c]
    assert waits == [("/usr/lib/rabbitmq/bin/rabbitmqctl", "-n", "rabbit@10.0.0.1", "wait",
                      "--timeout", "59", "/data/n1/rabbit.pid")]


def test_on_4_3_the_status_read_with_erl_call_asks_no_partitions():
    # 4.3's cluster_status reports `partitions: []` whatever happens (it has no Mnesia, nor
    # rabbit_node_monitor:partitions/0): the quick status says the same, without asking.
    def respond(argv):
        call = _erl_call(argv)
        if call:
            return CommandResult(argv, 0, {
                "rabbit_nodes all_running []": "['rabbit@10.0.0.1','rabbit@10.0.0.2']",
                "rabbit_alarm get_alarms []": "[]"}[call[1]], "")
        return None
    nodes = [Node(f"n{i}", f"10.0.0.{i}", FakeRemote(f"n{i}", respond)) for i in (1, 2)]
    b = RabbitBroker(nodes, BrokerConfig(rabbitmq="4.3"), "/data")
    assert b.quick_status(nodes[0]) == NodeStatus(
        "rabbit@10.0.0.1", True, frozenset({"rabbit@10.0.0.1", "rabbit@10.0.0.2"}), {}, ())
    assert [_erl_call(c)[1] for c in nodes[0].remote.calls] == [
        "rabbit_nodes all_running []", "rabbit_alarm get_alarms []"]
    # Every node sees both: formed at boot and healthy, no CLI call.
    assert b.form_cluster() is True
    assert not [c for n in nodes for c in n.remote.calls if not _erl_call(c)]


def test_versions_asks_the_first_node_three_things_at_once_and_keeps_what_came_before_a_failure():
    flags = json.dumps([{"name": "khepri_db", "state": "enabled"},
                        {"name": "quorum_queue", "state": "enabled"},
                        {"name": "rabbitmq_4.3.0", "state": "disabled"}])
    together = threading.Barrier(3, timeout=10)  # broken unless the three are asked at once

    def respond(argv):
        verb = argv[3]
        together.wait()
        return CommandResult(argv, 0, {"version": "4.3.6\n",
                                       "erlang_version": "Erlang/OTP 29.1.2\n",
                                       "list_feature_flags": flags}[verb], "")
    nodes, b = _broker(respond)
    b = RabbitBroker(nodes, BrokerConfig(rabbitmq="4.3"), "/data")
    got = b.versions()
    assert {k: v for k, v in got.items() if k != "caveat"} == {
        "release": "4.3", "rabbitmq": "4.3.6", "erlang": "Erlang/OTP 29.1.2",
        "metadata_store": "khepri", "feature_flags": ["khepri_db", "quorum_queue"]}
    assert sorted(c[0].rsplit("/", 1)[-1] for c in nodes[0].remote.calls) == [
        "rabbitmq-diagnostics", "rabbitmqctl", "rabbitmqctl"]
    assert not together.broken  # none waited for another
    # The Erlang version would not come: the RabbitMQ version stays, nothing after it.
    nodes, b = _broker(lambda argv: CommandResult(argv, 1 if argv[3] == "erlang_version" else 0,
                                                  "4.3.6" if argv[3] == "version" else flags,
                                                  ""))
    assert b.versions() == {"release": "3.10", "rabbitmq": "4.3.6"}
