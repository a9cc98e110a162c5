"""The local backend's Remote: commands run inside one network namespace on this machine.

`NetnsRemote` wraps every argv in `ip netns exec <namespace>`; files are this
machine's, so they move as `LocalRemote` moves them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from clusters.remote import CommandResult, LocalRemote, run_local, spawn_local


class NetnsRemote(LocalRemote):
    """A Remote that runs commands inside one network namespace on this host.

    The filesystem is the host's, so files are read and written as LocalRemote does.
    """

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace

    def _wrap(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *argv]

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        stdin: str | None = None,
    ) -> CommandResult:
        """Runs argv inside the namespace; see Remote.run."""
        res = run_local(self._wrap(argv), timeout=timeout, env=env, check=False, stdin=stdin)
        res = CommandResult(tuple(argv), res.returncode, res.stdout, res.stderr)
        return res.check() if check else res

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, log_path: str
    ) -> int:
        """Starts argv detached inside the namespace; `ip netns exec` execs, so the pid is argv's."""
        return spawn_local(self._wrap(argv), env=env, log_path=log_path)
