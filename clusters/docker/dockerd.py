"""Starting a Docker daemon for the Docker backend when none runs, and stopping it by pid.

`start_dockerd` runs Debian's `dockerd` with the host's firewall and routing
left alone: `--iptables=false` (dockerd would otherwise set the FORWARD
policy to DROP, which with br_netfilter cuts the local backend's bridge),
`--ip-forward=false` and no default bridge (`--bridge=none`). The backend's
own network is user-defined and internal; the host reaches its containers
over that bridge directly, and nothing is routed out. Used by the tests and
by hand (README, Backends); the harness itself never starts a daemon.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from clusters.backend import BackendError
from clusters.remote import spawn_local

log = logging.getLogger(__name__)

DOCKERD_ARGS: Final = ("--iptables=false", "--ip-forward=false", "--bridge=none",
                       "--log-level=warn")


def dockerd_argv(dockerd: str = "dockerd") -> list[str]:
    """Returns the argv of a daemon that leaves the host's firewall and forwarding alone."""
    return [dockerd, *DOCKERD_ARGS]


def daemon_answers(timeout: int = 5) -> bool:
    """Returns whether a Docker daemon answers (DOCKER_HOST or the local socket)."""
    from clusters.docker.cluster import connect

    try:
        api = connect(timeout=timeout)
    except BackendError:
        return False
    api.close()
    return True


def start_dockerd(log_path: Path, wait_s: float = 60.0) -> int:
    """Takes a log path. Starts dockerd detached and waits until it answers. Returns its pid.

    Raises BackendError when dockerd is not installed or does not answer in time (it is then
    stopped again).
    """
    exe = shutil.which("dockerd")
    if exe is None:
        raise BackendError("dockerd is not installed (apt-get install docker.io)")
    pid = spawn_local(dockerd_argv(exe), log_path=str(log_path))
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if daemon_answers(timeout=2):
            log.info("dockerd started, pid %d", pid)
            return pid
        time.sleep(0.5)
    stop_dockerd(pid)
    raise BackendError(f"dockerd (pid {pid}) did not answer within {wait_s:.0f}s; see {log_path}")


def stop_dockerd(pid: int, wait_s: float = 30.0) -> None:
    """Takes the pid start_dockerd returned. Stops that daemon (SIGTERM, then SIGKILL after
    wait_s) and reaps it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child: watch the pid instead
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            done = 0
        if done:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


@contextlib.contextmanager
def dockerd_running(log_path: Path) -> Iterator[int | None]:
    """Takes a log path. Yields None when a daemon already answers; else starts one, yields its
    pid and stops it by that pid afterwards."""
    if daemon_answers():
        yield None
        return
    pid = start_dockerd(log_path)
    try:
        yield pid
    finally:
        stop_dockerd(pid)
