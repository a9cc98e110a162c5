"""Every fault on a real local cluster: it takes effect, and it is healed.

One 3-node cluster serves the whole module (booting one costs ~30 s); each
test leaves it healthy for the next, which the fixture checks.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pika
import pytest

from clusters.local.cluster import NetnsCluster, make_plan
from clusters.rabbitmq import BrokerConfig, RabbitBroker
from clusters.rabbitmq_admin import QueueDepth, RabbitAdmin
from clusters.remote import RemoteError
from harness.placement import QueueSampler
from harness.recovery import recover
from history import HistoryWriter, read_history
from nemesis import FaultUnsupported, NemesisOptions
from nemesis.faults import make_fault
from nemesis.protocol import FaultContext
from tests.integration.conftest import leftovers
from workloads.clients import ClientError, ClientOptions, Consumer
from workloads.kinds import kind_of
from workloads.publisher import Publisher
from workloads.queue_spec import QueueSpec
from workloads.queue_workload import QueueWorkload, WorkloadOptions

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUEUE = "faults.queue"


@dataclasses.dataclass
class Env:
    cluster: NetnsCluster
    broker: RabbitBroker
    history: HistoryWriter
    tmp: Path

    @property
    def admin(self) -> RabbitAdmin:
        return RabbitAdmin(self.broker)

    def ctx(self, **opts: object) -> FaultContext:
        return FaultContext(self.cluster, self.broker, NemesisOptions(**opts), QUEUE,  # type: ignore[arg-type]
                            admin=self.admin)

    def node(self, name: str):
        return self.cluster.node(name)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("faults")
    cluster = NetnsCluster(make_plan(3), data_root=str(tmp / "data"))
    broker = RabbitBroker(cluster.nodes, BrokerConfig(net_ticktime=5), cluster.data_root)
    history = HistoryWriter(tmp / "history.jsonl")
    try:
        broker.use(cluster.launcher(broker.release))  # as a run's nodes: clusters.server_home
        cluster.create()
        broker.start_all()
        broker.form_cluster()
        QueueWorkload(QueueSpec(name=QUEUE), WorkloadOptions(), cluster.nodes, history).setup(
            RabbitAdmin(broker))
        yield Env(cluster, broker, history, tmp)
    finally:
        broker.stop_all()
        cluster.destroy()
        history.close()
    assert not leftovers(), leftovers()


@pytest.fixture(autouse=True)
def _healthy_after(env: Env) -> Iterator[None]:
    yield
    rep = recover(env.broker, env.history, timeout=180, grace=30)
    assert rep.healthy, f"cluster not healthy after the test: {rep.last_status}"


def can_connect(env: Env, src: str, dst: str, port: int = 25672) -> bool:
    """Returns whether node src can open a TCP connection to node dst's port."""
    ip = env.node(dst).ip
    code = f"import socket; socket.create_connection(({ip!r}, {port}), 2).close()"
    res = env.node(src).remote.run(["python3", "-c", code], timeout=10, check=False)
    return res.ok


