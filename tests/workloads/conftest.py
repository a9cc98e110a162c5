"""The workload tests' shared fixture: an AMQP server on loopback (tests.fake_amqp)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fake_amqp import FakeBroker


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    """Returns a FakeBroker serving on loopback, closed after the test."""
    b = FakeBroker()
    yield b
    b.close()
