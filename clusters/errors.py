"""The root of every error the clusters room raises, so a caller can catch the room's failures.

`ClusterError` is the base. Below it: `clusters.remote.RemoteError` (a command on a node
failed; `CommandTimeout` past its deadline; `clusters.backend.BackendError` a backend could not
provide its cluster; `clusters.ssh.remote.SshConnectError` a host refused us),
`clusters.backend.BackendConfigError` (options that cannot make a cluster, with
`clusters.ssh.inventory.InventoryError`), `clusters.rabbitmq.BrokerError`,
`clusters.releases.ReleaseError`, `clusters.rootfs.RootfsError`,
`clusters.spark_master.SparkMasterUnreachable`, `clusters.ssh.hostkeys.UnknownHostKey` and
`clusters.lazyfs.LazyFSError` (the power-loss layer would not mount, answer or unmount).
Each keeps the built-in base it had (RuntimeError, ValueError, paramiko's SSHException), so
what caught it before still does.
"""

from __future__ import annotations


class ClusterError(Exception):
    """Base of every error of clusters/."""
