"""The SSH backend's inventory: which hosts run the brokers and how to log in to each (TOML).

```toml
known_hosts = "~/.ssh/known_hosts"   # optional (default: ~/.ssh/known_hosts and /etc/ssh/ssh_known_hosts)
connect_timeout = 10                 # optional, seconds
data_dir = "/var/tmp"                # optional: each run's broker files go in <data_dir>/rmqh-<run>

[defaults]                           # optional: any host field, for every host
user = "deploy"
key_file = "~/.ssh/id_ed25519"       # or agent = true: the SSH agent and default keys
sudo = true                          # iptables/tc/apt-get through `sudo -n`

[[host]]
name = "n1"                          # optional: n1..nN by position
address = "10.0.0.11"                # an IPv4 address or a DNS name (resolved to IPv4)
port = 22                            # optional

[[host]]
address = "10.0.0.12"
```

`load_inventory` reads and checks a file; `InventoryError` names the file and
the host for anything wrong: missing file, bad TOML, an unknown key (a typo
is never silently ignored), a bad address, port or user, a key file that does
not exist, names other than n1..nN. No secret belongs here: keys are paths,
passwords are not supported (use a key or the agent).
"""

from __future__ import annotations

import getpass
import ipaddress
import os
import re
import socket
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusters.backend import BackendConfigError

DEFAULT_DATA_DIR = "/var/tmp"
DEFAULT_CONNECT_TIMEOUT = 10.0

_TOP_KEYS = {"known_hosts", "connect_timeout", "data_dir", "defaults", "host"}
_HOST_KEYS = {"name", "address", "port", "user", "key_file", "agent", "sudo"}
_NODE = re.compile(r"n([1-9][0-9]*)\Z")
_DNS = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?\Z")
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\$?\Z")


class InventoryError(BackendConfigError):
    """An inventory file that cannot be used; the message names the file and the host."""


@dataclass(frozen=True)
class InventoryHost:
    """One host: its node name, address, SSH port and user, key file (None: agent and default
    keys) and whether privileged commands go through sudo."""

    name: str
    address: str
    port: int = 22
    user: str = "root"
    key_file: str | None = None
    sudo: bool = False

    @property
    def where(self) -> str:
        """Returns user@address:port, for messages."""
        return f"{self.user}@{self.address}:{self.port}"


@dataclass(frozen=True)
class Inventory:
    """A parsed inventory: hosts in node order (n1, n2, ...) and the settings for all."""

    path: str
    hosts: tuple[InventoryHost, ...]
    known_hosts: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    data_dir: str = DEFAULT_DATA_DIR

    def first(self, n: int) -> tuple[InventoryHost, ...]:
        """Returns the hosts of nodes n1..n<n>. Raises InventoryError when there are fewer."""
        if n > len(self.hosts):
            raise InventoryError(
                f"{self.path}: a {n}-node cluster needs {n} hosts, the inventory has "
                f"{len(self.hosts)}")
        return self.hosts[:n]


def _fail(path: str, where: str, why: str) -> InventoryError:
    return InventoryError(f"inventory {path}: {where}: {why}")


def _expand(p: str) -> str:
    return os.path.abspath(os.path.expanduser(p))


def _host(path: str, i: int, raw: Any, defaults: dict[str, Any]) -> InventoryHost:
    """Takes the inventory's path, the host's position, its [[host]] table and [defaults].
    Returns the InventoryHost. Raises InventoryError naming the host for the first field
    that is wrong, in the order the fields are read."""
    where = f"host #{i + 1}"
    if not isinstance(raw, dict):
        raise _fail(path, where, "each [[host]] must be a table")
    unknown = set(raw) - _HOST_KEYS
    if unknown:
        raise _fail(path, where, f"unknown key(s) {', '.join(sorted(unknown))}; "
                                 f"known: {', '.join(sorted(_HOST_KEYS))}")
    d = {**defaults, **raw}
    address = _address(path, where, d.get("address"))
    where = f"host #{i + 1} ({address})"
    name = raw.get("name", f"n{i + 1}")
    if not isinstance(name, str) or not _NODE.match(name):
        raise _fail(path, where, f"node name {name!r} must be n1, n2, ... (nemesis targets and "
                                 "queue options name nodes so)")
    port = d.get("port", 22)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise _fail(path, where, f"invalid port {port!r}")
    user = d.get("user", getpass.getuser())
    if not isinstance(user, str) or not _USER.match(user):
        raise _fail(path, where, f"invalid user {user!r}")
    agent = d.get("agent", False)
    sudo = d.get("sudo", False)
    if not isinstance(agent, bool) or not isinstance(sudo, bool):
        raise _fail(path, where, "agent and sudo are true or false")
    key_file = _key_file(path, where, d.get("key_file"), agent, "key_file" in raw)
    return InventoryHost(name, address, port, user, key_file, sudo)