def eventually(pred: Callable[[], bool], timeout: float, every: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(every)
    return pred()


def running_seen_by(env: Env, name: str) -> set[str]:
    st = env.broker.status(env.node(name))
    return {n.split("@")[1] for n in st.running_nodes} if st.running else set()


def test_brokers_listen_on_their_node_address_only(env: Env):
    for node in env.cluster.nodes:
        out = node.remote.run(["ss", "-Hltn"], timeout=10).stdout
        addresses = {line.split()[3].rsplit(":", 1)[0] for line in out.splitlines()}
        ports = {line.split()[3].rsplit(":", 1)[1] for line in out.splitlines()
                 if line.split()[3].startswith(f"{node.ip}:")}
        # AMQP, distribution and epmd on the node's address; epmd adds loopback by itself.
        assert addresses <= {node.ip, "127.0.0.1", "[::1]"}, (node.name, out)
        assert {"5672", "4369"} <= ports and len(ports) >= 3, (node.name, out)


def test_partition_one_cuts_the_node_off_both_ways_and_heals(env: Env):
    ctx = env.ctx(targets="n3")
    fault = make_fault("partition-one")
    desc = fault.start(ctx, random.Random(1))
    try:
        assert desc["grudge"]["n3"] == ["n1", "n2"]
        assert not can_connect(env, "n3", "n1") and not can_connect(env, "n1", "n3")
        assert can_connect(env, "n1", "n2")
        # the majority notices its peer gone once net_ticktime passes
        assert eventually(lambda: env.node("n3").ip not in running_seen_by(env, "n1"), 60)
    finally:
        fault.stop(ctx)
    assert can_connect(env, "n3", "n1") and can_connect(env, "n1", "n3")


def test_partition_bridge_keeps_only_the_bridge_node_on_both_sides(env: Env):
    ctx = env.ctx()
    fault = make_fault("partition-bridge")
    desc = fault.start(ctx, random.Random(3))
    try:
        grudge = {k: set(v) for k, v in desc["grudge"].items()}
        bridge = next(n for n in ("n1", "n2", "n3") if not grudge.get(n))
        a, b = [n for n in ("n1", "n2", "n3") if n != bridge]
        assert can_connect(env, bridge, a) and can_connect(env, bridge, b)
        assert not can_connect(env, a, b) and not can_connect(env, b, a)
    finally:
        fault.stop(ctx)
    assert can_connect(env, "n1", "n2") and can_connect(env, "n2", "n3")


def test_partition_leader_isolates_the_queue_leader(env: Env):
    leader = env.admin.queue_leader(QUEUE)
    assert leader in {"n1", "n2", "n3"}
    ctx = env.ctx()
    fault = make_fault("partition-leader")
    desc = fault.start(ctx, random.Random(4))
    try:
        others = sorted({"n1", "n2", "n3"} - {leader})
        assert sorted(desc["grudge"][leader]) == others
        assert not can_connect(env, leader, others[0])
    finally:
        fault.stop(ctx)


def test_kill_ends_the_beam_and_stop_restarts_it_into_the_cluster(env: Env):
    ctx = env.ctx(targets="n2")
    fault = make_fault("kill")
    before = env.broker.beam_pid(env.node("n2"))
    assert before is not None
    fault.start(ctx, random.Random(1))
    assert env.broker.beam_pid(env.node("n2")) is None
    fault.stop(ctx)
    after = env.broker.beam_pid(env.node("n2"))
    assert after is not None and after != before
    assert eventually(lambda: running_seen_by(env, "n1") == {n.ip for n in env.cluster.nodes}, 60)


def test_pause_stops_the_process_and_resume_continues_it(env: Env):
    ctx = env.ctx(targets="n1")
    fault = make_fault("pause")
    pid = env.broker.beam_pid(env.node("n1"))
    fault.start(ctx, random.Random(1))
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        assert state == "T"
    finally:
        fault.stop(ctx)
    assert Path(f"/proc/{pid}/stat").read_text().split()[2] != "T"


def test_packet_loss_installs_statistic_rules_and_stop_flushes_them(env: Env):
    ctx = env.ctx(targets="n1", packet_loss=0.5)
    fault = make_fault("packet-loss")
    fault.start(ctx, random.Random(1))
    try:
        rules = env.node("n1").remote.run(["iptables", "-S"], timeout=10).stdout
        assert "statistic" in rules and "0.5" in rules
    finally:
        fault.stop(ctx)
    rules = env.node("n1").remote.run(["iptables", "-S"], timeout=10).stdout
    assert "statistic" not in rules


def test_bandwidth_installs_tbf_and_stop_removes_it(env: Env):
    ctx = env.ctx(targets="n2", bandwidth_kbit=512)
    fault = make_fault("bandwidth")
    fault.start(ctx, random.Random(1))
    try:
        qd = env.node("n2").remote.run(["tc", "qdisc", "show", "dev", "eth0"], timeout=10).stdout
        assert "tbf" in qd
    finally:
        fault.stop(ctx)
    qd = env.node("n2").remote.run(["tc", "qdisc", "show", "dev", "eth0"], timeout=10).stdout
    assert "tbf" not in qd


def test_netem_is_refused_clearly_where_the_kernel_lacks_it(env: Env):
    probe = env.node("n1").remote.run(
        ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "0ms"], timeout=10, check=False)
    ctx = env.ctx(targets="n1")
    fault = make_fault("netem-delay")
    if probe.ok:  # a kernel with netem: the fault must take effect
        env.node("n1").remote.run(["tc", "qdisc", "del", "dev", "lo", "root"], timeout=10)
        fault.start(ctx, random.Random(1))
        qd = env.node("n1").remote.run(["tc", "qdisc", "show", "dev", "eth0"], timeout=10).stdout
        fault.stop(ctx)
        assert "netem" in qd
    else:
        with pytest.raises(FaultUnsupported, match="netem"):
            fault.start(ctx, random.Random(1))
        fault.stop(ctx)


