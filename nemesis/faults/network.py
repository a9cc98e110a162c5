"""Network faults: partitions and packet loss with iptables, bandwidth limits and netem with tc.

A `PartitionFault` computes a grudge with a *shape* (a function of the
context and a Random, built on `nemesis.partition`) and enforces it on every
node at once; stopping flushes our chains everywhere. `PacketLossFault` drops
a random share of the target nodes' packets. `QdiscFault` puts a root qdisc
(tbf or netem, built from the options) on the target nodes' cluster
interface, which shapes what those nodes send; stopping deletes it. On a
kernel without netem the netem faults raise FaultUnsupported, and their
`preflight` says so before the test starts.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from clusters.base import Node
from nemesis import commands, net
from nemesis.errors import FaultUnsupported
from nemesis.healers import FaultBase
from nemesis.partition import (
    Grudge,
    bisect,
    bridge,
    bridge_node,
    complete_grudge,
    grudge_to_json,
    isolate,
    majorities_ring,
    shuffled,
)
from nemesis.protocol import (
    Description,
    FaultContext,
    FaultInfo,
    FaultOptions,
    on_nodes,
    raise_for_errors,
)

log = logging.getLogger(__name__)

# A partition shape: what to cut, and what to say about it ("nodes": the nodes cut off).
Shape = Callable[[FaultContext, random.Random], tuple[Grudge, Description]]


def _in_order(ctx: FaultContext, names: list[str]) -> list[str]:
    return [n for n in ctx.names if n in names]


def shape_one(ctx: FaultContext, rng: random.Random) -> tuple[Grudge, Description]:
    """Isolates one node chosen from the targets (Jepsen `partition-random-node`)."""
    loner = rng.choice([n.name for n in ctx.targets(rng)])
    return isolate(loner, ctx.names), {"nodes": [loner]}


def _halves(ctx: FaultContext, order: list[str]) -> tuple[Grudge, Description]:
    small, large = bisect(order)
    return complete_grudge([small, large]), {
        "nodes": _in_order(ctx, small),
        "components": [_in_order(ctx, small), _in_order(ctx, large)],
    }


def shape_halves(ctx: FaultContext, rng: random.Random) -> tuple[Grudge, Description]:
    """Cuts the cluster into halves in node order, smaller first (Jepsen `partition-halves`)."""
    return _halves(ctx, ctx.names)


def shape_random_halves(ctx: FaultContext, rng: random.Random) -> tuple[Grudge, Description]:
    """Cuts the cluster into random halves (Jepsen `partition-random-halves`)."""
    return _halves(ctx, shuffled(ctx.names, rng))


def shape_majorities_ring(ctx: FaultContext, rng: random.Random) -> tuple[Grudge, Description]:
    """Each node sees a different majority (Jepsen `partition-majorities-ring`)."""
    return majorities_ring(ctx.names, rng), {"nodes": ctx.names}


def shape_bridge(ctx: FaultContext, rng: random.Random) -> tuple[Grudge, Description]:
    """Random halves joined by one node that sees both (Jepsen `bridge`, on a shuffled order)."""
    order = shuffled(ctx.names, rng)
    small, large = bisect(order)
    middle = bridge_node(order)
    return bridge(order), {
        "nodes": ctx.names,
        "bridge": middle,
        "components": [_in_order(ctx, small), _in_order(ctx, [n for n in large if n != middle])],
    }


def shape_leader(ctx: FaultContext, rng: random.Random) -> tuple[Grudge, Description]:
    """Isolates the node hosting the queue's leader, asked of the broker now."""
    leader = ctx.leader()
    return isolate(leader, ctx.names), {"nodes": [leader], "leader": leader}


class PartitionFault(FaultBase):
    """Cuts the network into the shape's grudge; stopping opens it again on every node."""

    def __init__(self, info: FaultInfo, shape: Shape) -> None:
        self.info = info
        self._shape = shape
        self._nodes: list[str] = []

    def preflight(self, ctx: FaultContext) -> None:
        """Takes the context. Creates our iptables chains on every node; raises if it cannot."""
        _, errors = on_nodes(ctx.nodes, lambda node: net.ensure_chains(node, ctx.timeout))
        raise_for_errors("iptables set-up", errors)

    def start(self, ctx: FaultContext, rng: random.Random) -> Description:
        """Takes the context and a Random. Enforces the shape's grudge. Returns it described."""
        grudge, about = self._shape(ctx, rng)
        self._nodes = list(about.get("nodes", []))
        rules = commands.grudge_commands(grudge, {n.name: n.ip for n in ctx.nodes})
        _, errors = on_nodes(
            ctx.nodes, lambda node: net.apply_rules(node, rules[node.name], ctx.timeout)
        )
        raise_for_errors(self.info.name, errors)
        return {"fault": self.info.name, **about, "grudge": grudge_to_json(grudge)}

    def stop(self, ctx: FaultContext) -> Description:
        """Takes the context. Flushes our chains on every node. Returns what was healed."""
        nodes, self._nodes = self._nodes, []
        _, errors = on_nodes(ctx.nodes, lambda node: net.heal_iptables(node, ctx.timeout))
        raise_for_errors(f"{self.info.name} heal", errors)
        return {"fault": self.info.name, "nodes": nodes}


