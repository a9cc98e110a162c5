"""The Docker backend: one container per broker node on a user-defined bridge network.

`DockerCluster.create` connects to the daemon (DOCKER_HOST or the local socket),
checks that the image is present locally (nothing is ever pulled: containers
are created, never `run`, which would pull), makes the network (subnet from
the options, nodes at .11, .12, ...; `internal`, so nothing routes out) and
one container per node: the image's `sleep infinity` under `docker-init`
(which reaps what the broker leaves), hostname = node name, NET_ADMIN so the
nemesis's iptables and tc work inside, and a resolv.conf that fails lookups
at once (no name server answers there; peers are addresses and /etc/hosts
names the node itself). The broker lifecycle then runs
unchanged through `DockerRemote` (docker exec), kill and pause included: they
signal the beam by its pid file, as on every backend, rather than freezing the
whole container with `docker pause` (which would also stop epmd and every
exec, a different fault).

The image must hold Debian's broker layout: /usr/lib/rabbitmq/bin/rabbitmq-server
and rabbitmqctl (an image whose rabbitmq-server is elsewhere on the PATH, such
as the official one under /opt/rabbitmq/sbin, gets a symlink made there), plus
epmd, iptables, tc, timeout, setsid, nohup, kill. scripts/build-docker-image.sh
builds such an image from Debian's packages.

Everything made carries the label rmqh=1 (and rmqh.run=<run id>), which is how
`destroy` and `clean` (for `make clean`) find it.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from pathlib import Path
from typing import Any, Final

from clusters.backend import (
    DEFAULT_DOCKER_IMAGE,
    Backend,
    BackendConfigError,
    BackendError,
    BackendOptions,
    LogCollector,
    ManagedCluster,
)
from clusters.base import Node, node_named
from clusters.rabbitmq import RABBIT_BIN
from clusters.releases import DEFAULT_LINE, RELEASES, HostLauncher, Launcher, Release
from clusters.remote import RemoteError

log = logging.getLogger(__name__)

KIND: Final = "docker"
LABEL: Final = "rmqh"
RUN_LABEL: Final = "rmqh.run"
NODE_LABEL: Final = "rmqh.node"
DATA_DIR: Final = "/var/lib/rmqh"
# The HTTP read timeout of one API call. A command's own limit is enforced by DockerRemote (and
# the container's `timeout`); this only has to outlast the longest command (a broker boot wait).
API_TIMEOUT = 600
CONNECT_TIMEOUT = 10
MAX_POOL = 32
TOOLS: Final = ("epmd", "iptables", "tc", "timeout", "setsid", "nohup", "kill", "ls", "mkdir",
                "rm", "sh")
_ADAPT_SCRIPT = (
    'b=$1; [ -x "$b/rabbitmq-server" ] && exit 0; s=$(command -v rabbitmq-server) || exit 3; '
    'mkdir -p "$(dirname "$b")" && ln -s "$(dirname "$(readlink -f "$s")")" "$b"'
)
_RESOLV_SCRIPT = "printf 'nameserver 127.0.0.1\\noptions timeout:1 attempts:1\\n' > /etc/resolv.conf"
_MISSING_SCRIPT = 'for t in "$@"; do command -v "$t" >/dev/null 2>&1 || echo "$t"; done'


def container_name(node: str) -> str:
    """Takes a node name. Returns its container's name."""
    return f"rmqh-{node}"


def node_ips(subnet: str, n: int) -> list[str]:
    """Takes the network's subnet and a node count. Returns the nodes' addresses (.11 on).
    Raises BackendConfigError when the subnet is invalid or too small."""
    try:
        net = ipaddress.IPv4Network(subnet)
    except ValueError as e:
        raise BackendConfigError(f"invalid --docker-subnet {subnet!r}: {e}") from e
    if net.num_addresses < n + 13:
        raise BackendConfigError(f"--docker-subnet {subnet} is too small for {n} nodes")
    return [str(net.network_address + 11 + i) for i in range(n)]


def labels(run_id: str, node: str | None = None) -> dict[str, str]:
    """Takes a run id and optionally a node. Returns the labels of what the backend makes."""
    out = {LABEL: "1", RUN_LABEL: run_id}
    if node is not None:
        out[NODE_LABEL] = node
    return out


