"""RabbitMQ nodes on any Remote: configuration, start, stop, cluster formation, health, signals.

`render_config` and `node_env` are pure. `RabbitBroker` runs the Debian
broker's own scripts (`/usr/lib/rabbitmq/bin/...`: the `/usr/sbin` wrappers
switch user and drop the environment, or the same scripts from the launcher's
home, clusters.server_home) through each node's Remote, every CLI call with a
hard timeout because CLI calls hang while a partition is still undetected.
While a cluster boots and forms, it asks the nodes with erl_call instead (a
few milliseconds, no Erlang VM of its own). It is the nodes' lifecycle (the
`Broker` protocol the nemeses use for process faults); what the broker says
about queues, and the policies it is given, are clusters.rabbitmq_admin's.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from clusters.base import Node
from clusters.errors import ClusterError
from clusters.releases import (
    DEFAULT_LINE,
    DEFAULT_METADATA_STORE,
    RABBIT_BIN,
    HostLauncher,
    Launcher,
    Release,
    release,
)
from clusters.remote import CommandTimeout, RemoteError
from clusters.server_home import ENABLED_PLUGINS, scripts_env

log = logging.getLogger(__name__)

PartitionHandling = Literal["ignore", "autoheal", "pause_minority"]
PARTITION_HANDLINGS: tuple[str, ...] = ("ignore", "autoheal", "pause_minority")

CLI_TIMEOUT = 30.0
# erl_call, Erlang/OTP's C client of the distribution protocol, from the runtime the node runs
# (found by sh where the node runs: this host, a root filesystem, a container). It asks a node
# one thing in a few milliseconds and next to no CPU, where each CLI call is an Erlang VM of its
# own (about 0.45 CPU seconds): what the nodes ask while they boot, when every core is theirs.
# Exit 127: the runtime has none.
ERL_CALL_SH = 'for c in /usr/lib/erlang/erts-*/bin/erl_call; do exec "$c" "$@"; done; exit 127'
ERL_CALL_TIMEOUT = 5.0
BOOT_POLL = 0.1
# How long one erl_call has a booting node await its own boot (rabbit:await_startup/1, ms).
AWAIT_MS = 1000
ALIVE_EVERY = 1.0  # while a node boots, whether its process still runs: every second
ERL_CALL_GRACE = 15.0
_ATOM = re.compile(r"'([^']+)'|([a-z][A-Za-z0-9_@.]*)")
# The feature flag that switches a 4.0 cluster to Khepri, and says it runs on it once enabled.
KHEPRI_FLAG = "khepri_db"

T = TypeVar("T")


class BrokerError(ClusterError, RuntimeError):
    """The broker would not start, join, stop or answer."""


class ErlCallUnavailable(BrokerError):
    """The node's Erlang runtime has no erl_call."""


@dataclass(frozen=True)
class BrokerConfig:
    """What decides the broker's behaviour under faults, rendered into rabbitmq.conf."""

    # None: the release line's own (clusters.releases: pause_minority where the line has the
    # setting, none on 4.3, which removed it).
    partition_handling: PartitionHandling | None = None
    net_ticktime: int = 10
    extra: tuple[tuple[str, str], ...] = ()
    # The release line (clusters.releases) and its metadata store (None: the line's default),
    # Khepri switched on through its feature flag once a 4.0 cluster has formed.
    rabbitmq: str = DEFAULT_LINE
    metadata_store: str | None = None
    # The deprecated feature transient_nonexcl_queues permitted on every node (4.3 denies it by
    # default; refused on lines that take such queues without a permission).
    permit_transient_queues: bool = False
    # rabbit's channel_tick_interval (ms; advanced.config: not a rabbitmq.conf key), None: the
    # broker's own (60 s). RabbitMQ 4.0's channel evaluates a consumer timeout on this tick, so
    # a consumer-timeout run on 4.0 sets it (harness.spec.TestSpec.resolved).
    channel_tick_interval_ms: int | None = None

    @property
    def line(self) -> Release:
        """Returns the release line's record."""
        return release(self.rabbitmq)

    @property
    def store(self) -> str:
        """Returns the metadata store the nodes run: the spec's, else the line's default."""
        return self.metadata_store or self.line.default_metadata_store

    @property
    def handling(self) -> str | None:
        """Returns the cluster_partition_handling the nodes run with, None on a line without."""
        return self.line.partition_handling_of(self.partition_handling)

    def resolved(self) -> BrokerConfig:
        """Returns the config with the line's defaults written in (the store; the partition
        handling where the line has one: on a line without, a setting given stays, for
        `refusal` to refuse), as test.json records what ran; idempotent."""
        kept = self.partition_handling if self.line.no_partition_handling else self.handling
        return dataclasses.replace(self, partition_handling=kept,  # type: ignore[arg-type]
                                   metadata_store=self.store)

    def refusal(self) -> str | None:
        """Returns why the release line cannot run this config (a setting it lacks or would
        ignore, with the release table's sentence), or None."""
        line = self.line
        return (line.metadata_store_refusal(self.store)
                or line.partition_handling_refusal(self.partition_handling)
                or (line.permission_refusal() if self.permit_transient_queues else None))

    def validate(self) -> None:
        """Raises ValueError for a setting the broker would reject (ReleaseError, a ValueError,
        for a release or metadata store it cannot run)."""
        line = self.line
        line.check_metadata_store(self.store)
        if self.partition_handling is not None and \
                self.partition_handling not in PARTITION_HANDLINGS:
            raise ValueError(
                f"unknown partition handling {self.partition_handling!r}; "
                f"known: {', '.join(PARTITION_HANDLINGS)}"
            )
        if not 1 <= self.net_ticktime <= 3600:
            raise ValueError(f"net_ticktime must be 1..3600 s, got {self.net_ticktime}")
        tick = self.channel_tick_interval_ms
        if tick is not None and not (isinstance(tick, int) and 100 <= tick <= 3_600_000):
            raise ValueError(f"channel_tick_interval must be 100..3600000 ms, got {tick}")