class PacketLossFault(FaultBase):
    """Drops a random share of the target nodes' packets, with iptables' statistic match."""

    def __init__(self, info: FaultInfo) -> None:
        self.info = info
        self._hit: list[Node] = []

    def preflight(self, ctx: FaultContext) -> None:
        """Takes the context. Creates our iptables chains on every node; raises if it cannot."""
        _, errors = on_nodes(ctx.nodes, lambda node: net.ensure_chains(node, ctx.timeout))
        raise_for_errors("iptables set-up", errors)

    def start(self, ctx: FaultContext, rng: random.Random) -> Description:
        """Takes the context and a Random. Starts dropping packets on the targets. Returns them."""
        opts = ctx.options
        targets = ctx.targets(rng)
        self._hit = targets

        def apply(node: Node) -> None:
            peers = None
            if opts.packet_scope == "peers":
                peers = [n.ip for n in ctx.nodes if n.name != node.name]
            rules = commands.loss_commands(
                opts.packet_loss, peer_ips=peers, interface=node.interface
            )
            net.apply_rules(node, rules, ctx.timeout)

        _, errors = on_nodes(targets, apply)
        raise_for_errors(self.info.name, errors)
        return {
            "fault": self.info.name,
            "nodes": [n.name for n in targets],
            "probability": opts.packet_loss,
            "scope": opts.packet_scope,
        }

    def stop(self, ctx: FaultContext) -> Description:
        """Takes the context. Flushes our chains on the nodes hit. Returns them."""
        hit, self._hit = self._hit, []
        _, errors = on_nodes(hit, lambda node: net.heal_iptables(node, ctx.timeout))
        raise_for_errors(f"{self.info.name} heal", errors)
        return {"fault": self.info.name, "nodes": [n.name for n in hit]}


# Builds a root qdisc command for an interface from the options, and describes its settings.
QdiscBuilder = Callable[[str, FaultOptions], commands.Argv]
QdiscSettings = Callable[[FaultOptions], dict[str, Any]]


class QdiscFault(FaultBase):
    """Puts a root qdisc (tbf, netem) on the target nodes' cluster interface."""

    def __init__(
        self, info: FaultInfo, build: QdiscBuilder, settings: QdiscSettings, *, netem: bool = False
    ) -> None:
        self.info = info
        self._build = build
        self._settings = settings
        self._netem = netem
        self._hit: list[Node] = []

    def preflight(self, ctx: FaultContext) -> None:
        """Takes the context. For netem, raises FaultUnsupported naming nodes without it."""
        if not self._netem:
            return
        results, errors = on_nodes(ctx.nodes, lambda node: net.probe_netem(node, ctx.timeout))
        raise_for_errors("netem probe", errors)
        missing = [name for name in ctx.names if not results[name]]
        if missing:
            raise FaultUnsupported(
                f"fault {self.info.name!r} needs tc netem, which is not available on the kernel "
                f"of node(s) {', '.join(missing)} (no sch_netem module); drop it from the faults"
            )

    def start(self, ctx: FaultContext, rng: random.Random) -> Description:
        """Takes the context and a Random. Installs the qdisc on the targets. Returns them."""
        targets = ctx.targets(rng)
        self._hit = targets
        _, errors = on_nodes(
            targets,
            lambda node: net.set_root_qdisc(
                node, self._build(node.interface, ctx.options), ctx.timeout
            ),
        )
        raise_for_errors(self.info.name, errors)
        return {
            "fault": self.info.name,
            "nodes": [n.name for n in targets],
            **self._settings(ctx.options),
        }

    def stop(self, ctx: FaultContext) -> Description:
        """Takes the context. Deletes the root qdisc on the nodes hit. Returns them."""
        hit, self._hit = self._hit, []
        _, errors = on_nodes(
            hit, lambda node: net.clear_root_qdisc(node, node.interface, ctx.timeout)
        )
        raise_for_errors(f"{self.info.name} heal", errors)
        return {"fault": self.info.name, "nodes": [n.name for n in hit]}


def tbf(interface: str, o: FaultOptions) -> commands.Argv:
    """Takes an interface and the options. Returns the bandwidth limit command."""
    return commands.tbf_command(
        interface,
        rate_kbit=o.bandwidth_kbit,
        burst_bytes=o.bandwidth_burst_bytes,
        latency_ms=o.bandwidth_latency_ms,
    )


def tbf_settings(o: FaultOptions) -> dict[str, Any]:
    """Takes the options. Returns the bandwidth limit's settings."""
    return {
        "rate_kbit": o.bandwidth_kbit,
        "burst_bytes": o.bandwidth_burst_bytes,
        "latency_ms": o.bandwidth_latency_ms,
    }


def delay(interface: str, o: FaultOptions) -> commands.Argv:
    """Takes an interface and the options. Returns the netem delay command."""
    return commands.netem_delay_command(interface, delay_ms=o.delay_ms, jitter_ms=o.jitter_ms)


def delay_settings(o: FaultOptions) -> dict[str, Any]:
    """Takes the options. Returns the delay's settings."""
    return {"delay_ms": o.delay_ms, "jitter_ms": o.jitter_ms}


def duplicate(interface: str, o: FaultOptions) -> commands.Argv:
    """Takes an interface and the options. Returns the netem duplicate command."""
    return commands.netem_duplicate_command(interface, percent=o.duplicate_pct)


def duplicate_settings(o: FaultOptions) -> dict[str, Any]:
    """Takes the options. Returns the duplication's settings."""
    return {"percent": o.duplicate_pct}


def reorder(interface: str, o: FaultOptions) -> commands.Argv:
    """Takes an interface and the options. Returns the netem reorder command."""
    return commands.netem_reorder_command(interface, percent=o.reorder_pct, delay_ms=o.delay_ms)


def reorder_settings(o: FaultOptions) -> dict[str, Any]:
    """Takes the options. Returns the reordering's settings."""
    return {"percent": o.reorder_pct, "delay_ms": o.delay_ms}
