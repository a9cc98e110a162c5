"""End-to-end runs on the SSH and Docker backends, their bad inputs, and nothing left behind.

SSH: three OpenSSH servers in the project's own test namespaces (rmqs-n1..n3 on
10.214.0.0/24, tests/clusters/ssh/sshd.py), each a broker host reached as root with
a test key; they share this machine's filesystem, so each node's files live in
its own directory under /var/tmp/rmqh-<run>/. Docker: a daemon started for the
module when none runs (stopped by its pid), the image built by
scripts/build-docker-image.sh when missing (a few minutes; nothing is pulled).
After every test: no broker process, iptables chain, data directory or run
record of the SSH backend, no container or network labelled rmqh=1.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.docker.cluster import LABEL, connect
from clusters.docker.dockerd import dockerd_running
from clusters.remote import run_local
from history import read_history
from tests.clusters.ssh.sshd import SSHD, SshdHost, exclusive, sshd_hosts, write_inventory
from tests.docker_image import ensure_image
from tests.integration.conftest import ROOT, harness

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SSH_DATA_MARKER = b"HOME=/var/tmp/rmqh-"


def _run_dir(proc: subprocess.CompletedProcess[str]) -> Path:
    line = [x for x in proc.stdout.splitlines() if x.startswith("run directory: ")][-1]
    return Path(line.removeprefix("run directory: "))


def _partitions(run: Path) -> list[dict]:
    ops = read_history(run / "history.jsonl")
    return [o.value for o in ops if o.process == "nemesis" and o.f == "start-partition"
            and o.type == "info"]


def _assert_run_dir(run: Path, backend: str) -> None:
    test = json.loads((run / "test.json").read_text())
    assert test["spec"]["backend"]["kind"] == backend
    assert test["versions"]["rabbitmq"].startswith("3.")
    assert sorted(p.name for p in (run / "nodes").iterdir()) == ["n1", "n2", "n3"]
    for n in ("n1", "n2", "n3"):
        logs = [f for f in (run / "nodes" / n).iterdir() if f.suffix == ".log"]
        assert logs and any(f.stat().st_size > 0 for f in logs), n
    assert "cookie" not in (run / "test.json").read_text().lower()


# ---------------------------------------------------------------- SSH


def ssh_leftovers(hosts: list[SshdHost]) -> list[str]:
    """Returns what SSH-backend runs left: broker processes (HOME under /var/tmp/rmqh-), our
    chains in the hosts' namespaces, data directories, run records."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(v.startswith(SSH_DATA_MARKER) for v in env.split(b"\0")):
            found.append(f"pid {proc.name}")
    for h in hosts:
        rules = run_local(["ip", "netns", "exec", h.namespace, "iptables", "-S"], timeout=10,
                          check=False).stdout
        if "RMQH" in rules:
            found.append(f"iptables chains in {h.namespace}")
    found += [str(p) for p in Path("/var/tmp").glob("rmqh-*")]
    found += [str(p) for p in (ROOT / ".state" / "backends").glob("ssh-*.json")]
    return found


@pytest.fixture(scope="module")
def ssh(tmp_path_factory) -> Iterator[tuple[Path, list[SshdHost]]]:
    if not os.path.exists(SSHD):
        pytest.skip(f"{SSHD} is not installed")
    d = tmp_path_factory.mktemp("ssh-backend")
    with exclusive(), sshd_hosts(d, 3) as hosts:
        inv = write_inventory(d / "inventory.toml", hosts, known_hosts=hosts[0].known_hosts)
        yield inv, hosts


@pytest.fixture
def ssh_nothing_left(ssh) -> Iterator[None]:
    yield
    left = ssh_leftovers(ssh[1])
    if left:
        harness("clean")
    assert not left, f"the SSH backend left: {left}"


@pytest.mark.usefixtures("ssh_nothing_left")
def test_ssh_healthy_run_finds_nothing(ssh, tmp_path):
    inv, _ = ssh
    proc = harness("run", "--backend", "ssh", "--inventory", str(inv), "--scenario", "healthy",
                   "--time-limit", "20", "--store", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run = _run_dir(proc)
    _assert_run_dir(run, "ssh")
    results = json.loads((run / "results.json").read_text())
    assert results["valid"] is True and results["queue"]["lost_count"] == 0


@pytest.mark.usefixtures("ssh_nothing_left")
def test_ssh_partition_run_end_to_end(ssh, tmp_path):
    inv, hosts = ssh
    proc = harness("run", "--backend", "ssh", "--inventory", str(inv), "--scenario",
                   "partition", "--time-limit", "40", "--nemesis-interval", "5",
                   "--nemesis-duration", "12", "--seed", "7", "--store", str(tmp_path))
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-3000:]
    run = _run_dir(proc)
    _assert_run_dir(run, "ssh")
    parts = _partitions(run)
    assert parts and set(parts[0]["grudge"]) <= {"n1", "n2", "n3"}
    test = json.loads((run / "test.json").read_text())
    assert test["nodes"] == {f"n{i}": h.ip for i, h in enumerate(hosts, start=1)}


@pytest.mark.usefixtures("ssh_nothing_left")
def test_ssh_run_killed_half_way_then_clean_leaves_nothing(ssh, tmp_path):
    inv, hosts = ssh
    proc = _start(tmp_path, "--backend", "ssh", "--inventory", str(inv))
    _wait_for_partition(tmp_path, proc)
    proc.kill()
    proc.communicate(timeout=30)
    assert ssh_leftovers(hosts), "expected brokers and chains left after SIGKILL"
    clean = harness("clean")
    assert clean.returncode == 0, clean.stderr
    assert ssh_leftovers(hosts) == []