def render_config(cfg: BrokerConfig, address: str, peers: Sequence[str] = ()) -> str:
    """Takes a BrokerConfig, the node's IPv4 address and the Erlang names of the nodes it joins
    at first boot (the cluster's first node, for every other node; none for that one). Returns
    the text of rabbitmq.conf (new-style sysctl format). AMQP listens on that address only, not
    on every interface. With peers, the node joins them as it boots (classic config peer
    discovery, retried for 30 s while they boot), so a cluster forms as its nodes boot in
    parallel; the first node lists none, so it never waits for the others before forming the
    cluster they join (listing every node, 3.10's first node waits out its retries, 5 s)."""
    lines = [
        "# generated by the harness from the test spec",
        f"listeners.tcp.1 = {address}:5672",
        "loopback_users.guest = false",
        *([f"cluster_partition_handling = {cfg.handling}"] if cfg.handling else []),
        *(["deprecated_features.permit.transient_nonexcl_queues = true"]
          if cfg.permit_transient_queues else []),
        f"net_ticktime = {cfg.net_ticktime}",
        "disk_free_limit.absolute = 50MB",
        "log.file.level = info",
        "log.console = false",
        "heartbeat = 10",
    ]
    if peers:
        lines += ["cluster_formation.peer_discovery_backend = classic_config",
                  "cluster_formation.discovery_retry_limit = 60",
                  "cluster_formation.discovery_retry_interval = 500"]
        lines += [f"cluster_formation.classic_config.nodes.{i} = {name}"
                  for i, name in enumerate(peers, 1)]
    lines += [f"{k} = {v}" for k, v in cfg.extra]
    return "\n".join(lines) + "\n"


def render_advanced_config(address: str, cfg: BrokerConfig | None = None) -> str:
    """Takes the node's IPv4 address and the broker config. Returns advanced.config, which
    binds Erlang distribution (clustering and the CLI tools) to that address only, and sets
    rabbit's channel_tick_interval when the config has one."""
    octets = ipaddress.IPv4Address(address).packed
    apps = [f"{{kernel, [{{inet_dist_use_interface, {{{','.join(map(str, octets))}}}}}]}}"]
    if cfg is not None and cfg.channel_tick_interval_ms is not None:
        apps.append(f"{{rabbit, [{{channel_tick_interval, {int(cfg.channel_tick_interval_ms)}}}]}}")
    return f"[{', '.join(apps)}].\n"


@dataclass(frozen=True)
class NodePaths:
    """Where one node's files live on its host."""

    base: str

    @property
    def home(self) -> str:
        return f"{self.base}/home"

    @property
    def etc(self) -> str:
        return f"{self.base}/etc"

    @property
    def mnesia(self) -> str:
        return f"{self.base}/mnesia"

    @property
    def log_dir(self) -> str:
        return f"{self.base}/log"

    @property
    def pid_file(self) -> str:
        return f"{self.base}/rabbit.pid"

    @property
    def config_file(self) -> str:
        return f"{self.etc}/rabbitmq.conf"


