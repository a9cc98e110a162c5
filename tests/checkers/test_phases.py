"""The drain's outcome as the checker reads it from the harness's phase events."""

from checkers.phases import DrainState, HarnessEvent, drain_state

GONE = {"exists": False, "type": None, "ready": None, "unacked": None, "last_offset": None}
HUNG = ("consume on n2: ChannelClosedByBroker: (404, \"NOT_FOUND - failed to perform operation "
        "on queue 'jepsen.queue' in vhost '/' due to timeout\")")
DELETED = "consume on n3: ChannelClosedByBroker: (404, \"NOT_FOUND - no queue 'jepsen.queue' in vhost '/'\")"


def ended(**value):
    return [HarnessEvent(1, "phase", {"phase": "drain", "state": "start"}),
            HarnessEvent(2, "phase", {"phase": "drain", "state": "end", **value})]


def test_a_drain_is_complete_only_when_its_end_event_says_so():
    assert drain_state(ended(complete=True)) == DrainState(True)
    assert drain_state(ended()) == DrainState(True)  # older runs recorded no `complete`
    state = drain_state(ended(complete=False, reason="no depth from n1"))
    assert not state.complete and state.reason.endswith(": no depth from n1")
    assert not drain_state(ended()[:1]).complete
    assert not drain_state([*ended()[:1], HarnessEvent(
        2, "phase", {"phase": "drain", "state": "incomplete"})]).complete


def test_gone_everywhere_is_no_proof_when_a_node_refused_the_consume_as_there_but_unreachable():
    """Seen: a mirrored queue's master hung after autoheal; list_queues listed it on no node, the
    drain called it gone, and 3,605 confirmed messages were judged lost."""
    depth = {n: GONE for n in ("n1", "n2", "n3")}
    state = drain_state(ended(complete=True, reason="the queue no longer exists on any node",
                              depth=depth, errors={"n2": HUNG, "n3": DELETED}))
    assert not state.complete
    assert state.reason == (
        "the drain took the queue for gone on every node, but n2 refused its consume as there "
        "and unreachable (NOT_FOUND - failed to perform operation on queue 'jepsen.queue' in "
        "vhost '/' due to timeout): the queue's emptiness is unproven")
    # "no queue" agrees with the depth; and a depth with counts is the queue's own answer.
    assert drain_state(ended(complete=True, depth=depth, errors={"n3": DELETED})).complete
    counted = {**depth, "n1": {**GONE, "exists": True, "ready": 0, "unacked": 0}}
    assert drain_state(ended(complete=True, depth=counted, errors={"n2": HUNG})).complete