def _address(path: str, where: str, address: Any) -> str:
    """Takes the inventory's path, the host's place and its address field. Returns the
    address. Raises InventoryError when it is missing or neither IPv4 nor a DNS name."""
    if not isinstance(address, str) or not address:
        raise _fail(path, where, "no address")
    try:
        ipaddress.IPv4Address(address)
    except ValueError:
        if not _DNS.match(address):
            raise _fail(path, f"{where} ({address})",
                        f"invalid address {address!r} (IPv4 or DNS name)") from None
    return address


def _key_file(path: str, where: str, key_file: Any, agent: bool, own: bool) -> str | None:
    """Takes the inventory's path, the host's place, its key_file (own: set in the host's
    table, not [defaults]) and agent. Returns the key file's absolute path, or None for the
    agent and default keys. Raises InventoryError for both, a bad or an unreadable one."""
    if key_file is None:
        return None
    if agent and own:
        raise _fail(path, where, "give key_file or agent = true, not both")
    if agent:
        return None  # the host asks for the agent over a default key file
    if not isinstance(key_file, str) or not key_file:
        raise _fail(path, where, f"invalid key_file {key_file!r}")
    key_file = _expand(key_file)
    if not os.access(key_file, os.R_OK):
        raise _fail(path, where, f"key file {key_file} does not exist or is not readable")
    return key_file


def parse_inventory(text: str, path: str = "<inventory>") -> Inventory:
    """Takes the text of an inventory and its path (for messages and relative paths). Returns
    the Inventory, hosts in node order. Raises InventoryError."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InventoryError(f"inventory {path}: not valid TOML: {e}") from e
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise InventoryError(f"inventory {path}: unknown key(s) {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(_TOP_KEYS))}")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict) or set(defaults) - (_HOST_KEYS - {"name", "address"}):
        raise InventoryError(f"inventory {path}: [defaults] takes only "
                             f"{', '.join(sorted(_HOST_KEYS - {'name', 'address'}))}")
    raw_hosts = data.get("host")
    if not isinstance(raw_hosts, list) or not raw_hosts:
        raise InventoryError(f"inventory {path}: no hosts (add [[host]] tables with an address)")
    hosts = [_host(path, i, h, defaults) for i, h in enumerate(raw_hosts)]
    by_name: dict[str, InventoryHost] = {}
    for h in hosts:
        if h.name in by_name:
            raise InventoryError(f"inventory {path}: node {h.name} is both "
                                 f"{by_name[h.name].address} and {h.address}")
        by_name[h.name] = h
    want = [f"n{i}" for i in range(1, len(hosts) + 1)]
    if sorted(by_name, key=lambda n: int(n[1:])) != want:
        raise InventoryError(f"inventory {path}: node names must be n1..n{len(hosts)}, "
                             f"got {', '.join(sorted(by_name))}")
    known = data.get("known_hosts")
    if known is not None and (not isinstance(known, str) or not known):
        raise InventoryError(f"inventory {path}: invalid known_hosts {known!r}")
    timeout = data.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        raise InventoryError(f"inventory {path}: connect_timeout must be > 0 seconds")
    data_dir = data.get("data_dir", DEFAULT_DATA_DIR)
    if not isinstance(data_dir, str) or not data_dir.startswith("/") or "\0" in data_dir:
        raise InventoryError(f"inventory {path}: data_dir must be an absolute path")
    return Inventory(
        path=path,
        hosts=tuple(by_name[n] for n in want),
        known_hosts=None if known is None else _expand(known),
        connect_timeout=float(timeout),
        data_dir=data_dir.rstrip("/") or "/",
    )


def load_inventory(path: str | Path) -> Inventory:
    """Takes an inventory file's path. Returns the parsed Inventory. Raises InventoryError when
    the file is missing, unreadable or wrong."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InventoryError(f"inventory {p}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InventoryError(f"inventory {p}: cannot read it: {e}") from e
    return parse_inventory(text, str(p))


def resolve_ipv4(host: InventoryHost) -> str:
    """Takes a host. Returns its IPv4 address (the address itself when it is one; the node's
    Erlang name and placement parsing need an address). Raises InventoryError naming the host
    when the name does not resolve."""
    try:
        return str(ipaddress.IPv4Address(host.address))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host.address, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError as e:
        raise InventoryError(f"{host.name} ({host.address}): the name does not resolve to an "
                             f"IPv4 address: {e}") from e
    return str(infos[0][4][0])
