"""Unit tests of the broker lifecycle: config rendering, CLI parsing, commands through a fake Remote."""

import dataclasses
import json
import time

import pytest

from clusters.base import Node
from clusters.rabbitmq import (
    BrokerConfig,
    NodeStatus,
    RabbitBroker,
    healthy,
    node_env,
    parse_cluster_status,
    render_advanced_config,
    render_config,
)
from clusters.releases import HostLauncher
from clusters.remote import CommandResult
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


def _status_saying(running: dict[str, list[str]]):
    """Returns a responder whose cluster_status shows, per node ip, the nodes it sees running."""
    def respond(argv):
        if "cluster_status" in argv:
            ip = argv[argv.index("-n") + 1].removeprefix("rabbit@")
            seen = [f"rabbit@{x}" for x in running.get(ip, [])]
            return CommandResult(argv, 0, json.dumps({"running_nodes": seen, "partitions": {}}),
                                 "")
        return None
    return respond


def test_form_cluster_joins_by_hand_only_the_nodes_that_did_not_join_at_boot():
    all3 = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    nodes = [Node(f"n{i}", f"10.0.0.{i}", FakeRemote(f"n{i}", _status_saying(
        {"10.0.0.1": all3[:2], "10.0.0.2": all3[:2], "10.0.0.3": ["10.0.0.3"]})))
        for i in (1, 2, 3)]
    b = RabbitBroker(nodes, BrokerConfig(), "/data")
    assert b.form_cluster() is False  # joined by hand: its health is checked again
    verbs = {n.name: [c[3:] for c in n.remote.calls if "cluster_status" not in c] for n in nodes}
    # n2 found n1 at boot (peer discovery); n3 formed a cluster of its own and is joined.
    assert verbs == {"n1": [], "n2": [],
                     "n3": [("stop_app",), ("join_cluster", "rabbit@10.0.0.1"), ("start_app",)]}


def test_nodes_that_all_joined_at_boot_are_left_alone():
    all3 = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    nodes = [Node(f"n{i}", f"10.0.0.{i}", FakeRemote(f"n{i}", _status_saying(
        {ip: all3 for ip in all3}))) for i in (1, 2, 3)]
    assert RabbitBroker(nodes, BrokerConfig(), "/data").form_cluster() is True
    assert all(c[3] == "cluster_status" for n in nodes for c in n.remote.calls)


def test_a_cluster_formed_at_boot_but_partitioned_is_not_called_healthy():
    all3 = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]

    def respond(argv):
        if "cluster_status" in argv:
            return CommandResult(argv, 0, json.dumps({
                "running_nodes": [f"rabbit@{x}" for x in all3],
                "partitions": {"rabbit@10.0.0.1": ["rabbit@10.0.0.3"]}}), "")
        return None
    nodes = [Node(f"n{i}", f"10.0.0.{i}", FakeRemote(f"n{i}", respond)) for i in (1, 2, 3)]
    assert RabbitBroker(nodes, BrokerConfig(), "/data").form_cluster() is False


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


def test_beam_pid_is_none_without_pid_file_or_dead_process():
    def respond(argv):
        return CommandResult(argv, 1, "", "no such process") if argv[:2] == ("kill", "-0") else None
    nodes, b = _broker(respond)
    assert b.beam_pid(nodes[0]) is None
    nodes[0].remote.files["/data/n1/rabbit.pid"] = "4242"
    assert b.beam_pid(nodes[0]) is None


SCHEMA_FAILURE = ('Kernel pid terminated (application_controller) ({application_start_failure,'
                  'rabbit,{{schema_integrity_check_failed,[{table_attributes_mismatch,rabbit_user,'
                  '[username,password_hash,tags,hashing_algorithm],[username,password_hash,tags,'
                  'hashing_algorithm,limits]}]},{rabbit,start,[normal,[]]}}})\n')


def _waits_fail(name, order, failures=1):
    """A responder whose node's first `failures` `rabbitmqctl wait` calls fail (its boot died);
    every node's waits are noted in `order`, as (node, failed). Its beam runs until killed."""
    waits = []
    killed = []

    def respond(argv):
        if argv[:2] == ("kill", "-KILL"):
            killed.append(argv)
        if argv[:2] == ("kill", "-0") and killed:
            return CommandResult(argv, 1, "", "no such process")
        if "wait" in argv and argv[2] == f"rabbit@10.0.0.{name[1]}":
            waits.append(argv)
            failed = len(waits) <= failures
            order.append((name, failed))
            if failed:
                return CommandResult(argv, 69, "", "Error: unable to perform an operation")
        return None
    return respond


def _servers(node):
    return [a for a in node.remote.spawned if a[-1].endswith("rabbitmq-server")]


def _cluster(failing, order, failures=1):
    nodes = [Node(f"n{i}", f"10.0.0.{i}",
                  FakeRemote(f"n{i}", _waits_fail(f"n{i}", order,
                                                  failures if f"n{i}" == failing else 0)))
             for i in (1, 2, 3)]
    for n in nodes:
        n.remote.files[f"/data/{n.name}/rabbit.pid"] = "4242"  # kill -0 answers ok
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
    with pytest.raises(BrokerError, match="n3 did not boot"):
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
        if "wait" in argv:
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