def test_rolling_restart_restarts_every_node_and_the_cluster_stays_whole(env: Env):
    before = {n.name: env.broker.beam_pid(n) for n in env.cluster.nodes}
    ctx = env.ctx()
    fault = make_fault("rolling-restart")
    fault.start(ctx, random.Random(1))
    fault.stop(ctx)
    after = {n.name: env.broker.beam_pid(n) for n in env.cluster.nodes}
    assert all(after[k] is not None and after[k] != before[k] for k in before)


def test_full_restart_keeps_confirmed_persistent_messages(env: Env):
    """The durability test: confirmed persistent messages in a durable queue survive a full stop."""
    n1 = env.node("n1")
    pub = Publisher(env.history, QUEUE, "n1", n1.ip, 900_001, ClientOptions())
    pub.open()
    outcomes = [pub.publish() for _ in range(50)]
    pub.close()
    assert outcomes.count("ok") == 50
    ctx = env.ctx()
    fault = make_fault("full-restart")
    fault.start(ctx, random.Random(1))
    assert all(env.broker.beam_pid(n) is None for n in env.cluster.nodes)
    fault.stop(ctx)
    assert recover(env.broker, env.history, timeout=120, grace=30).healthy
    got: list[str] = []
    for attempt in range(10):
        con = Consumer(env.history, QUEUE, "n2", env.node("n2").ip, 900_002 + attempt,
                       ClientOptions(prefetch=100), f="drain", phase="drain")
        try:
            con.open()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and con.delivered < 50:
                con.poll(0.2)
            break
        except Exception:
            time.sleep(2)  # the quorum queue may still be electing its leader
        finally:
            con.close()
    env.history.close()
    env.history = HistoryWriter(env.tmp / "history2.jsonl")
    ops = read_history(env.tmp / "history.jsonl")
    got = [o.value for o in ops if o.f == "drain" and o.process != 900_001]
    assert sorted(set(got)) == sorted(f"900001-{i}" for i in range(50))


@pytest.mark.parametrize("shape", [
    "partition-halves", "partition-random-halves", "partition-majorities-ring", "partition-one",
])
def test_every_partition_shape_cuts_exactly_its_grudge(env: Env, shape: str):
    ctx = env.ctx(targets="random")
    fault = make_fault(shape)
    desc = fault.start(ctx, random.Random(11))
    try:
        grudge = {k: set(v) for k, v in desc["grudge"].items()}
        names = ["n1", "n2", "n3"]
        for a in names:
            for b in names:
                if a == b:
                    continue
                cut = b in grudge.get(a, set()) or a in grudge.get(b, set())
                assert can_connect(env, a, b) == (not cut), (shape, a, b, grudge)
    finally:
        fault.stop(ctx)
    assert all(can_connect(env, a, b) for a in ("n1", "n2", "n3") for b in ("n1", "n2", "n3")
               if a != b)