def node_env(node: Node, paths: NodePaths) -> dict[str, str]:
    """Takes a node and its paths. Returns the environment its broker and CLI calls run with."""
    return {
        "HOME": paths.home,
        "RABBITMQ_NODENAME": node.erlang_name,
        "RABBITMQ_USE_LONGNAME": "true",
        "RABBITMQ_MNESIA_BASE": paths.mnesia,
        "RABBITMQ_LOG_BASE": paths.log_dir,
        "RABBITMQ_LOGS": f"{paths.log_dir}/rabbit.log",
        "RABBITMQ_CONFIG_FILE": paths.config_file,
        "RABBITMQ_ADVANCED_CONFIG_FILE": f"{paths.etc}/advanced.config",
        "RABBITMQ_CONF_ENV_FILE": f"{paths.etc}/rabbitmq-env.conf",
        "RABBITMQ_ENABLED_PLUGINS_FILE": f"{paths.etc}/enabled_plugins",
        "RABBITMQ_PID_FILE": paths.pid_file,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }


@dataclass(frozen=True)
class NodeStatus:
    """One node's view of the cluster, from `rabbitmqctl cluster_status` (or erl_call:
    RabbitBroker.quick_status)."""

    node: str
    running: bool
    running_nodes: frozenset[str] = frozenset()
    partitions: dict[str, list[str]] = field(default_factory=dict)
    alarms: tuple[str, ...] = ()
    error: str | None = None


