"""The root of every error the workloads room raises, so a caller can catch the room's failures.

`WorkloadError` is the base. Below it: `workloads.kinds.base.QueueConfigError` (a queue kind's
options that cannot declare it), `workloads.queue_workload.WorkloadConfigError` (workload
options that cannot run) and `workloads.clients.ClientError` (a client's AMQP operation
failed). Each keeps the built-in base it had (ValueError, RuntimeError).
"""

from __future__ import annotations


class WorkloadError(Exception):
    """Base of every error of workloads/."""
