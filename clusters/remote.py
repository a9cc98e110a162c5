"""One way to run commands on a node, whatever the node is.

A `Remote` runs an argument list on one node with a hard timeout, starts
long-lived processes detached, and reads and writes files. The local
network-namespace cluster, SSH hosts and Docker containers each implement it;
the broker lifecycle and every nemesis act only through it. Commands are
argument lists, never shell strings.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from clusters.errors import ClusterError


class RemoteError(ClusterError, RuntimeError):
    """A command could not be run or exited non-zero where success was required."""


class CommandTimeout(RemoteError):
    """A command ran past its hard timeout and was killed."""


@dataclass(frozen=True)
class CommandResult:
    """What a finished command left: its argv, exit code and output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """Returns True when the command exited 0."""
        return self.returncode == 0

    def check(self) -> CommandResult:
        """Returns self when ok, else raises RemoteError with the output."""
        if not self.ok:
            raise RemoteError(
                f"{' '.join(self.argv)} exited {self.returncode}: "
                f"{(self.stderr or self.stdout).strip()[-2000:]}"
            )
        return self


@runtime_checkable
class Remote(Protocol):
    """Runs commands on one node."""

    name: str

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        stdin: str | None = None,
    ) -> CommandResult:
        """Takes an argv and a hard timeout in seconds. Returns its result.

        Raises CommandTimeout when the timeout passes (the command is killed),
        RemoteError when `check` and the exit code is non-zero.
        """
        ...

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, log_path: str
    ) -> int:
        """Starts a long-lived process detached, output appended to log_path.

        Returns its pid as seen on the node.
        """
        ...

    def write_file(self, path: str, content: str, mode: int = 0o644) -> None:
        """Writes a text file on the node, making parent directories."""
        ...

    def read_file(self, path: str) -> str | None:
        """Returns the text of a file on the node, or None when it does not exist."""
        ...


def run_local(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    stdin: str | None = None,
) -> CommandResult:
    """Runs argv on this host in its own process group, killing the whole group on timeout.

    Takes the same arguments as Remote.run; `env` is added to this process's environment.
    Returns the CommandResult; raises CommandTimeout or RemoteError.
    """
    full_env = None if env is None else {**os.environ, **env}
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            text=True,
            start_new_session=True,
        )
    except OSError as e:
        raise RemoteError(f"cannot run {argv[0]}: {e}") from e
    try:
        out, err = proc.communicate(input=stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        # Broker CLI calls hang while a partition is undetected: kill the group.
        _kill_group(proc.pid)
        out, err = proc.communicate()
        raise CommandTimeout(f"{' '.join(argv)} timed out after {timeout:.0f}s") from None
    result = CommandResult(tuple(argv), proc.returncode, out, err)
    return result.check() if check else result


def spawn_local(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, log_path: str
) -> int:
    """Starts argv on this host detached (new session), output appended to log_path.

    Returns its pid. The caller owns the process and must end it by that pid.
    """
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    full_env = None if env is None else {**os.environ, **env}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
        )
    return proc.pid


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


class LocalRemote:
    """A Remote for this host itself (used by the netns cluster's host side and tests)."""

    def __init__(self, name: str = "localhost") -> None:
        self.name = name

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        stdin: str | None = None,
    ) -> CommandResult:
        """Runs argv on this host; see Remote.run."""
        return run_local(argv, timeout=timeout, env=env, check=check, stdin=stdin)

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, log_path: str
    ) -> int:
        """Starts argv detached on this host; see Remote.spawn."""
        return spawn_local(argv, env=env, log_path=log_path)

    def write_file(self, path: str, content: str, mode: int = 0o644) -> None:
        """Writes a file on this host; see Remote.write_file."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content, encoding="utf-8")
        os.chmod(p, mode)

    def read_file(self, path: str) -> str | None:
        """Reads a file on this host; see Remote.read_file."""
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return None
