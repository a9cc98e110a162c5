"""iptables and tc command builders. Pure: each returns argv lists, never runs anything.

Network faults live in two dedicated iptables chains per node, `RMQH-IN`
(jumped to from INPUT) and `RMQH-OUT` (from OUTPUT), so healing is flushing
them and nothing else in the node's firewall is touched. Setting them up is a
list of `Guarded` steps (run `then` unless `unless` succeeds), so it can run
any number of times. Rate limits and netem live in the root qdisc of the
node's cluster interface; healing deletes it. `nemesis.net` runs these on a
node's Remote; tests compare the exact lists.

Every iptables call passes `-w` so that concurrent calls on one host (one
network namespace per node, one xtables lock) wait rather than fail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

IPTABLES = "iptables"
TC = "tc"
# Seconds iptables waits for the xtables lock.
XTABLES_WAIT_S = 5

CHAIN_IN = "RMQH-IN"
CHAIN_OUT = "RMQH-OUT"
# (built-in chain, our chain it jumps to)
HOOKS: tuple[tuple[str, str], ...] = (("INPUT", CHAIN_IN), ("OUTPUT", CHAIN_OUT))

Argv = list[str]


@dataclass(frozen=True)
class Guarded:
    """A setup step: run `then` unless `unless` exits 0."""

    unless: Argv
    then: Argv


def iptables(*args: str) -> Argv:
    """Takes iptables arguments. Returns the argv, waiting for the xtables lock."""
    return [IPTABLES, "-w", str(XTABLES_WAIT_S), *args]


def setup_steps() -> list[Guarded]:
    """Returns the idempotent steps creating our chains and jumping to them first thing."""
    creates = [Guarded(iptables("-n", "-L", chain), iptables("-N", chain)) for _, chain in HOOKS]
    jumps = [
        Guarded(iptables("-C", hook, "-j", chain), iptables("-I", hook, "1", "-j", chain))
        for hook, chain in HOOKS
    ]
    return creates + jumps


def flush_commands() -> list[Argv]:
    """Returns the commands that empty our chains: the network heal."""
    return [iptables("-F", chain) for _, chain in HOOKS]


def drop_commands(peer_ips: Iterable[str]) -> list[Argv]:
    """Takes the addresses a node holds a grudge against. Returns the rules dropping them.

    For each peer: INPUT packets from it (`-s`) and OUTPUT packets to it (`-d`).
    """
    out: list[Argv] = []
    for ip in peer_ips:
        out.append(iptables("-A", CHAIN_IN, "-s", ip, "-j", "DROP"))
        out.append(iptables("-A", CHAIN_OUT, "-d", ip, "-j", "DROP"))
    return out


def grudge_commands(
    grudge: Mapping[str, Iterable[str]], ips: Mapping[str, str]
) -> dict[str, list[Argv]]:
    """Takes a grudge and every node's address. Returns each node's drop rules.

    Every node of `ips` gets an entry (empty when it drops nobody); peers are
    in name order.
    """
    return {node: drop_commands(ips[peer] for peer in sorted(grudge.get(node, ()))) for node in ips}


def probability(p: float) -> str:
    """Takes a probability. Returns it as iptables statistic wants it: plain decimal, no exponent."""
    return f"{p:.10f}".rstrip("0").rstrip(".") or "0"


def loss_commands(p: float, *, peer_ips: Sequence[str] | None, interface: str) -> list[Argv]:
    """Takes a drop probability, the peers to limit it to (None: all traffic), and the interface.

    Returns rules dropping that share of packets at random, in both
    directions, with `-m statistic --mode random`. With peers, only traffic
    from/to them; without, everything on the interface (clients too, but not
    loopback).
    """
    stat = ["-m", "statistic", "--mode", "random", "--probability", probability(p), "-j", "DROP"]
    if peer_ips is None:
        return [
            iptables("-A", CHAIN_IN, "-i", interface, *stat),
            iptables("-A", CHAIN_OUT, "-o", interface, *stat),
        ]
    out: list[Argv] = []
    for ip in peer_ips:
        out.append(iptables("-A", CHAIN_IN, "-s", ip, *stat))
        out.append(iptables("-A", CHAIN_OUT, "-d", ip, *stat))
    return out


def _num(x: float) -> str:
    return f"{x:g}"


def _root(interface: str) -> Argv:
    return [TC, "qdisc", "replace", "dev", interface, "root"]


def tbf_command(interface: str, *, rate_kbit: int, burst_bytes: int, latency_ms: int) -> Argv:
    """Takes an interface and a token bucket. Returns the tc command limiting its egress bandwidth.

    `tc qdisc replace dev IF root tbf rate Rkbit burst B latency Lms`; burst
    is in bytes and must hold a full packet.
    """
    return [
        *_root(interface),
        "tbf",
        "rate",
        f"{rate_kbit}kbit",
        "burst",
        str(burst_bytes),
        "latency",
        f"{latency_ms}ms",
    ]


def netem_delay_command(
    interface: str,
    *,
    delay_ms: float,
    jitter_ms: float = 0,
    correlation_pct: float = 0,
    distribution: str | None = "normal",
) -> Argv:
    """Takes an interface, a delay, optional jitter, its correlation and distribution.

    Returns `tc qdisc replace dev IF root netem delay Dms [Jms [C%]]
    [distribution D]`; correlation and distribution apply only with jitter.
    """
    argv = [*_root(interface), "netem", "delay", f"{_num(delay_ms)}ms"]
    if jitter_ms:
        argv.append(f"{_num(jitter_ms)}ms")
        if correlation_pct:
            argv.append(f"{_num(correlation_pct)}%")
        if distribution:
            argv += ["distribution", distribution]
    return argv


def netem_duplicate_command(interface: str, *, percent: float, correlation_pct: float = 0) -> Argv:
    """Takes an interface and a share of packets. Returns the netem command duplicating them."""
    argv = [*_root(interface), "netem", "duplicate", f"{_num(percent)}%"]
    if correlation_pct:
        argv.append(f"{_num(correlation_pct)}%")
    return argv


def netem_reorder_command(
    interface: str, *, percent: float, delay_ms: float, correlation_pct: float = 0
) -> Argv:
    """Takes an interface, a share of packets and a delay. Returns the netem command reordering.

    netem reorders by sending `percent` of packets at once and delaying the
    rest by `delay_ms` (reorder needs a delay).
    """
    argv = [*_root(interface), "netem", "delay", f"{_num(delay_ms)}ms"]
    argv += ["reorder", f"{_num(percent)}%"]
    if correlation_pct:
        argv.append(f"{_num(correlation_pct)}%")
    return argv


def qdisc_clear_command(interface: str) -> Argv:
    """Takes an interface. Returns the command removing its root qdisc (back to the default)."""
    return [TC, "qdisc", "del", "dev", interface, "root"]


def netem_probe_commands(interface: str = "lo") -> tuple[Argv, Argv]:
    """Takes an interface (loopback by default). Returns (put a 0 ms netem on it, remove it).

    Whether the first succeeds says whether the node's kernel has netem.
    """
    return (
        [*_root(interface), "netem", "delay", "0ms"],
        qdisc_clear_command(interface),
    )