def parse_cluster_status(node: str, text: str) -> NodeStatus:
    """Takes a node name and `cluster_status --formatter json` output. Returns its NodeStatus."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        return NodeStatus(node, False, error=f"unparseable cluster_status: {e}")
    partitions = d.get("partitions") or {}
    if isinstance(partitions, list):  # some versions give [[node, [peers]], ...]
        partitions = {str(p[0]): list(p[1]) for p in partitions if len(p) == 2}
    alarms = tuple(str(a) for a in d.get("alarms") or [])
    return NodeStatus(
        node,
        True,
        frozenset(d.get("running_nodes") or []),
        {str(k): [str(x) for x in v] for k, v in partitions.items()},
        alarms,
    )


def enabled_flags(text: str) -> list[str]:
    """Takes `list_feature_flags --formatter json name state` output. Returns the names of the
    enabled flags, sorted. Raises ValueError when it is not that."""
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"unparseable feature flags: {e}") from e
    return sorted(str(r["name"]) for r in rows
                  if isinstance(r, dict) and r.get("state") == "enabled" and "name" in r)


def healthy(statuses: Sequence[NodeStatus], expected: Iterable[str]) -> bool:
    """Takes every node's status and the expected Erlang node names.

    Returns True when every node is running, sees all expected nodes running,
    and reports no partitions.
    """
    want = frozenset(expected)
    return all(s.running and s.running_nodes >= want and not s.partitions for s in statuses)


def died_joining(startup_out: str | None) -> str | None:
    """Takes a node's startup output. Returns the reason its boot ended, when the output names
    one (for example schema_integrity_check_failed), else None."""
    if not startup_out:
        return None
    m = re.search(r"application_start_failure,rabbit,\{\{?([a-z_]+)", startup_out)
    return m.group(1) if m else None


def _proc_stat(node: Node, pid: int) -> str | None:
    """Takes a node and a pid on it. Returns the process's /proc/PID/stat, or None when it
    is gone. Read with `cat`, run where the pid means that process (this host, the SSH
    host, the container: procfs is not a file Docker's archive API copies)."""
    res = node.remote.run(["cat", f"/proc/{pid}/stat"], timeout=10, check=False)
    return res.stdout if res.ok else None


def _stat_state(stat: str) -> str | None:
    """Takes the text of /proc/PID/stat. Returns its state letter (R, S, T for stopped by a
    signal, Z for a zombie...), or None when the text has none."""
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[0] if fields else None


def _running(node: Node, pid: int) -> bool:
    """Takes a node and a pid on it. Returns False when that process has exited (gone, or a
    zombie not yet reaped); True while it runs."""
    stat = _proc_stat(node, pid)
    return stat is not None and _stat_state(stat) != "Z"


def atoms(term: str) -> list[str]:
    """Takes the text of an Erlang list of atoms as erl_call prints it. Returns the atoms."""
    return [quoted or bare for quoted, bare in _ATOM.findall(term.strip().strip("[]"))]


def _parallel(fn: Callable[[Node], T], nodes: Sequence[Node]) -> list[T]:
    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as ex:
        return list(ex.map(fn, nodes))


class RabbitBroker:
    """RabbitMQ on a set of nodes, each driven through its Remote.

    Takes the nodes, a BrokerConfig, and the directory on each host under
    which per-node directories are made (`<data_root>/<node>`). The cluster's
    Erlang cookie is drawn fresh here and written only into each node's home,
    mode 0400: anyone holding it who reaches a node's distribution port can
    run code there, so it is never part of the spec, test.json or a report.
    """

    def __init__(self, nodes: Sequence[Node], config: BrokerConfig, data_root: str,
                 launcher: Launcher | None = None) -> None:
        self.nodes = tuple(nodes)
        self.config = config
        self.data_root = data_root
        self.release = release(config.rabbitmq)
        # How broker commands reach the release's binaries; the backend provides it before the
        # nodes start (`use`), as it may first have to build a root filesystem.
        self.launcher: Launcher = launcher or HostLauncher()
        self._cookie = secrets.token_hex(24).upper()
        self._epmd: dict[str, int] = {}
        # The nodes form_cluster had to join by hand: they did not join at boot.
        self.joined_by_hand: tuple[str, ...] = ()

    # -- paths and CLI -------------------------------------------------------------

    def use(self, launcher: Launcher) -> None:
        """Takes the launcher the backend provides for this release; call before `start_all`."""
        self.launcher = launcher

    def paths(self, node: Node) -> NodePaths:
        """Returns the node's paths."""
        return NodePaths(f"{self.data_root}/{node.name}")

    def data_dir(self, node: Node) -> str:
        """Returns the node's RABBITMQ_MNESIA_BASE (clusters.base.DataDirs)."""
        return self.paths(node).mnesia

    def ctl(
        self, node: Node, *args: str, timeout: float = CLI_TIMEOUT, check: bool = True,
        tool: str = "rabbitmqctl",
    ) -> str:
        """Runs a broker CLI tool against the node, from the node. Returns its stdout.

        Raises CommandTimeout past the timeout (the call is killed), RemoteError on failure.
        """
        argv = self._command(tool, "-n", node.erlang_name, *args)
        return node.remote.run(argv, timeout=timeout, env=self._env(node), check=check).stdout

    def _command(self, tool: str, *args: str) -> list[str]:
        """Takes a broker script's name and its arguments. Returns the command that runs it
        from the launcher's home, or the release's own."""
        home = self.launcher.home
        return self.launcher.wrap([f"{home}/bin/{tool}" if home else f"{RABBIT_BIN}/{tool}",
                                   *args])

    def _env(self, node: Node) -> dict[str, str]:
        """Takes a node. Returns the environment its broker and CLI calls run with."""
        env = node_env(node, self.paths(node))
        home = self.launcher.home
        return env | scripts_env(home) if home else env

    def erl_call(self, node: Node, module: str, function: str, args: str = "[]",
                 timeout: float = ERL_CALL_TIMEOUT) -> str | None:
        """Applies module:function(args...) on the node with erl_call (args: the text of an
        Erlang list of the arguments). Returns the result as the text of an Erlang term, or
        None when there is none: the node is not up (yet), did not answer within the timeout,
        or the call failed there (`{badrpc, ...}`). Raises ErlCallUnavailable when the node's
        Erlang runtime has no erl_call."""
        argv = self.launcher.wrap(["sh", "-c", ERL_CALL_SH, "sh", "-name", node.erlang_name,
                                   "-timeout", str(max(1, round(timeout))),
                                   "-a", f"{module} {function} {args}"])
        try:
            res = node.remote.run(argv, timeout=timeout + 5, env=self._env(node), check=False)
        except CommandTimeout:
            return None
        if res.returncode == 127:
            raise ErlCallUnavailable(f"{node.name}: no erl_call ({res.stderr.strip()[-200:]})")
        out = res.stdout.strip()
        return out if res.ok and out and not out.startswith("{badrpc") else None

    # -- lifecycle -------------------------------------------------------------------

    def configure(self, node: Node) -> None:
        """Writes the node's config, plugins file, cookie and empty env file; starts its epmd."""
        p = self.paths(node)
        r = node.remote
        seed = self.nodes[0]
        peers = [] if node.name == seed.name else [seed.erlang_name]
        r.write_file(p.config_file, render_config(self.config, node.ip, peers))
        r.write_file(f"{p.etc}/enabled_plugins", f"[{','.join(ENABLED_PLUGINS)}].\n")
        r.write_file(f"{p.etc}/rabbitmq-env.conf", "")
        r.write_file(f"{p.etc}/advanced.config", render_advanced_config(node.ip, self.config))
        r.write_file(f"{p.home}/.erlang.cookie", self._cookie, mode=0o400)
        r.run(["mkdir", "-p", p.mnesia, p.log_dir], timeout=10)
        if node.name not in self._epmd:
            # Our own epmd per node, started by us so teardown can end it by pid.
            # It listens on the node's address (and loopback, which epmd always adds) only.
            self._epmd[node.name] = r.spawn(
                ["epmd"], env={"HOME": p.home, "ERL_EPMD_ADDRESS": node.ip},
                log_path=f"{p.log_dir}/epmd.out"
            )

    def start(self, node: Node, timeout: float = 120.0) -> None:
        """Starts the node's broker and waits until the rabbit app runs. Raises BrokerError."""
        self.wait_booted(node, timeout, self._spawn(node))

    def _spawn(self, node: Node) -> int:
        """Takes a configured node. Starts its broker; returns the pid it was started as."""
        p = self.paths(node)
        node.remote.run(["rm", "-f", p.pid_file], timeout=10)
        return node.remote.spawn(
            self._command("rabbitmq-server"),
            env=self._env(node),
            log_path=f"{p.log_dir}/startup.out",
        )

    def wait_booted(self, node: Node, timeout: float = 120.0, pid: int | None = None) -> None:
        """Takes a node and the pid its broker was started as, if known. Waits until the broker
        has booted: the node asked with erl_call to await its own boot for up to AWAIT_MS
        (rabbit:await_startup/1, which looks every 100 ms inside the node: no CPU to speak of
        while the nodes boot, where `rabbitmqctl wait` is an Erlang VM per node), again every
        BOOT_POLL s while its distribution is not up yet, whether the started process still
        runs every ALIVE_EVERY s; or `rabbitmqctl wait` where the node's runtime has no
        erl_call, or where erl_call has had no answer at all (the node's distribution starts
        within a second or two of its VM) for ERL_CALL_GRACE s while the process runs. Raises
        BrokerError past the timeout, or once the started process has exited."""
        self._await(node, time.monotonic() + timeout, pid, booted=True)

    def wait_answering(self, node: Node, timeout: float, pid: int | None = None) -> None:
        """Takes a node, how long to wait and the pid its broker was started as. Waits until
        its VM answers erl_call at all (its distribution is up: the VM runs; its broker may
        still be booting), or, where its runtime has no erl_call or it never answers, until it
        has booted (`rabbitmqctl wait`). Raises BrokerError as wait_booted does."""
        self._await(node, time.monotonic() + timeout, pid, booted=False)

    def _await(self, node: Node, deadline: float, pid: int | None, booted: bool) -> None:
        """Waits until the node has booted (booted) or answers erl_call at all (not booted);
        see wait_booted. Raises BrokerError past the deadline, or once `pid` has exited."""
        started = time.monotonic()
        answered = False
        next_alive_check = started
        while True:
            try:
                answer = (self.erl_call(node, "rabbit", "await_startup", f"[{AWAIT_MS}]")
                          if booted else self.erl_call(node, "erlang", "is_alive"))
            except ErlCallUnavailable:
                self._wait_booted_cli(node, deadline)
                return
            if answer == "ok" or (answer is not None and not booted):
                return
            answered = answered or answer is not None
            now = time.monotonic()
            if not answered and now - started >= ERL_CALL_GRACE:
                log.info("%s: no answer from erl_call; waiting with rabbitmqctl", node.name)
                self._wait_booted_cli(node, deadline)
                return
            if pid is not None and now >= next_alive_check:
                next_alive_check = now + ALIVE_EVERY
                if not _running(node, pid):
                    out = node.remote.read_file(f"{self.paths(node).log_dir}/startup.out")
                    raise BrokerError(f"{node.name} did not boot: its broker exited "
                                      f"({died_joining(out) or 'see its startup.out'})")
            if now >= deadline:
                raise BrokerError(f"{node.name} did not boot within {deadline - started:.0f}s")
            if answer is None:  # not up yet; an answer has already waited in the node
                time.sleep(BOOT_POLL)

    def _wait_booted_cli(self, node: Node, deadline: float) -> None:
        timeout = max(1.0, deadline - time.monotonic())
        try:
            self.ctl(node, "wait", "--timeout", str(int(timeout)), self.paths(node).pid_file,
                     timeout=timeout + 15)
        except RemoteError as e:
            raise BrokerError(f"{node.name} did not boot within {timeout:.0f}s: {e}") from e

    def start_all(self, timeout: float = 120.0) -> None:
        """Configures and starts every node in parallel; the others join the first as they boot
        (peer discovery). A fresh cluster holds nothing yet, so one whose first boot failed
        boots once more from empty databases, its first node alone before the others: 3.10 can
        refuse a join while the first node is still enabling its feature flags (the joining
        node dies with schema_integrity_check_failed, and the first node may then die too, with
        incompatible_feature_flags, "All replicas on diskfull nodes are not active yet"), and
        a first node that is up before anyone joins it leaves no such window. A release whose
        peer discovery would have a joiner select itself (Release.joiners_wait_for_first)
        starts its first node before the others every time: the others start once it has
        booted, or, where the release says a running first node is enough
        (Release.joiners_start_when_first_answers), once its VM answers, and boot while it
        does. Raises BrokerError when the second boot fails as well."""
        try:
            if self.release.joiners_start_when_first_answers:
                self._boot_after_first_answers(timeout)
            elif self.release.joiners_wait_for_first:
                self._boot(self.nodes[0], timeout)
                _parallel(lambda n: self._boot(n, timeout), self.nodes[1:])
            else:
                _parallel(lambda n: self._boot(n, timeout), self.nodes)
        except BrokerError as e:
            first = self.nodes[0]
            log.warning("the cluster's first boot failed (%s); booting it once more from empty "
                        "databases, %s alone first", e, first.name)
            _parallel(self._wipe, self.nodes)
            self._boot(first, timeout)
            _parallel(lambda n: self._boot(n, timeout), self.nodes[1:])

    def _boot(self, node: Node, timeout: float) -> None:
        self.configure(node)
        self.start(node, timeout)

    def _boot_after_first_answers(self, timeout: float) -> None:
        """Starts the first node and, while its VM comes up, configures the others; once it
        answers, starts them, and waits until every node has booted (each within `timeout` of
        its start). Raises BrokerError."""
        first = self.nodes[0]
        self.configure(first)
        started = time.monotonic()
        pid = self._spawn(first)

        def prepare(n: Node) -> None:
            if n is first:
                self.wait_answering(first, timeout, pid)
            else:
                self.configure(n)
        _parallel(prepare, self.nodes)
        left = max(1.0, timeout - (time.monotonic() - started))

        def boot(n: Node) -> None:
            if n is first:
                self.wait_booted(first, left, pid)
            else:
                self.start(n, timeout)
        _parallel(boot, self.nodes)

    def _wipe(self, node: Node) -> None:
        """Kills the node's broker, keeps the output of the boot that failed beside the next
        one's (startup.first-boot.out, with died_joining's reason in the log) and empties
        its database."""
        self.kill(node)
        p = self.paths(node)
        out = f"{p.log_dir}/startup.out"
        log.info("%s's first boot: %s", node.name,
                 died_joining(node.remote.read_file(out)) or "no reason in its output")
        node.remote.run(["mv", "-f", out, f"{p.log_dir}/startup.first-boot.out"], timeout=10,
                        check=False)
        if not node.remote.run(["rm", "-rf", p.mnesia], timeout=30, check=False).ok:
            # A mountpoint (the unsynced layer, clusters.local.layers) is emptied but stays.
            node.remote.run(["find", p.mnesia, "-mindepth", "1", "-delete"], timeout=30)

    def form_cluster(self, timeout: float = 60.0) -> bool:
        """Makes sure every node is in the first one's cluster. The nodes found each other as
        they booted (peer discovery); a node that did not is joined by hand (stop_app,
        join_cluster, start_app), so the cluster forms either way. Returns True when every
        node had joined at boot and the statuses read to see it were healthy (every node
        running, seeing all the others, no partition): the cluster needs no further health
        check (about a second of CLI calls) before its first use."""
        seed = self.nodes[0]
        read = self._formation_statuses()
        statuses = dict(zip((n.name for n in self.nodes), read, strict=True))
        joined = [n for n in self.nodes[1:] if seed.erlang_name not in statuses[n.name].running_nodes]
        self.joined_by_hand = tuple(n.name for n in joined)
        for n in joined:
            log.info("%s did not join at boot; joining it to %s", n.name, seed.name)
            self.ctl(n, "stop_app", timeout=timeout)
            self.ctl(n, "join_cluster", seed.erlang_name, timeout=timeout)
            self.ctl(n, "start_app", timeout=timeout)
        log.info("cluster formed: %s (%s)", ", ".join(n.erlang_name for n in self.nodes),
                 f"joined by hand: {', '.join(n.name for n in joined)}" if joined
                 else "every node joined at boot")
        return not joined and healthy(read, (n.erlang_name for n in self.nodes))

    def beam_pid(self, node: Node) -> int | None:
        """Returns the pid of the node's beam from its pid file while that process runs: None
        when it is gone or a zombie not yet reaped (`kill -0` succeeds on a zombie, so a beam
        just killed would still count as alive)."""
        text = node.remote.read_file(self.paths(node).pid_file)
        if not text or not text.strip().isdigit():
            return None
        pid = int(text.strip())
        return pid if _running(node, pid) else None

    def _signal(self, node: Node, sig: str) -> int | None:
        pid = self.beam_pid(node)
        if pid is not None:
            node.remote.run(["kill", f"-{sig}", str(pid)], timeout=10, check=False)
        return pid

    def kill(self, node: Node) -> None:
        """SIGKILLs the node's beam and waits until it has exited (gone, or a zombie not yet
        reaped); raises RemoteError when it still runs 15 s later."""
        self._await_state(node, self._signal(node, "KILL"), "exited", lambda s: s == "Z",
                          timeout=15.0)

    def pause(self, node: Node) -> None:
        """SIGSTOPs the node's beam and waits until every thread of it has stopped (a signal
        is delivered asynchronously: a beam read at once may still be running)."""
        self._await_state(node, self._signal(node, "STOP"), "stopped", lambda s: s in "Tt")

    def resume(self, node: Node) -> None:
        """SIGCONTs the node's beam and waits until it runs again."""
        self._await_state(node, self._signal(node, "CONT"), "running again",
                          lambda s: s not in "Tt")

    def _await_state(self, node: Node, pid: int | None, what: str,
                     reached: Callable[[str], bool], timeout: float = 10.0) -> None:
        """Waits until the process's state letter (R, S, T, Z...) is one `reached` accepts.
        Returns at once when there is no process or its state cannot be read (a process
        gone is past every state waited for); raises RemoteError, naming `what` was waited
        for and the state seen, when it has not been reached within the timeout."""
        deadline = time.monotonic() + timeout
        while pid is not None:
            stat = _proc_stat(node, pid)
            state = _stat_state(stat) if stat is not None else None
            if state is None or reached(state):
                return
            if time.monotonic() >= deadline:
                raise RemoteError(f"{node.name}: beam {pid} not {what} but in state {state} "
                                  f"{timeout:.0f} s after its signal")
            time.sleep(0.05)

    def stop(self, node: Node) -> None:
        """Stops the node's broker gracefully; kills it if it will not stop in time."""
        try:
            self.ctl(node, "stop", timeout=60)
        except RemoteError as e:
            log.warning("graceful stop of %s failed (%s); killing it", node.name, e)
        self.kill(node)

    def restart_app(self, node: Node, timeout: float = 60.0) -> None:
        """Runs stop_app then start_app on the node (the gentle recovery)."""
        self.ctl(node, "stop_app", timeout=timeout)
        self.ctl(node, "start_app", timeout=timeout)

    def stop_all(self) -> None:
        """Stops every running broker in parallel, quickly (used at teardown before logs are copied)."""
        def stop(n: Node) -> None:
            if self.beam_pid(n) is None:
                return
            self.resume(n)
            try:
                self.ctl(n, "stop", timeout=20)
            except RemoteError as e:
                log.info("stop of %s at teardown: %s", n.name, e)
        _parallel(stop, self.nodes)

    # -- observation -------------------------------------------------------------------

    def status(self, node: Node, timeout: float = 15.0) -> NodeStatus:
        """Returns the node's cluster_status; a node that does not answer is not running."""
        try:
            out = self.ctl(node, "cluster_status", "--formatter", "json", timeout=timeout)
        except CommandTimeout:
            return NodeStatus(node.erlang_name, False, error="cluster_status timed out")
        except RemoteError as e:
            return NodeStatus(node.erlang_name, False, error=str(e)[-300:])
        return parse_cluster_status(node.erlang_name, out)

    def statuses(self, timeout: float = 15.0) -> list[NodeStatus]:
        """Returns every node's status, asked in parallel."""
        return _parallel(lambda n: self.status(n, timeout), self.nodes)

    def quick_status(self, node: Node) -> NodeStatus | None:
        """Returns the node's view of the cluster as `status` gives it (the nodes running,
        those it is partitioned from, its alarms as the broker prints them), asked with
        erl_call: three calls of a few milliseconds (two where the release's status reports
        no partitions, Release.partitions_call). None when one gives no answer. Raises
        ErlCallUnavailable when the node's runtime has no erl_call."""
        running = self.erl_call(node, "rabbit_nodes", "all_running")
        asks = self.release.partitions_call
        partitioned = self.erl_call(node, *asks) if asks else "[]"
        alarms = self.erl_call(node, "rabbit_alarm", "get_alarms")
        if running is None or partitioned is None or alarms is None:
            return None
        apart = atoms(partitioned)
        return NodeStatus(node.erlang_name, True, frozenset(atoms(running)),
                          {node.erlang_name: apart} if apart else {},
                          () if alarms == "[]" else (alarms,))

    def _formation_statuses(self) -> list[NodeStatus]:
        """Returns every node's view for form_cluster: asked with erl_call while the cluster
        has just booted (its CPU is still the nodes'), with the CLI (`status`) for a node whose
        erl_call gives no answer or where there is none."""
        def one(node: Node) -> NodeStatus:
            try:
                quick = self.quick_status(node)
            except ErlCallUnavailable:
                quick = None
            return quick or self.status(node)
        return _parallel(one, self.nodes)

    def versions(self) -> dict[str, Any]:
        """Returns what the first node reports: the RabbitMQ and Erlang versions, the release line
        asked for (with its caveat, where the release table gives one), the metadata store in
        use and the enabled feature flags (keys missing when the node would not say: those
        from the first question it would not answer on, in that order). The three CLI calls
        run at once: each is an Erlang VM of its own, mostly starting up."""
        n = self.nodes[0]
        out: dict[str, Any] = {"release": self.release.line}
        if self.release.caveat:
            out["caveat"] = self.release.caveat
        with ThreadPoolExecutor(max_workers=3) as ex:
            version = ex.submit(self.ctl, n, "version", timeout=20)
            erlang = ex.submit(self.ctl, n, "erlang_version", tool="rabbitmq-diagnostics",
                               timeout=20)
            listed = ex.submit(self.ctl, n, "list_feature_flags", "--silent", "--formatter",
                               "json", "name", "state", timeout=20)
        try:
            out["rabbitmq"] = version.result().strip()
            erl = erlang.result()
            out["erlang"] = erl.strip().splitlines()[-1] if erl.strip() else ""
            flags = enabled_flags(listed.result())
            out["metadata_store"] = "khepri" if KHEPRI_FLAG in flags else DEFAULT_METADATA_STORE
            out["feature_flags"] = flags
        except (RemoteError, ValueError) as e:
            log.warning("could not read versions: %s", e)
        return out

    def enable_metadata_store(self, timeout: float = 120.0) -> bool:
        """Switches the formed cluster to the configured metadata store: Khepri through its
        feature flag (it migrates Mnesia's records); Mnesia, the default, needs nothing.
        Returns whether it switched (a switched cluster's health is checked again). Raises
        RemoteError when the broker refuses."""
        if self.config.store == self.release.default_metadata_store:
            return False
        self.ctl(self.nodes[0], "enable_feature_flag", "--experimental", KHEPRI_FLAG,
                 timeout=timeout)
        log.info("metadata store: khepri (feature flag %s enabled)", KHEPRI_FLAG)
        return True

    def read_logs(self, node: Node) -> dict[str, str]:
        """Takes a node. Returns each file of its log directory, by name, as it is now (best
        effort: a file that cannot be read is left out): the same files, by the same names,
        that collect_logs copies into the run's nodes/<node>/."""
        p = self.paths(node)
        listing = node.remote.run(["ls", "-1", p.log_dir], timeout=10, check=False)
        texts = {}
        for name in listing.stdout.split():
            text = node.remote.read_file(f"{p.log_dir}/{name}")
            if text is not None:
                texts[name] = text
        return texts

    def collect_logs(self, dest: Path) -> None:
        """Copies each node's log directory and config into dest/<node>/ (best effort)."""
        for n in self.nodes:
            out = dest / n.name
            out.mkdir(parents=True, exist_ok=True)
            texts = self.read_logs(n)
            config = self.paths(n).config_file
            text = n.remote.read_file(config)
            if text is not None:
                texts[Path(config).name] = text
            for name, text in texts.items():
                (out / name).write_text(text, encoding="utf-8")