def connect(timeout: int = API_TIMEOUT) -> Any:
    """Returns a low-level API client of the daemon DOCKER_HOST names (default the local socket),
    its API version negotiated. Raises BackendError when no daemon answers."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError as e:  # pragma: no cover - docker is in requirements.txt
        raise BackendError(f"the docker SDK is not installed: {e}") from e
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        kwargs = docker.utils.kwargs_from_env()
        api = docker.APIClient(version="auto", timeout=timeout, max_pool_size=MAX_POOL,
                               **kwargs)
        api.ping()
        return api
    except (DockerException, OSError) as e:
        raise BackendError(f"the Docker daemon is not running or not reachable at {where} "
                           f"(start dockerd; see README, Backends): {e}") from e


def default_image(line: str) -> str:
    """Takes a release line. Returns the image scripts/build-docker-image.sh builds for it."""
    return f"rmqh/rabbitmq:{line}-local"


class DockerCluster:
    """Broker nodes in Docker containers (the docker backend's ManagedCluster)."""

    kind = KIND
    data_root = DATA_DIR

    def __init__(self, options: BackendOptions, nodes: int, run_id: str,
                 connector: Any = connect) -> None:
        self.options = options
        self.run_id = run_id
        # The image the nodes run: the one named, else the release line's own (`launcher`).
        self.image = options.docker_image
        self._line = DEFAULT_LINE
        self._connector = connector
        self._api: Any = None
        self._made_network = False
        from clusters.docker.remote import DockerRemote  # imports paramiko's module: lazily

        ips = node_ips(options.docker_subnet, nodes)
        self.nodes: tuple[Node, ...] = tuple(
            Node(f"n{i}", ip, DockerRemote(f"n{i}", container_name(f"n{i}"), self.api))
            for i, ip in enumerate(ips, start=1)
        )

    def api(self) -> Any:
        """Returns the connected API client. Raises RemoteError before `create` connected."""
        if self._api is None:
            raise RemoteError("the Docker cluster is not connected (create failed or not run)")
        return self._api

    def node(self, name: str) -> Node:
        """Returns the node called `name`; KeyError when there is none."""
        return node_named(self.nodes, name)

    def create(self) -> None:
        """Connects, checks the image, removes the project's leftovers, makes the network and
        the containers and checks the image's layout. Raises BackendError (after removing
        what it made) when any step fails."""
        from docker.errors import DockerException, ImageNotFound

        self._api = self._connector()
        image = self.image
        try:
            self._api.inspect_image(image)
        except ImageNotFound:
            build = ("scripts/build-docker-image.sh" if self._line == DEFAULT_LINE
                     else f"scripts/build-docker-image.sh --rabbitmq {self._line}")
            raise BackendError(
                f"Docker image {image} is not present locally and is never pulled: build it "
                f"with {build}, or name a local image (--docker-image)"
            ) from None
        except (DockerException, OSError) as e:
            raise BackendError(f"cannot inspect Docker image {image}: {e}") from e
        try:
            removed = remove_labelled(self._api)
            if removed:
                log.info("removed Docker leftovers: %s", ", ".join(removed))
            self._make_network()
            for n in self.nodes:
                self._make_container(n)
            for n in self.nodes:
                self._check_layout(n)
        except (DockerException, OSError, RemoteError) as e:
            self.destroy()
            if isinstance(e, BackendError):
                raise
            raise BackendError(f"Docker cluster could not be created: {e}") from e
        log.info("docker cluster on %s (%s): %s", self.options.docker_network,
                 self.options.docker_subnet,
                 ", ".join(f"{n.name}={n.ip}" for n in self.nodes))

    def _make_network(self) -> None:
        api, name, subnet = self._api, self.options.docker_network, self.options.docker_subnet
        found = api.networks(names=[name])
        found = [x for x in found if x.get("Name") == name]
        if found:
            configs = (api.inspect_network(found[0]["Id"]).get("IPAM") or {}).get("Config") or []
            if subnet not in [c.get("Subnet") for c in configs]:
                raise BackendError(
                    f"Docker network {name} exists with subnet(s) "
                    f"{', '.join(str(c.get('Subnet')) for c in configs) or 'none'}, not "
                    f"{subnet}: name another (--docker-network) or give its subnet "
                    f"(--docker-subnet)")
            log.info("using the existing Docker network %s", name)
            return
        from docker.types import IPAMConfig, IPAMPool

        ipam = IPAMConfig(pool_configs=[IPAMPool(
            subnet=subnet, gateway=str(ipaddress.IPv4Network(subnet).network_address + 1))])
        api.create_network(name, driver="bridge", ipam=ipam, internal=True,
                           labels=labels(self.run_id), check_duplicate=True)
        self._made_network = True

    def _make_container(self, n: Node) -> None:
        api, net = self._api, self.options.docker_network
        host_config = api.create_host_config(cap_add=["NET_ADMIN"], init=True,
                                             network_mode=net)
        networking = api.create_networking_config(
            {net: api.create_endpoint_config(ipv4_address=n.ip)})
        c = api.create_container(
            self.image, command=["sleep", "infinity"],
            name=container_name(n.name), hostname=n.name, labels=labels(self.run_id, n.name),
            host_config=host_config, networking_config=networking, use_config_proxy=False,
        )
        api.start(c["Id"])
        # No name server answers on this network (the daemon runs without iptables, so Docker's
        # embedded DNS is unreachable): make a lookup of a name /etc/hosts lacks fail at once
        # rather than hang the broker's or the CLI's resolver for seconds.
        n.remote.run(["sh", "-c", _RESOLV_SCRIPT], timeout=30)

    def _check_layout(self, n: Node) -> None:
        bin_dir = RABBIT_BIN
        res = n.remote.run(["sh", "-c", _ADAPT_SCRIPT, "sh", bin_dir], timeout=30, check=False)
        if not res.ok:
            raise BackendError(
                f"image {self.image} has no rabbitmq-server (not at "
                f"{bin_dir}/rabbitmq-server nor on the PATH); see README, Backends")
        missing = n.remote.run(["sh", "-c", _MISSING_SCRIPT, "sh", *TOOLS],
                               timeout=30).stdout.split()
        if missing:
            raise BackendError(f"image {self.image} lacks {', '.join(missing)} "
                               "(the harness runs them inside each container); build one with "
                               "scripts/build-docker-image.sh")

    def launcher(self, release: Release) -> Launcher:
        """Takes the release line asked for. Returns the image's own binaries: the image is
        the release (rmqh/rabbitmq:<line>-local unless --docker-image names another; the run
        checks the version its nodes report)."""
        self._line = release.line
        if self.options.docker_image == DEFAULT_DOCKER_IMAGE:
            self.image = default_image(release.line)
        return HostLauncher()

    def fetch_logs(self, broker: LogCollector, dest: Path) -> None:
        """Copies the brokers' logs out of the containers (tar archives) into dest/<node>/, and
        each container's own output as container.log."""
        broker.collect_logs(dest)
        if self._api is None:
            return
        for n in self.nodes:
            try:
                text = self._api.logs(container_name(n.name), stdout=True, stderr=True)
            except Exception as e:  # best effort, as collect_logs
                log.info("%s: no container log: %s", n.name, e)
                continue
            if text:
                (dest / n.name).mkdir(parents=True, exist_ok=True)
                (dest / n.name / "container.log").write_bytes(text)

    def destroy(self) -> None:
        """Removes this run's containers (forced) and the network if this run made it."""
        from docker.errors import DockerException

        if self._api is None:
            return
        try:
            for line in remove_labelled(self._api, self.run_id, networks=self._made_network):
                log.info("docker teardown: removed %s", line)
        except (DockerException, OSError) as e:
            log.warning("docker teardown failed (make clean removes the rest): %s", e)


def remove_labelled(api: Any, run_id: str | None = None, networks: bool = True) -> list[str]:
    """Takes an API client and optionally a run id. Removes the containers (forced) and, when
    `networks`, the networks labelled rmqh=1 (and rmqh.run=<run id> when given). Returns what
    went."""
    from docker.errors import DockerException, NotFound

    wanted = [f"{LABEL}=1"] + ([f"{RUN_LABEL}={run_id}"] if run_id else [])
    out: list[str] = []
    for c in api.containers(all=True, filters={"label": wanted}):
        name = (c.get("Names") or [c["Id"][:12]])[0].lstrip("/")
        try:
            api.remove_container(c["Id"], force=True, v=True)
            out.append(f"container {name}")
        except NotFound:
            pass
        except DockerException as e:
            log.warning("could not remove container %s: %s", name, e)
    if networks:
        for net in api.networks(filters={"label": wanted}):
            try:
                api.remove_network(net["Id"])
                out.append(f"network {net.get('Name')}")
            except NotFound:
                pass
            except DockerException as e:
                log.warning("could not remove network %s: %s", net.get("Name"), e)
    return out


# ---------------------------------------------------------------- registry record


def check(options: BackendOptions, nodes: int) -> None:
    """Takes options and a node count. Raises BackendConfigError for a bad subnet, image or
    network name. Reaches no daemon."""
    if options.inventory is not None:
        raise BackendConfigError("--inventory is an option of the ssh backend, not docker")
    node_ips(options.docker_subnet, nodes)
    if not options.docker_image.strip():
        raise BackendConfigError("--docker-image must name an image")
    if not options.docker_network.strip():
        raise BackendConfigError("--docker-network must name a network")


def make(options: BackendOptions, nodes: int, run_id: str, state_dir: Path) -> ManagedCluster:
    """Takes options, a node count, the run's id and the state directory (unused: labels find
    leftovers). Returns the Docker cluster, not yet created."""
    return DockerCluster(options, nodes, run_id)


def clean(state_dir: Path, connector: Any = None) -> list[str]:
    """Removes every container and network labelled rmqh=1 (a daemon that is not running has
    none to remove). Returns lines saying what went."""
    try:
        api = (connector or (lambda: connect(timeout=CONNECT_TIMEOUT)))()
    except BackendError as e:
        log.info("docker cleanup skipped: %s", e)
        return []
    try:
        return [f"docker: {x}" for x in remove_labelled(api)]
    finally:
        close = getattr(api, "close", None)
        if callable(close):
            close()


BACKEND = Backend(check=check, make=make, cleanup=clean, lines=tuple(RELEASES))
