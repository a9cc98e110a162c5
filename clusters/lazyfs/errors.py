"""The one error the lazyfs layer raises: a mount that cannot be made or a control call that failed."""

from __future__ import annotations

from clusters.errors import ClusterError


class LazyFSError(ClusterError, RuntimeError):
    """The layer could not mount, answer, or unmount; the message says which and why."""
