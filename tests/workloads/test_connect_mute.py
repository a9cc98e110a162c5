"""A listener that accepts and never answers the AMQP handshake (a paused node) makes `connect`
raise ClientError within its timeouts, like every other way it fails, never pika's connector
exception that ended the thread that asked."""

from __future__ import annotations

import socket
import time

import pytest

from workloads.clients import ClientError, ClientOptions, connect

pytestmark = pytest.mark.timeout(30)


def test_a_mute_listener_is_a_client_error_within_the_stack_timeout():
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(1)
    try:
        opts = ClientOptions(port=mute.getsockname()[1], heartbeat_s=0, connect_timeout_s=0.5)
        start = time.monotonic()
        with pytest.raises(ClientError, match="connect to 127.0.0.1"):
            connect("127.0.0.1", opts)
        assert time.monotonic() - start < 10
    finally:
        mute.close()
