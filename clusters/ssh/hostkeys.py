"""What the SSH backend does with a host key that known_hosts lacks: refuse it, or accept it once.

Keys already in known_hosts are checked by paramiko itself: a host presenting a
different key fails with BadHostKeyException, whatever the policy here. These
policies decide only about hosts known_hosts does not name. `RejectUnknown`
(the default) refuses with a message that names the host, the key's SHA256
fingerprint and the file; `AcceptNew` (`--accept-new-host-keys`, OpenSSH's
`StrictHostKeyChecking=accept-new`) trusts the key and appends it to the file,
so the next run checks it.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import threading
from pathlib import Path

import paramiko  # type: ignore[import-untyped]  # no stubs in .venv

from clusters.errors import ClusterError

log = logging.getLogger(__name__)

_APPEND_LOCK = threading.Lock()


class UnknownHostKey(ClusterError, paramiko.SSHException):  # type: ignore[misc]
    """A host's key is not in known_hosts and new keys are not accepted."""


def fingerprint(key: paramiko.PKey) -> str:
    """Takes a public key. Returns its OpenSSH-style fingerprint, SHA256:<base64>."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_line(hostname: str, key: paramiko.PKey) -> str:
    """Takes the host name paramiko checks ("host" or "[host]:port") and its key. Returns the
    known_hosts line for it."""
    return f"{hostname} {key.get_name()} {key.get_base64()}\n"


class RejectUnknown(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
    """Refuses a host known_hosts does not name, saying how to trust it."""

    def __init__(self, known_hosts: str) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        """Raises UnknownHostKey naming the host, its key and the known_hosts file."""
        raise UnknownHostKey(
            f"host key of {hostname} ({key.get_name()} {fingerprint(key)}) is not in "
            f"known_hosts ({self.known_hosts}); check the fingerprint and add it "
            f"(ssh-keyscan), or pass --accept-new-host-keys"
        )


class AcceptNew(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
    """Trusts a host known_hosts does not name and appends its key to the file."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        """Adds the key to the client's keys and to the known_hosts file."""
        client.get_host_keys().add(hostname, key.get_name(), key)
        with _APPEND_LOCK:
            self.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(self.known_hosts, "a", encoding="utf-8") as fh:
                fh.write(known_hosts_line(hostname, key))
        log.warning("accepted the new host key of %s (%s %s) into %s", hostname,
                    key.get_name(), fingerprint(key), self.known_hosts)


def default_known_hosts() -> Path:
    """Returns the user's known_hosts file, ~/.ssh/known_hosts."""
    return Path(os.path.expanduser("~/.ssh/known_hosts"))


def policy_for(known_hosts: Path, accept_new: bool) -> paramiko.MissingHostKeyPolicy:
    """Takes the known_hosts file and whether new keys are accepted. Returns the policy; for
    accept-new, the file is made (empty) when missing so it can be loaded."""
    if accept_new:
        if not known_hosts.exists():
            known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            known_hosts.touch(mode=0o600)
        return AcceptNew(known_hosts)
    return RejectUnknown(str(known_hosts))
