"""Tests of the Docker backend with a fake Engine API (the SDK's low-level client): what is
made, labelled and removed, every failure a clear BackendError, and DockerRemote's exec, spawn
and file transfer (a real daemon: test_real.py)."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Callable
from typing import Any

import pytest
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from clusters.backend import BackendError, BackendOptions
from clusters.docker.cluster import DockerCluster, clean, connect, container_name, node_ips
from clusters.docker.remote import DockerRemote, exec_argv
from clusters.remote import CommandTimeout, RemoteError
from clusters.ssh.remote import REMOTE_GRACE

Exec = Callable[[list[str]], tuple[int, bytes, bytes]]


class FakeAPI:
    """A stand-in for docker.APIClient keeping containers, networks and execs in memory."""

    def __init__(self, images: tuple[str, ...] = ("rmqh/rabbitmq:3.10-local",),
                 execute: Exec | None = None) -> None:
        self.images = set(images)
        self.containers_: dict[str, dict[str, Any]] = {}
        self.networks_: dict[str, dict[str, Any]] = {}
        self.execs: dict[str, dict[str, Any]] = {}
        self.files: dict[tuple[str, str], bytes] = {}
        self.commands: list[tuple[str, list[str]]] = []
        self.execute = execute or (lambda words: (0, b"", b""))
        self.closed = False

    # images, networks, containers
    def inspect_image(self, image: str) -> dict[str, Any]:
        if image not in self.images:
            raise ImageNotFound(f"No such image: {image}")
        return {"Id": image}

    def networks(self, names=None, filters=None) -> list[dict[str, Any]]:
        out = list(self.networks_.values())
        if names:
            out = [n for n in out if n["Name"] in names]
        return [n for n in out if _match(n["Labels"], filters)]

    def inspect_network(self, net_id: str) -> dict[str, Any]:
        return self.networks_[net_id]

    def create_network(self, name, driver=None, ipam=None, internal=False, labels=None,
                       check_duplicate=None) -> dict[str, Any]:
        subnet = ipam["Config"][0]["Subnet"]
        self.networks_[name] = {"Id": name, "Name": name, "Labels": labels or {},
                                "Internal": internal, "IPAM": {"Config": [{"Subnet": subnet}]}}
        return {"Id": name}

    def remove_network(self, net_id: str) -> None:
        self.networks_.pop(net_id)

    def create_host_config(self, **kw: Any) -> dict[str, Any]:
        return kw

    def create_networking_config(self, cfg: dict[str, Any]) -> dict[str, Any]:
        return cfg

    def create_endpoint_config(self, **kw: Any) -> dict[str, Any]:
        return kw

    def create_container(self, image, command=None, name=None, hostname=None, labels=None,
                         host_config=None, networking_config=None, use_config_proxy=True):
        if name in self.containers_:
            raise APIError(f"Conflict. The container name /{name} is already in use")
        self.containers_[name] = {"Id": name, "Names": [f"/{name}"], "Labels": labels or {},
                                  "Image": image, "Command": command, "Hostname": hostname,
                                  "HostConfig": host_config, "Net": networking_config,
                                  "Running": False, "Proxy": use_config_proxy}
        return {"Id": name}

    def start(self, cid: str) -> None:
        self.containers_[cid]["Running"] = True

    def containers(self, all=False, filters=None) -> list[dict[str, Any]]:
        return [c for c in self.containers_.values() if _match(c["Labels"], filters)]

    def remove_container(self, cid: str, force=False, v=False) -> None:
        if cid not in self.containers_:
            raise NotFound("gone")
        del self.containers_[cid]

    def logs(self, cid: str, stdout=True, stderr=True) -> bytes:
        return b"container output\n"

    # exec and files
    def exec_create(self, cid, cmd, stdout=True, stderr=True, user=""):
        if cid not in self.containers_:
            raise NotFound(f"No such container: {cid}")
        eid = f"e{len(self.execs)}"
        self.execs[eid] = {"cid": cid, "cmd": cmd, "user": user}
        self.commands.append((cid, cmd))
        return {"Id": eid}

    def exec_start(self, eid, demux=False):
        code, out, err = self.execute(self.execs[eid]["cmd"])
        self.execs[eid]["code"] = code
        return (out, err)

    def exec_inspect(self, eid):
        return {"ExitCode": self.execs[eid].get("code")}

    def put_archive(self, cid, path, data) -> bool:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for m in tar:
                f = tar.extractfile(m)
                assert f is not None
                self.files[(cid, f"{path}/{m.name}")] = f.read()
                self.files[(cid, f"mode:{path}/{m.name}")] = oct(m.mode).encode()
        return True

    def get_archive(self, cid, path):
        if (cid, path) not in self.files:
            raise NotFound(f"Could not find the file {path}")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            data = self.files[(cid, path)]
            info = tarfile.TarInfo(path.rsplit("/", 1)[-1])
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        return iter([buf.getvalue()]), {}

    def close(self) -> None:
        self.closed = True


def _match(labels: dict[str, str], filters: dict[str, Any] | None) -> bool:
    for f in (filters or {}).get("label", []):
        k, _, v = f.partition("=")
        if labels.get(k) != v:
            return False
    return True


def _cluster(api: FakeAPI, n: int = 3, **opts: Any) -> DockerCluster:
    return DockerCluster(BackendOptions(kind="docker", **opts), n, "RUN1", connector=lambda: api)


# ---------------------------------------------------------------- pure parts


def test_node_addresses_come_from_the_subnet():
    assert node_ips("10.215.0.0/24", 3) == ["10.215.0.11", "10.215.0.12", "10.215.0.13"]
    assert container_name("n2") == "rmqh-n2"


def test_exec_argv_puts_the_container_s_timeout_past_ours():
    assert exec_argv(["rabbitmqctl", "status"], timeout=30, env={"HOME": "/h"}) == [
        "timeout", "--signal=KILL", f"{30 + REMOTE_GRACE:.1f}", "env", "HOME=/h",
        "rabbitmqctl", "status"]
    with pytest.raises(ValueError):
        exec_argv("ls -l", timeout=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        exec_argv(["ls"], timeout=0)


# ---------------------------------------------------------------- the cluster


def test_create_makes_a_labelled_internal_network_and_containers_never_pulling():
    api = FakeAPI()
    c = _cluster(api)
    assert [(n.name, n.ip) for n in c.nodes] == [("n1", "10.215.0.11"), ("n2", "10.215.0.12"),
                                                 ("n3", "10.215.0.13")]
    c.create()
    net = api.networks_["rmqh-net"]
    assert net["Internal"] and net["Labels"] == {"rmqh": "1", "rmqh.run": "RUN1"}
    assert sorted(api.containers_) == ["rmqh-n1", "rmqh-n2", "rmqh-n3"]
    n2 = api.containers_["rmqh-n2"]
    assert n2["Running"] and n2["Hostname"] == "n2" and n2["Command"] == ["sleep", "infinity"]
    assert n2["Labels"] == {"rmqh": "1", "rmqh.run": "RUN1", "rmqh.node": "n2"}
    assert n2["HostConfig"] == {"cap_add": ["NET_ADMIN"], "init": True,
                                "network_mode": "rmqh-net"}
    assert n2["Net"] == {"rmqh-net": {"ipv4_address": "10.215.0.12"}}
    assert n2["Proxy"] is False
    assert not hasattr(api, "pull")  # there is nothing to pull with
    c.destroy()
    assert api.containers_ == {} and api.networks_ == {}


def test_a_missing_image_is_named_with_how_to_build_it():
    api = FakeAPI(images=())
    with pytest.raises(BackendError, match="image rmqh/rabbitmq:3.10-local is not present "
                                           "locally and is never pulled.*build-docker-image"):
        _cluster(api).create()
    assert api.containers_ == {} and api.networks_ == {}


def test_a_daemon_that_does_not_answer_is_named(monkeypatch):
    import docker

    def refuse(**kw: Any) -> Any:
        raise DockerException("Error while fetching server API version: Connection refused")

    monkeypatch.setattr(docker, "APIClient", refuse)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(BackendError, match="Docker daemon is not running or not reachable at "
                                           "unix:///nonexistent/docker.sock"):
        connect()
    c = DockerCluster(BackendOptions(kind="docker"), 3, "R")
    with pytest.raises(BackendError, match="not running"):
        c.create()
    with pytest.raises(RemoteError, match="not connected"):
        c.nodes[0].remote.read_file("/x")
    c.destroy()  # nothing was made: nothing to do


def test_an_image_without_the_tools_is_refused_and_nothing_is_left():
    def execute(words: list[str]) -> tuple[int, bytes, bytes]:
        if "command -v" in " ".join(words):
            return 0, b"iptables\ntc\n", b""
        return 0, b"", b""

    api = FakeAPI(execute=execute)
    with pytest.raises(BackendError, match="lacks iptables, tc"):
        _cluster(api).create()
    assert api.containers_ == {} and api.networks_ == {}


def test_an_image_without_rabbitmq_is_refused():
    api = FakeAPI(execute=lambda w: (3, b"", b"") if "readlink" in " ".join(w) else (0, b"", b""))
    with pytest.raises(BackendError, match="has no rabbitmq-server"):
        _cluster(api).create()
    assert api.containers_ == {}


def test_leftovers_of_the_project_are_removed_first_and_by_clean():
    api = FakeAPI()
    api.create_container("x", name="rmqh-n1", labels={"rmqh": "1", "rmqh.run": "OLD"})
    api.create_container("x", name="someone-else", labels={"app": "db"})
    api.create_network("old-net", ipam={"Config": [{"Subnet": "10.9.0.0/24"}]},
                       labels={"rmqh": "1", "rmqh.run": "OLD"})
    c = _cluster(api)
    c.create()
    assert "old-net" not in api.networks_ and "someone-else" in api.containers_
    assert api.containers_["rmqh-n1"]["Labels"]["rmqh.run"] == "RUN1"
    out = clean(__import__("pathlib").Path("/nonexistent"), connector=lambda: api)
    assert sorted(out) == ["docker: container rmqh-n1", "docker: container rmqh-n2",
                           "docker: container rmqh-n3", "docker: network rmqh-net"]
    assert list(api.containers_) == ["someone-else"] and api.closed


def test_clean_without_a_daemon_has_nothing_to_do():
    def down() -> Any:
        raise BackendError("the Docker daemon is not running")

    assert clean(__import__("pathlib").Path("/x"), connector=down) == []


def test_an_existing_network_is_used_only_with_the_subnet_asked_for():
    api = FakeAPI()
    api.create_network("shared", ipam={"Config": [{"Subnet": "10.215.0.0/24"}]}, labels={})
    c = _cluster(api, docker_network="shared")
    c.create()
    c.destroy()
    assert "shared" in api.networks_  # not ours to remove
    api.create_network("other", ipam={"Config": [{"Subnet": "172.30.0.0/16"}]}, labels={})
    with pytest.raises(BackendError, match="network other exists with subnet.*172.30.0.0/16"):
        _cluster(api, docker_network="other").create()


def test_fetch_logs_adds_each_container_s_output(tmp_path):
    api = FakeAPI()
    c = _cluster(api, n=1)
    c.create()

    class Broker:
        def collect_logs(self, dest):
            (dest / "n1").mkdir(parents=True)
            (dest / "n1" / "rabbit.log").write_text("log")

    c.fetch_logs(Broker(), tmp_path)
    assert (tmp_path / "n1" / "rabbit.log").read_text() == "log"
    assert (tmp_path / "n1" / "container.log").read_text() == "container output\n"


# ---------------------------------------------------------------- the remote


def _remote(api: FakeAPI) -> DockerRemote:
    api.create_container("img", name="rmqh-n1")
    return DockerRemote("n1", "rmqh-n1", lambda: api)


def test_run_returns_exit_code_and_both_streams_and_checks():
    api = FakeAPI(execute=lambda w: (3, b"out", b"err"))
    r = _remote(api)
    res = r.run(["false"], timeout=5, check=False, env={"A": "1"})
    assert (res.argv, res.returncode, res.stdout, res.stderr) == (("false",), 3, "out", "err")
    assert api.commands[-1][1][-3:] == ["env", "A=1", "false"]
    assert api.execs["e0"]["user"] == "root"
    with pytest.raises(RemoteError, match="exited 3"):
        r.run(["false"], timeout=5)


def test_run_gives_up_at_its_deadline():
    api = FakeAPI(execute=lambda w: (time.sleep(3), (0, b"", b""))[1])
    r = _remote(api)
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout, match="timed out after 1s on n1"):
        r.run(["sleep", "10"], timeout=1)
    assert time.monotonic() - t0 < 2


def test_stdin_goes_through_a_file_that_is_removed():
    api = FakeAPI()
    r = _remote(api)
    r.run(["cat"], timeout=5, stdin="hello")
    words = api.commands[-1][1]
    assert words[:2] == ["sh", "-c"] and words[-1] == "cat"
    path = words[4]
    assert path.startswith("/tmp/rmqh-stdin-") and api.files[("rmqh-n1", path)] == b"hello"
    assert "rm -f" in words[2]


def test_spawn_returns_the_pid_printed_and_refuses_garbage():
    api = FakeAPI(execute=lambda w: (0, b"123\n", b""))
    r = _remote(api)
    assert r.spawn(["epmd"], env={"HOME": "/h"}, log_path="/l/epmd.out") == 123
    words = api.commands[-1][1]
    assert words[:2] == ["sh", "-c"] and "setsid nohup env HOME=/h epmd" in words[2]
    api.execute = lambda w: (0, b"no pid\n", b"")
    with pytest.raises(RemoteError, match="printed no pid"):
        r.spawn(["epmd"], log_path="/l/x")


def test_files_round_trip_with_their_mode_and_a_missing_one_is_none():
    api = FakeAPI()
    r = _remote(api)
    r.write_file("/var/lib/rmqh/n1/home/.erlang.cookie", "COOKIE", mode=0o400)
    assert api.commands[-1][1][-3:] == ["mkdir", "-p", "/var/lib/rmqh/n1/home"]
    assert r.read_file("/var/lib/rmqh/n1/home/.erlang.cookie") == "COOKIE"
    assert api.files[("rmqh-n1", "mode:/var/lib/rmqh/n1/home/.erlang.cookie")] == b"0o400"
    assert r.read_file("/nope") is None


def test_a_gone_container_is_a_remote_error():
    api = FakeAPI()
    r = DockerRemote("n1", "rmqh-n1", lambda: api)
    with pytest.raises(RemoteError, match="No such container"):
        r.run(["true"], timeout=5)


def test_destroy_survives_a_daemon_that_died_mid_run():
    api = FakeAPI()
    c = _cluster(api, n=1)
    c.create()

    def gone(**kw: Any) -> list[dict[str, Any]]:
        raise APIError("the daemon went away")

    api.containers = gone  # type: ignore[method-assign]
    c.destroy()  # logged; `make clean` removes the rest
