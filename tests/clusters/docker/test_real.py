"""Tests of the Docker backend against a real daemon and the locally built image, starting no
broker: containers on their network reach each other and the host, a killed process is reaped,
iptables and tc work inside, and nothing of the project is left afterwards.

A daemon is started for the module when none runs (and stopped by its pid); the module is
skipped when dockerd is missing; the image is built when absent (tests/docker_image.py).
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.backend import DEFAULT_DOCKER_IMAGE, BackendOptions
from clusters.docker.cluster import LABEL, clean, connect
from clusters.docker.dockerd import dockerd_running
from clusters.registry import make_cluster
from tests.docker_image import ensure_image

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def daemon(tmp_path_factory) -> Iterator[None]:
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        pytest.skip("needs root and dockerd (apt-get install docker.io)")
    with dockerd_running(tmp_path_factory.mktemp("dockerd") / "dockerd.log"):
        ensure_image()
        api = connect()
        try:
            assert api.images(name=DEFAULT_DOCKER_IMAGE), f"{DEFAULT_DOCKER_IMAGE} was not built"
        finally:
            api.close()
        yield


def _project_objects() -> list[str]:
    api = connect()
    try:
        f = {"label": [f"{LABEL}=1"]}
        return ([c["Names"][0] for c in api.containers(all=True, filters=f)]
                + [n["Name"] for n in api.networks(filters=f)])
    finally:
        api.close()


def test_containers_serve_as_nodes_and_leave_nothing(daemon, tmp_path):
    c = make_cluster(BackendOptions(kind="docker"), 2, "REAL1", tmp_path)
    c.create()
    try:
        n1, n2 = c.nodes
        assert n1.remote.run(["hostname"], timeout=10).stdout.strip() == "n1"
        r = n1.remote
        assert r.run(["cat"], timeout=10, stdin="in\n").stdout == "in\n"
        r.write_file("/var/lib/rmqh/x/cookie", "C", mode=0o400)
        assert r.read_file("/var/lib/rmqh/x/cookie") == "C"
        assert r.run(["stat", "-c", "%a", "/var/lib/rmqh/x/cookie"], timeout=10).stdout == "400\n"
        pid = r.spawn(["sleep", "600"], env={"HOME": "/h"}, log_path="/var/lib/rmqh/s.out")
        assert r.run(["kill", "-0", str(pid)], timeout=10, check=False).ok
        r.run(["kill", "-KILL", str(pid)], timeout=10)
        deadline = time.monotonic() + 5
        while r.run(["kill", "-0", str(pid)], timeout=10, check=False).ok:
            assert time.monotonic() < deadline, "the killed process was not reaped"
            time.sleep(0.1)
        epmd = n2.remote.spawn(["epmd"], log_path="/var/lib/rmqh/epmd.out")
        assert epmd > 1
        deadline = time.monotonic() + 10
        while True:  # the host reaches a node, as the workload's clients do
            try:
                socket.create_connection((n2.ip, 4369), timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        peer = ["timeout", "5", "bash", "-c", f"echo > /dev/tcp/{n2.ip}/4369"]
        assert r.run(peer, timeout=10, check=False).ok
        # A partition as the nemesis makes one, and its heal.
        for argv in (["iptables", "-w", "5", "-N", "RMQH-OUT"],
                     ["iptables", "-w", "5", "-I", "OUTPUT", "1", "-j", "RMQH-OUT"],
                     ["iptables", "-w", "5", "-A", "RMQH-OUT", "-d", n2.ip, "-j", "DROP"]):
            r.run(argv, timeout=10)
        assert not r.run(peer, timeout=10, check=False).ok
        r.run(["iptables", "-w", "5", "-F", "RMQH-OUT"], timeout=10)
        assert r.run(peer, timeout=10, check=False).ok
        assert r.run(["tc", "qdisc", "show", "dev", "eth0"], timeout=10).ok
        assert len(_project_objects()) == 3
    finally:
        c.destroy()
    assert _project_objects() == []


def test_clean_removes_what_a_killed_run_left(daemon, tmp_path):
    c = make_cluster(BackendOptions(kind="docker"), 1, "REAL2", tmp_path)
    c.create()  # and the controller dies: no destroy
    assert _project_objects() != []
    out = clean(Path("/nonexistent"))
    assert "docker: container rmqh-n1" in out and "docker: network rmqh-net" in out
    assert _project_objects() == []