@pytest.mark.usefixtures("ssh_nothing_left")
def test_ssh_bad_inputs_exit_2_naming_the_cause_before_anything_starts(ssh, tmp_path):
    inv, hosts = ssh
    p = harness("run", "--backend", "ssh", "--scenario", "healthy")
    assert p.returncode == 2 and "needs --inventory" in p.stderr
    p = harness("run", "--backend", "ssh", "--inventory", str(tmp_path / "nope.toml"))
    assert p.returncode == 2 and "no such file" in p.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[[host]]\naddres = '10.214.0.11'\n")
    p = harness("run", "--backend", "ssh", "--inventory", str(bad))
    assert p.returncode == 2 and "unknown key(s) addres" in p.stderr
    # n2's key missing from known_hosts: refused, naming n2, before any broker starts.
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(x for x in Path(hosts[0].known_hosts).read_text().splitlines(True)
                          if not x.startswith(hosts[1].ip + " ")))
    inv2 = write_inventory(tmp_path / "inv2.toml", hosts, known_hosts=str(kh))
    p = harness("run", "--backend", "ssh", "--inventory", str(inv2), "--scenario", "healthy",
                "--time-limit", "10", "--store", str(tmp_path / "store"))
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert f"n2 (root@{hosts[1].ip}:22)" in p.stdout + p.stderr
    assert "not in known_hosts" in p.stdout + p.stderr
    runs = list((tmp_path / "store").glob("*/*/history.jsonl"))
    assert not runs or not _partitions(runs[0].parent)


# ---------------------------------------------------------------- Docker


def docker_leftovers() -> list[str]:
    """Returns the containers and networks labelled rmqh=1."""
    api = connect()
    try:
        f = {"label": [f"{LABEL}=1"]}
        return ([c["Names"][0] for c in api.containers(all=True, filters=f)]
                + [n["Name"] for n in api.networks(filters=f)])
    finally:
        api.close()


@pytest.fixture(scope="module")
def docker(tmp_path_factory) -> Iterator[None]:
    if shutil.which("dockerd") is None:
        pytest.skip("dockerd is not installed (make setup installs docker.io)")
    with dockerd_running(tmp_path_factory.mktemp("dockerd") / "dockerd.log"):
        ensure_image()
        yield


@pytest.fixture
def docker_nothing_left(docker) -> Iterator[None]:
    yield
    left = docker_leftovers()
    if left:
        harness("clean")
    assert not left, f"the Docker backend left: {left}"


@pytest.mark.usefixtures("docker_nothing_left")
def test_docker_partition_run_end_to_end(tmp_path):
    proc = harness("run", "--backend", "docker", "--scenario", "partition", "--time-limit", "40",
                   "--nemesis-interval", "5", "--nemesis-duration", "12", "--seed", "11",
                   "--store", str(tmp_path))
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-3000:]
    run = _run_dir(proc)
    _assert_run_dir(run, "docker")
    parts = _partitions(run)
    assert parts and set(parts[0]["grudge"]) <= {"n1", "n2", "n3"}
    assert docker_leftovers() == []


@pytest.mark.usefixtures("docker_nothing_left")
def test_docker_run_killed_half_way_then_clean_leaves_nothing(tmp_path):
    proc = _start(tmp_path, "--backend", "docker")
    _wait_for_partition(tmp_path, proc)
    proc.kill()
    proc.communicate(timeout=30)
    assert docker_leftovers(), "expected containers left after SIGKILL"
    clean = harness("clean")
    assert clean.returncode == 0, clean.stderr
    assert docker_leftovers() == []


@pytest.mark.usefixtures("docker_nothing_left")
def test_docker_missing_image_and_stopped_daemon_exit_2(tmp_path):
    p = harness("run", "--backend", "docker", "--docker-image", "rmqh/absent:0", "--scenario",
                "healthy", "--time-limit", "10", "--store", str(tmp_path))
    assert p.returncode == 2
    assert "rmqh/absent:0 is not present locally and is never pulled" in p.stdout + p.stderr
    env_host = "unix:///nonexistent/docker.sock"
    p = subprocess.run([sys.executable, "-m", "harness", "run", "--backend", "docker",
                        "--scenario", "healthy", "--time-limit", "10", "--store", str(tmp_path)],
                       cwd=ROOT, env={**os.environ, "DOCKER_HOST": env_host},
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2
    assert f"Docker daemon is not running or not reachable at {env_host}" in p.stdout + p.stderr


# ---------------------------------------------------------------- Spark


def test_a_spark_master_that_does_not_answer_exits_2_at_once(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "harness" / "fixtures" / "run", run)
    t0 = time.monotonic()
    p = harness("check", str(run), "--spark-master", f"spark://127.0.0.1:{port}")
    assert p.returncode == 2
    assert f"Spark master spark://127.0.0.1:{port} does not answer" in p.stderr
    assert time.monotonic() - t0 < 60


# ---------------------------------------------------------------- helpers


def _start(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "--scenario", "partition", "--time-limit", "120",
         "--nemesis-interval", "2", "--nemesis-duration", "30", "--store", str(tmp_path),
         *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_partition(tmp_path: Path, proc: subprocess.Popen[str],
                        timeout: float = 240) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        for h in tmp_path.glob("*/*/history.jsonl"):
            text = h.read_text()
            if '"phase":"main","state":"start"' in text and '"start-partition"' in text:
                return h.parent
        time.sleep(1)
    proc.send_signal(signal.SIGKILL)
    pytest.fail("the run never reached its main phase")
