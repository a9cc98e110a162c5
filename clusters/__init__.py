"""Provisioning: a Remote per node (network namespace, SSH, Docker) and the RabbitMQ lifecycle on any Remote."""
