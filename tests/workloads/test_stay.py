"""Clients that stay across faults (WorkloadOptions.stay): a staying publisher waits for each
confirm up to the confirm deadline with its window in flight, and retires only on a closed
connection or that deadline; the options that would end a staying consumer's subscription are
refused. Against the scripted connection of test_publisher (no broker)."""

from __future__ import annotations

import threading
import time

import pika.exceptions
import pytest

from tests.fakes import ListRecorder
from tests.workloads.test_publisher import Script
from workloads.clients import ClientOptions
from workloads.publisher import Publisher
from workloads.queue_spec import QueueSpec
from workloads.queue_workload import (
    QueueWorkload,
    WorkloadConfigError,
    WorkloadOptions,
    _wait_for_room,
)

# A publish timeout of 0.2 s stands for the Jepsen process's 5 s, a deadline of 3 s for minutes.
RETIRING = WorkloadOptions(client=ClientOptions(publish_timeout_s=0.2, window=3))
STAYING = WorkloadOptions(client=ClientOptions(publish_timeout_s=0.2, window=3),
                          stay="publishers", confirm_deadline_s=3.0)


def _publisher(opts: WorkloadOptions) -> tuple[Publisher, Script, ListRecorder]:
    rec, script = ListRecorder(), Script()
    pub = Publisher(rec, "q", "n1", "10.0.0.1", 7, opts.publisher_client())
    pub.conn, pub._impl, script.pub = script, script, pub  # type: ignore[assignment]
    return pub, script, rec


def _types(rec: ListRecorder) -> list[tuple[str, str | None]]:
    return [(op.type, op.error) for op in rec.ops if op.type != "invoke"]


def test_a_retiring_publisher_gives_up_at_the_publish_timeout():
    pub, _script, rec = _publisher(RETIRING)
    for _ in range(3):
        pub.send()
    pub.drive(time.monotonic() + 0.5)
    assert pub.spent and _types(rec)[0] == ("info", "no confirm within 0.2s")


def test_a_staying_publisher_keeps_its_window_past_the_timeout_and_takes_a_late_confirm():
    pub, script, rec = _publisher(STAYING)
    for _ in range(3):
        pub.send()
    pub.drive(time.monotonic() + 0.5)  # past the retiring client's 0.2 s
    assert not pub.spent and pub.in_flight == 3 and _types(rec) == []
    script.frames.append(("ack", (3, True)))
    pub.drive(time.monotonic() + 0.2, lambda: pub.in_flight == 0)
    assert not pub.spent and _types(rec) == [("ok", None)] * 3
    assert [op.process for op in rec.ops] == [7] * 6  # one process, one channel, throughout


def test_a_staying_publisher_retires_on_a_closed_connection():
    pub, script, rec = _publisher(STAYING)
    pub.send()
    script.fail_publish = pika.exceptions.StreamLostError("Transport indicated EOF")
    pub.send()
    assert pub.spent
    assert [t for t, _ in _types(rec)] == ["info", "info"]
    assert "StreamLostError" in (_types(rec)[0][1] or "")


def test_the_publishers_client_takes_the_deadline_only_when_they_stay():
    assert RETIRING.publisher_client().publish_timeout_s == 0.2
    assert STAYING.publisher_client().publish_timeout_s == 3.0
    assert WorkloadOptions(stay="consumers").publisher_client() == ClientOptions()
    assert (STAYING.publishers_stay, STAYING.consumers_stay) == (True, False)
    assert WorkloadOptions(stay="both").consumers_stay


@pytest.mark.parametrize("opts,msg", [
    (WorkloadOptions(stay="sometimes"), "--stay must be one of none, publishers"),
    (WorkloadOptions(stay="publishers", confirm_deadline_s=0.0), "--confirm-deadline must be > 0"),
    (WorkloadOptions(stay="consumers", pause_consumers_in_faults=True),
     "--stay consumers: a staying consumer keeps its subscription"),
    (WorkloadOptions(stay="both", client=ClientOptions(crash_after=5)),
     "neither paused in faults .* nor crashed"),
])
def test_impossible_staying_options_are_refused(opts, msg):
    with pytest.raises(WorkloadConfigError, match=msg):
        opts.validate()


def test_a_staying_publisher_at_the_runs_end_waits_no_longer_than_it_is_told():
    pub, _script, rec = _publisher(STAYING)
    for _ in range(2):
        pub.send()
    t0 = time.monotonic()
    pub.settle(within=0.3)
    assert 0.25 <= time.monotonic() - t0 < 1.0 and pub.in_flight == 2 and not pub.spent
    pub.close()  # what was never confirmed ends info, as Jepsen ends an op at the test's end
    assert [e for _t, e in _types(rec)] == [
        "abandoned with the process after: publisher closed with the message in flight"] * 2


def test_a_staying_publisher_with_a_full_window_notices_the_runs_end():
    pub, _script, _rec = _publisher(STAYING)
    for _ in range(3):
        pub.send()
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    t0 = time.monotonic()
    _wait_for_room(pub, time.monotonic() + 60, stop)  # the deadline is far; the stop is not
    assert time.monotonic() - t0 < 1.5 and pub.in_flight == 3 and not pub.spent


def test_the_clients_observation_says_who_stays_and_whether_consumers_share_the_queue():
    w = QueueWorkload(QueueSpec(name="q"), STAYING, [], ListRecorder())
    assert w.clients_observation() == {
        "queue": "q", "type": "quorum", "single_active_consumer": False,
        "consumers_share": True, "reads_from": None, "stay": "publishers",
        "confirm_deadline_s": 3.0, "publish_timeout_s": 0.2}
    log = QueueWorkload(QueueSpec(name="s", type="stream"), RETIRING, [], ListRecorder())
    seen = log.clients_observation()
    assert (seen["consumers_share"], seen["reads_from"]) == (False, "first")
