"""The SSH backend: broker nodes on hosts named in an inventory, reached with paramiko.

`cluster` holds the cluster and its registry record (`BACKEND`), `remote` the node's Remote
(`SshRemote`), `inventory` the inventory file's reader and `hostkeys` the host-key policies.
"""
