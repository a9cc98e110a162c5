"""Runs the `nemesis.commands` on one node, through its Remote, and reads what tc says.

The only place network faults touch a node. Every call has a hard timeout
(the caller's, a few seconds). `netem_unsupported` and `qdisc_absent` are pure
parsers of tc's error output, tested against messages captured from several
iproute2 versions.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from clusters.base import Node
from clusters.remote import CommandResult
from nemesis import commands
from nemesis.errors import FaultUnsupported

log = logging.getLogger(__name__)

# What tc prints when the kernel (or tc itself) has no netem: iproute2 >= 4.x with
# extended acks, older kernels, and a tc built without q_netem.
_NETEM_MISSING = (
    "specified qdisc kind is unknown",
    "specified qdisc not found",
    'unknown qdisc "netem"',
    "rtnetlink answers: no such file or directory",
)
# What `tc qdisc del dev X root` prints when there is no root qdisc to delete.
_QDISC_ABSENT = (
    "cannot delete qdisc with handle of zero",
    "rtnetlink answers: no such file or directory",
    "cannot find specified qdisc on specified device",
    "invalid handle",
    "rtnetlink answers: invalid argument",
)


def netem_unsupported(stderr: str) -> bool:
    """Takes tc's stderr from adding a netem qdisc. Returns True when netem does not exist there."""
    text = stderr.lower()
    return any(m in text for m in _NETEM_MISSING)


def qdisc_absent(stderr: str) -> bool:
    """Takes tc's stderr from deleting a root qdisc. Returns True when there was none to delete."""
    text = stderr.lower()
    return any(m in text for m in _QDISC_ABSENT)


def _run(node: Node, argv: Sequence[str], timeout: float, check: bool = True) -> CommandResult:
    log.debug("%s: %s", node.name, " ".join(argv))
    return node.remote.run(argv, timeout=timeout, check=check)


def ensure_chains(node: Node, timeout: float) -> None:
    """Takes a node and a timeout. Creates our iptables chains and jumps unless they exist."""
    for step in commands.setup_steps():
        if not _run(node, step.unless, timeout, check=False).ok:
            _run(node, step.then, timeout)


def heal_iptables(node: Node, timeout: float) -> None:
    """Takes a node and a timeout. Empties our chains (making them first if need be)."""
    ensure_chains(node, timeout)
    for argv in commands.flush_commands():
        _run(node, argv, timeout)


def apply_rules(node: Node, rules: Sequence[Sequence[str]], timeout: float) -> None:
    """Takes a node, iptables rules and a timeout. Replaces whatever our chains held with them."""
    heal_iptables(node, timeout)
    for argv in rules:
        _run(node, argv, timeout)


def set_root_qdisc(node: Node, argv: Sequence[str], timeout: float) -> None:
    """Takes a node, a `tc qdisc replace ... root ...` command and a timeout. Runs it.

    Raises FaultUnsupported when it is a netem command and the node's kernel
    has no netem; RemoteError for any other failure.
    """
    result = _run(node, argv, timeout, check=False)
    if result.ok:
        return
    if "netem" in argv and netem_unsupported(result.stderr):
        raise FaultUnsupported(
            f"tc netem is not available on node {node.name}'s kernel (no sch_netem module): "
            f"{result.stderr.strip()}"
        )
    result.check()


def clear_root_qdisc(node: Node, interface: str, timeout: float) -> bool:
    """Takes a node, an interface and a timeout. Deletes the interface's root qdisc.

    Returns True when one was removed, False when there was none. Raises
    RemoteError for any other failure.
    """
    result = _run(node, commands.qdisc_clear_command(interface), timeout, check=False)
    if result.ok:
        return True
    if qdisc_absent(result.stderr):
        return False
    result.check()
    return False


def probe_netem(node: Node, timeout: float, interface: str = "lo") -> bool:
    """Takes a node and a timeout. Returns whether its kernel has netem.

    Puts a 0 ms netem qdisc on loopback and deletes it again. Raises
    RemoteError when the probe fails for another reason (no tc, no rights).
    """
    add, delete = commands.netem_probe_commands(interface)
    result = _run(node, add, timeout, check=False)
    if result.ok:
        _run(node, delete, timeout, check=False)
        return True
    if netem_unsupported(result.stderr):
        return False
    result.check()
    return False
