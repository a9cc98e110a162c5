"""Fixtures for real-cluster tests: root is required, and nothing may be left behind."""

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def leftovers() -> list[str]:
    """Returns what of the project is still on the machine: namespaces, links, broker processes."""
    found = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [line.split()[0] for line in ns.splitlines() if line.startswith("rmqh-")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [line.split(":")[1].strip() for line in links.splitlines()
              if line.split(":")[1].strip().startswith("rmqh-")]
    found += [f"pid {pid}" for pid in project_processes()]
    return found


def project_processes() -> list[int]:
    """Returns the pids of live processes (beam.smp, epmd, ...) whose HOME is a node directory of
    the project's state: the brokers a run started, in or out of a namespace."""
    marker = f"HOME={ROOT / '.state'}/".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(v.startswith(marker) for v in env.split(b"\0")):
            pids.append(int(proc.name))
    return pids


def harness(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """Runs `python -m harness ARGS` from the project root. Returns the finished process."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(autouse=True)
def _root():
    if os.geteuid() != 0:
        pytest.fail("integration tests need root (network namespaces, iptables)")


@pytest.fixture
def nothing_left() -> Iterator[None]:
    """Fails the test when, after it, anything of the project is left on the machine."""
    yield
    left = leftovers()
    if left:
        harness("clean")
    assert not left, f"a run left things behind: {left}"
