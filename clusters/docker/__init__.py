"""The Docker backend: one container per broker node on a user-defined bridge network.

`cluster` holds the cluster and its registry record (`BACKEND`), `remote` the node's Remote
(`DockerRemote`, docker exec) and `dockerd` the daemon the tests start when none runs.
"""
