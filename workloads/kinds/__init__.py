"""Queue kinds: one module per kind, one registry line each.

`KINDS` maps a kind's name (the spec's `queue.type`) to its QueueKind; the
rest of the code asks `kind_of(spec)` and never tests a kind's name. To add
a kind: a module here with a QueueKind subclass, and its line below.
"""

from __future__ import annotations

from workloads.kinds.base import QueueConfigError, QueueKind, QueueSettings
from workloads.kinds.classic import Classic
from workloads.kinds.mirrored import Mirrored
from workloads.kinds.quorum import Quorum
from workloads.kinds.stream import Stream

KINDS: dict[str, QueueKind] = {k.name: k for k in (Quorum(), Mirrored(), Classic(), Stream())}


def kind_of(spec: QueueSettings) -> QueueKind:
    """Takes a queue spec. Returns its kind. Raises QueueConfigError listing the known kinds."""
    kind = KINDS.get(spec.type)
    if kind is None:
        raise QueueConfigError(f"unknown queue type {spec.type!r}; known: {', '.join(KINDS)}")
    return kind


__all__ = ["KINDS", "QueueConfigError", "QueueKind", "QueueSettings", "kind_of"]