def test_graceful_stop_stops_the_broker_and_start_brings_it_back(env: Env):
    ctx = env.ctx(targets="n3")
    fault = make_fault("stop")
    fault.start(ctx, random.Random(1))
    assert env.broker.beam_pid(env.node("n3")) is None
    fault.stop(ctx)
    assert env.broker.beam_pid(env.node("n3")) is not None


def test_a_depth_is_asked_of_the_queue_itself_and_a_hung_queue_fails_loudly(env: Env):
    """The drain's proof of emptiness: the queue's record and its own process, never list_queues
    (which, in a series run, listed a mirrored master hung after autoheal on no node, so the
    drain called the queue gone). A suspended queue process must make the depth fail, not
    answer "absent" or 0."""
    name = "depth.classic"
    n1, n2 = env.node("n1"), env.node("n2")
    QueueWorkload(QueueSpec(name=name, type="classic"), WorkloadOptions(), env.cluster.nodes,
                  env.history).setup(env.admin)
    pub = Publisher(env.history, name, "n1", n1.ip, 900_101, ClientOptions())
    pub.open()
    assert [pub.publish() for _ in range(30)].count("ok") == 30
    pub.close()
    def on_its_process(call: str) -> str:
        return (f'{{ok, Q}} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"/">>, queue, <<"{name}">>)), '
                f'sys:{call}(amqqueue:get_pid(Q)).')

    try:
        for node in (n1, n2):  # the process lives on n1; n2 asks it across the cluster
            assert eventually(lambda node=node: env.admin.classic_depth(node, name)
                              == QueueDepth(True, "classic", 30, 0), 15)
        quorum = env.admin.quorum_depth(n2, QUEUE)
        assert quorum.exists and quorum.type == "quorum" and quorum.ready is not None
        assert env.admin.queue_exists(n2, QUEUE) and not env.admin.queue_exists(n2, "no.such")
        for ask in (env.admin.classic_depth, env.admin.quorum_depth):
            assert ask(n2, "no.such") == QueueDepth(False)
        env.broker.ctl(n1, "eval", on_its_process("suspend"), timeout=20)
        started = time.monotonic()
        with pytest.raises(RemoteError):  # CommandTimeout included
            env.admin.classic_depth(n2, name, timeout=8)
        assert time.monotonic() - started < 15
        # The sampler records the hung queue as an error, never as absent, whether list_queues
        # leaves it out (the sampler then asks the queue itself) or does not answer at all.
        kind = kind_of(QueueSpec(name=name, type="classic"))
        sampler = QueueSampler(env.admin, [n2], name, env.history, 5.0, threading.Event(),
                               depth=lambda node: kind.depth(env.admin, node, name))
        sampler.sample()
        sampler.join()
        sampled = [o for o in read_history(env.history.path) if o.f == "depth"][-1]
        assert set(sampled.value["nodes"]["n2"]) == {"error"}, sampled.value
        # A consumer of the hung queue gets no answer to basic.consume: it gives up in its
        # answer time, instead of waiting for good.
        started = time.monotonic()
        con = Consumer(env.history, name, "n2", n2.ip, 900_102,
                       ClientOptions(answer_timeout_s=3.0), f="drain", phase="drain")
        with pytest.raises(ClientError, match="no answer to basic.consume within 3s"):
            con.open()
        assert time.monotonic() - started < 8
    finally:
        env.broker.ctl(n1, "eval", on_its_process("resume"), timeout=20)
        assert env.admin.classic_depth(n1, name) == QueueDepth(True, "classic", 30, 0)
        conn = pika.BlockingConnection(pika.ConnectionParameters(host=n1.ip))
        conn.channel().queue_delete(name)
        conn.close()
