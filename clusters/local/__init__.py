"""The local backend: one network namespace per broker node on this machine.

`cluster` holds the cluster and its registry record (`BACKEND`), `remote` the node's Remote.
"""
