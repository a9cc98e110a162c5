"""A classic queue, unmirrored: it lives on one node, and dies with it unless durable."""

from __future__ import annotations

from workloads.kinds.base import QueueKind


class Classic(QueueKind):
    """A classic queue on the node it was declared on. Its depth comes from its own process."""

    name = "classic"
    summary = "a classic queue on one node, no replicas"
    replicated = False
