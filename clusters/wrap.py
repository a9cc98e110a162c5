"""Remotes made by wrapping another Remote: privileged tools through sudo, spawns recorded.

Behaviour is combined by wrapping, as Jepsen composes nemeses: the SSH backend
gives each node `TrackingRemote(SudoRemote(SshRemote(...)))` when the host
asks for sudo, so the broker lifecycle and the nemeses, which only call
`Remote`, run unchanged on it.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from clusters.remote import CommandResult, Remote, RemoteError

log = logging.getLogger(__name__)

# The tools a nemesis or the installer needs root for. The broker itself, epmd, the broker
# CLI, kill (of our own processes) and file access run as the SSH user.
PRIVILEGED: Final = frozenset({
    "iptables", "ip6tables", "iptables-save", "iptables-restore", "tc", "ip", "apt-get",
    "dpkg", "systemctl",
})


def sudo_argv(argv: Sequence[str], env: Mapping[str, str] | None) -> list[str]:
    """Takes an argv and its environment. Returns them as one argv under `sudo -n` (never
    prompting: a host that wants a password fails at once). sudo resets the environment, so a
    given one is set inside it with `env K=V`."""
    prefix = ["sudo", "-n", "--"]
    if env:
        prefix += ["env", *(f"{k}={v}" for k, v in env.items())]
    return [*prefix, *argv]


class SudoRemote:
    """A Remote that runs the PRIVILEGED tools through `sudo -n` on the wrapped Remote."""

    def __init__(self, inner: Remote, privileged: frozenset[str] = PRIVILEGED) -> None:
        self.inner = inner
        self.name = inner.name
        self.privileged = privileged

    def needs_sudo(self, argv: Sequence[str]) -> bool:
        """Takes an argv. Returns whether its program is one of the privileged tools."""
        return bool(argv) and posixpath.basename(argv[0]) in self.privileged

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        stdin: str | None = None,
    ) -> CommandResult:
        """Runs argv on the wrapped Remote, through sudo when privileged; see Remote.run."""
        if self.needs_sudo(argv):
            return self.inner.run(sudo_argv(argv, env), timeout=timeout, check=check,
                                  stdin=stdin)
        return self.inner.run(argv, timeout=timeout, env=env, check=check, stdin=stdin)

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, log_path: str
    ) -> int:
        """Starts argv as the wrapped Remote's user; see Remote.spawn."""
        return self.inner.spawn(argv, env=env, log_path=log_path)

    def write_file(self, path: str, content: str, mode: int = 0o644) -> None:
        """Writes a file as the wrapped Remote's user; see Remote.write_file."""
        self.inner.write_file(path, content, mode)

    def read_file(self, path: str) -> str | None:
        """Reads a file as the wrapped Remote's user; see Remote.read_file."""
        return self.inner.read_file(path)


class TrackingRemote:
    """A Remote that reports the pid of every process it spawns (so a cleanup after a killed
    run can end them by pid) and otherwise passes every call through."""

    def __init__(self, inner: Remote, on_spawn: Callable[[str, int], None]) -> None:
        self.inner = inner
        self.name = inner.name
        self.on_spawn = on_spawn
        self.closed: str | None = None

    def close(self, reason: str) -> None:
        """Makes every later call fail at once with RemoteError(reason): after a failed
        provisioning, teardown should not wait on hosts known to be unusable."""
        self.closed = reason

    def _gate(self) -> None:
        if self.closed is not None:
            raise RemoteError(f"{self.name}: {self.closed}")

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        stdin: str | None = None,
    ) -> CommandResult:
        """Runs argv on the wrapped Remote; see Remote.run."""
        self._gate()
        return self.inner.run(argv, timeout=timeout, env=env, check=check, stdin=stdin)

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, log_path: str
    ) -> int:
        """Starts argv on the wrapped Remote and reports (node name, pid). Returns the pid."""
        self._gate()
        pid = self.inner.spawn(argv, env=env, log_path=log_path)
        self.on_spawn(self.name, pid)
        return pid

    def write_file(self, path: str, content: str, mode: int = 0o644) -> None:
        """Writes a file on the wrapped Remote; see Remote.write_file."""
        self._gate()
        self.inner.write_file(path, content, mode)

    def read_file(self, path: str) -> str | None:
        """Reads a file on the wrapped Remote; see Remote.read_file."""
        self._gate()
        return self.inner.read_file(path)
