"""reports.finding: the Markdown finding report, from the archived findings and a planted run.

The archived findings (measurements/findings/) are real runs: the page must name the rule they
broke, quote the documentation results.json carries, give each example's timeline with the
history's exact times, show each broker log line once, the versions and the scenario file. The
planted run (tests/reports/finding_store.py) knows every value: a duplicate 300 ms before the
main phase ends is flagged suspect, one 1.5 s before is not; the consumer's cancel and close
show; the details' per-message log excerpt never does.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from reports import markdown as md
from reports.finding import load, refusal, render, write
from reports.finding_examples import SUSPECT
from reports.finding_replays import Own, replay_rates
from reports.finding_rules import finding_kinds, shows
from tests.reports.finding_store import (
    CAVEAT,
    DETAIL_LOG,
    LEADER,
    LOG_TEXTS,
    PARTITION,
    QUOTE,
    SAC,
    SCENARIO,
    copy_finding,
    plant_run,
    planted_results,
)

REDELIVER = ("Redeliveries will have a special boolean property, redeliver, set to true by "
             "RabbitMQ. For first time deliveries it will be set to false.")


def outside_fences(page: str) -> str:
    """Returns the page without its fenced code blocks (where text is verbatim)."""
    return re.sub(r"^```[^\n]*\n.*?^```$", "", page, flags=re.S | re.M)


def assert_plain_markdown(page: str) -> None:
    """No HTML: no tag outside code, and nothing of a log line's markup loose in the text."""
    prose = outside_fences(page)
    assert not re.search(r"(?<!\\)<[A-Za-z/!?]", prose), "raw HTML in the page"
    assert not re.search(r"(?<![\\`])<0\.", prose)  # an Erlang pid only escaped or in code


# --- the archived findings -----------------------------------------------------------------


def test_partition_finding_names_the_rule_quotes_the_docs_and_times_the_message(
        tmp_path: Path) -> None:
    run = copy_finding(PARTITION, tmp_path)
    page = render(load(run))
    first = page.splitlines()[0]
    assert first == ("# An acknowledged message delivered again without the redelivered flag: "
                     "partition on RabbitMQ 4.0.5")
    assert "## What RabbitMQ documents" in page and "> 1 message. RabbitMQ's" in page
    assert REDELIVER in page
    # 2-175's ops, exact from the history: its confirm, its flagged and its unflagged delivery.
    rows = [line for line in page.splitlines() if line.startswith("| 10524 |")]
    assert rows == ["| 10524 | 56.056049 | 01:38:28.048 | delivered (consume) | 3 | consume-3 | "
                    "n1 | unflagged | main | 34,127.4 ms after main start |"]
    assert "| 1294 | 24.850142 |" in page and "| 6154 | 45.573689 |" in page
    assert "flagged, x-delivery-count 1" in page
    assert "no example's delivery lies within 1 s of one" in page and SUSPECT not in page
    assert "- rabbitmq: 4.0.5" in page and "- erlang: Erlang/OTP 27.3.4.1" in page
    assert "- metadata store: mnesia" in page
    assert "Replay rate: not measured" in page
    assert_plain_markdown(page)


@pytest.mark.parametrize("name", [PARTITION, LEADER, SAC])
def test_each_log_line_of_the_incident_shows_once_with_its_evidence(
        tmp_path: Path, name: str) -> None:
    run = copy_finding(name, tmp_path)
    results = json.loads((run / "results.json").read_text())
    page = render(load(run))
    entries = results["incidents"][0]["log_lines"]
    times = Counter(e["text"] for e in entries)  # two nodes may log the same words
    for entry in entries:
        assert page.count(entry["text"]) == times[entry["text"]], entry["text"]
        assert page.count(f"`{entry['evidence']}`") == 1  # the table's evidence column
        assert page.count(f"{entry['evidence']}: 2026-11-2") == 1  # and the node's own line
    assert "broker log\":" not in page and " | 43.96 s n1 node down" not in page
    assert_plain_markdown(page)


def test_the_scenario_file_and_the_command_are_given_verbatim(tmp_path: Path) -> None:
    run = copy_finding(LEADER, tmp_path)
    page = render(load(run))
    text = (run / "scenario.toml").read_text()
    assert "```toml\n" + text.rstrip("\n") + "\n```" in page
    assert "```sh\npython -m harness run --scenario-file scenario.toml\n```" in page
    assert page.startswith("# An acknowledged message delivered again without the redelivered "
                           "flag: quorum-leader-partition on RabbitMQ 4.0.5\n")


def test_sac_finding_is_strict_fifo_and_suspect_at_the_main_phase_end(tmp_path: Path) -> None:
    run = copy_finding(SAC, tmp_path)
    page = render(load(run))
    assert page.startswith("# Strict FIFO broken under a single active consumer: "
                           "quorum-sac-fifo on RabbitMQ 3.10.8\n")
    assert f"**{SUSPECT}**" in page
    assert "`0-751` delivered (consume) at 73.620752 s, 901.1 ms before main end" in page
    assert "| 7516 | 73.620752 | 05:26:24.104 | delivered (consume) | 5 | consume-5 | n2 | " \
           "flagged | main | 901.1 ms before main end |" in page
    assert "| 7518 | 74.521810 | 05:26:25.005 | harness: main end |" in page
    # Its ordering section carries no quotation: the page says so rather than writing one.
    assert "results.json carries no quotation of RabbitMQ's documentation for `ordering`" in page
    assert "The run stored no scenario.toml, and none could be rebuilt" in page


def test_same_input_same_bytes_wherever_the_run_lies(tmp_path: Path) -> None:
    a = copy_finding(SAC, tmp_path / "a")
    b = copy_finding(SAC, tmp_path / "b")
    assert render(load(a)) == render(load(a)) == render(load(b))


# --- a planted run ---------------------------------------------------------------------------


def test_planted_duplicate_at_the_main_end_is_suspect_and_times_are_exact(tmp_path: Path) -> None:
    page = render(load(plant_run(tmp_path / "run")))
    assert page.startswith("# A message delivered again without the redelivered flag: planted "
                           "on RabbitMQ 4.3.6\n")
    assert f"> 1 message. Delivered twice. {md.text(QUOTE)}" in page
    assert f"**{SUSPECT}**: `0-0` delivered (consume) at 19.700000 s, 300.0 ms before main end" \
        in page
    assert ("| 9 | 19.700000 | 08:00:19.700 | delivered (consume) | 3 | consume-3 | n1 | "
            "unflagged | main | 300.0 ms before main end |") in page
    assert "| 10 | 19.800000 | 08:00:19.800 | cancel invoke, by harness, holding 0-0 |" in page
    assert "| 14 | 19.804000 | 08:00:19.804 | close ok, by harness |" in page
    assert "| 15 | 20.000000 | 08:00:20.000 | harness: main end |" in page
    assert "| 8 |" not in page  # the nemesis's op 11.7 s away is not near it


def test_planted_delivery_a_second_and_a_half_away_is_not_suspect(tmp_path: Path) -> None:
    page = render(load(plant_run(tmp_path / "run", dup_before_end_ms=1500)))
    assert SUSPECT not in page
    assert "the closest is 1,500.0 ms before its boundary" in page


def test_planted_log_lines_once_details_excerpt_never_versions_and_caveat(tmp_path: Path) -> None:
    page = render(load(plant_run(tmp_path / "run")))
    for text in LOG_TEXTS:
        assert page.count(text) == 1
    assert "n1/rabbit.log:1: 2027-01-15 08:00:09.500000+00:00 [error] <0.1.0> Mnesia" in page
    assert "9.000 s n1 per-message excerpt" not in page and DETAIL_LOG not in page
    assert "- rabbitmq: 4.3.6" in page and "- metadata store: khepri" in page
    assert f"- caveat: {CAVEAT}" in page
    assert "```toml\n" + SCENARIO.rstrip("\n") + "\n```" in page
    assert_plain_markdown(page)


def test_write_puts_finding_md_in_the_run_or_where_asked(tmp_path: Path) -> None:
    run = plant_run(tmp_path / "run")
    assert write(run) == run / "finding.md"
    out = write(run, tmp_path / "elsewhere.md")
    assert out.read_bytes() == (run / "finding.md").read_bytes()


def test_a_gzip_history_reads_as_the_plain_one(tmp_path: Path) -> None:
    import gzip

    run = plant_run(tmp_path / "run")
    plain = render(load(run))
    history = run / "history.jsonl"
    (run / "history.jsonl.gz").write_bytes(gzip.compress(history.read_bytes()))
    history.unlink()
    assert render(load(run)) == plain


def test_without_history_the_page_says_so(tmp_path: Path) -> None:
    run = plant_run(tmp_path / "run")
    (run / "history.jsonl").unlink()
    page = render(load(run))
    assert "Phase boundaries: not measured: the run stored no history." in page
    assert "results.json's words above are all there is of this message" in page


def test_refusals_name_what_is_missing(tmp_path: Path) -> None:
    assert refusal(tmp_path / "nope") == f"{tmp_path / 'nope'} is not a directory"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "has no results.json: nothing to report" in str(refusal(empty))
    valid = plant_run(tmp_path / "valid", results={"valid": True, "queue": {"valid": True}})
    assert "is not a finding: its results say valid True" in str(refusal(valid))
    with pytest.raises(ValueError, match="nothing to report"):
        load(valid)
    assert refusal(plant_run(tmp_path / "invalid")) is None


# --- rules, replays, Markdown ----------------------------------------------------------------


def test_kinds_headline_first_and_what_a_row_can_tell() -> None:
    results = {"valid": False, "queue": {"anomalies": ["unflagged_duplicated", "lost",
                                                       "unflagged_after_ack"]},
               "ordering": {"valid": False, "violation_count": 2},
               "liveness": {"valid": False}, "run": {"valid": False}}
    assert finding_kinds(results) == ["lost", "unflagged_after_ack", "unflagged_duplicated",
                                      "ordering", "liveness"]
    assert shows("ordering", None, {"valid": False, "ordering_violations": 1}) is True
    assert shows("lost", None, {"valid": True}) is False
    assert shows("unflagged_after_ack", None, {"valid": False, "unflagged_duplicated": 1}) is None


def _record(run: str, line: str, shown: bool | None, variant: str = "", seed: int = 1,
            error: bool = False) -> dict[str, object]:
    results = None if shown is None else planted_results() if shown else {"valid": True}
    return {"row": {"scenario": "planted", "run_dir": f"store/planted/{run}", "seed": seed,
                    "rabbitmq": line, "variant": variant, "valid": None,
                    "judgement": "error" if error else "as expected",
                    "versions": {"rabbitmq": {"4.3": "4.3.6", "4.0": "4.0.5"}[line]}},
            "results": results}


def test_replay_rate_per_release_line_counts_only_what_it_can_tell() -> None:
    own = Own("planted", "20270115T080000.000000Z", 7, None)
    records = [_record("20270115T080000.000000Z", "4.3", True, seed=7),
               _record("r2", "4.3", True), _record("r3", "4.3", False), _record("r4", "4.3", None),
               _record("r5", "4.3", True, error=True), _record("r6", "4.0", False),
               _record("r7", "4.3", True, variant="queue.type=stream"),
               {"row": {"scenario": "other", "run_dir": "x", "rabbitmq": "4.3"}, "results": None}]
    rates = replay_rates(records, own, "unflagged_duplicated")
    assert [r.sentence() for r in rates] == [
        "reproduced 0 of 1 on RabbitMQ 4.0.5",
        "reproduced 2 of 3 on RabbitMQ 4.3.6 (this run among them; 1 more could not be told: "
        "results gone, and the matrix row does not count this kind; 1 infrastructure error(s) "
        "not counted)"]


def test_replay_rate_counts_variants_apart_when_the_run_is_not_listed() -> None:
    own = Own("planted", "elsewhere", 7, None)
    records = [_record("r1", "4.3", True), _record("r2", "4.3", False, variant="x=1")]
    assert [r.sentence() for r in replay_rates(records, own, "unflagged_duplicated")] == [
        "reproduced 1 of 1 on RabbitMQ 4.3.6",
        "reproduced 0 of 1 on RabbitMQ 4.3.6 (variant x=1)"]


def test_a_finding_of_two_kinds_gives_each_kind_its_own_replay_rate(tmp_path: Path) -> None:
    # Seen on 3.10.8: mirrored-partition loses in every run as predicted, and one run of five
    # also left a publish stuck. The page said "reproduced 5 of 5" of the stall, the loss's rate.
    both = {**planted_results(), "liveness": {"valid": False}}
    run = plant_run(tmp_path / "20270115T080000.000000Z", results=both)
    assert finding_kinds(both) == ["unflagged_duplicated", "liveness"]
    records = [{**_record("20270115T080000.000000Z", "4.3", True, seed=7), "results": both},
               _record("r2", "4.3", True), _record("r3", "4.3", True)]
    page = render(load(run), replays=records)
    rate = ("Replay rate: `unflagged_duplicated` reproduced 3 of 3 on RabbitMQ 4.3.6 (this run "
            "among them); `liveness` reproduced 1 of 3 on RabbitMQ 4.3.6 (this run among "
            "them).")
    assert page.count(rate) == 2  # the summary's and the reproduce section's
    one = render(load(plant_run(tmp_path / "one")), replays=records[1:])
    assert "Replay rate: reproduced 2 of 2 on RabbitMQ 4.3.6." in one


def test_markdown_text_never_becomes_markup() -> None:
    assert md.text("** ERROR ** <0.1.0> a|b [x]\nnext") == \
        r"\*\* ERROR \*\* \<0.1.0\> a\|b \[x\] next"
    assert md.code("a `b` c") == "``a `b` c``"
    assert md.fence(["```", "x"]) == ["````", "```", "x", "````"]
    assert md.table(["a", "b"], [["1", ""]]) == ["| a | b |", "|---|---|", "| 1 | - |"]


def test_a_promise_sections_finding_names_its_rule_and_follows_its_examples() -> None:
    from reports.finding_examples import examples
    from reports.finding_rules import broken, count_of
    from tests.reports.promise_store import results as promise_results
    results = promise_results()
    assert finding_kinds(results) == ["priority", "delayed_retry"]  # RULES' order
    assert broken("delayed_retry", results, {}).startswith("a returned message (rejected, nacked")
    assert count_of("priority", results) == 1 and count_of("delayed_retry", results) == 2
    found, notes = examples(results, finding_kinds(results))
    assert notes == []
    assert [(e.kinds, e.ids) for e in found] == [(("priority",), ("1-40", "1-41")),
                                                (("delayed_retry",), ("1-7",))]
    assert "handed out while" in found[0].heading
    assert ("violation", "early") in found[1].facts and "timeline" not in dict(found[1].facts)


# --- a stalled hand-over -------------------------------------------------------------------


def test_a_stalled_hand_over_is_a_finding_with_its_end_live_consumers_deadline_and_next(
        tmp_path: Path) -> None:
    from tests.reports.finding_store import hand_over_ops, plant_hand_over

    run = plant_hand_over(tmp_path / "sac")
    assert refusal(run) is None  # a stalled hand-over alone, no message example: still a finding
    page = write(run).read_text()
    assert_plain_markdown(page)
    headline = ("a single active consumer's queue not handed over within the bound after the "
                "broker ended its active consumer")
    assert page.startswith(f"# {headline[0].upper()}{headline[1:]}: planted-sac on RabbitMQ "
                           "4.3.6\n")
    assert f"- `consumer_timeout` (1): {md.text(headline)}" in page
    part = page[page.index("### Stalled hand-over"):page.index("## The broker's log lines")]
    assert part.startswith("### Stalled hand-over: the broker ended the active consumer `c5` "
                           "at 7.200 s, and no other consumer was fed by the deadline\n")
    ops = hand_over_ops()
    end = next(op for op in ops if op.f == "cancel")
    nxt = next(op for op in ops if op.f == "consume" and op.consumer == "c6")
    for fact in (f"the broker sent basic.cancel to consumer c5 (process 5, history index "
                 f"{end.index}) at 7.200 s",
                 "2 message(s) it held, 0 more confirmed and not yet delivered",
                 "consumers live then: 7 c7",
                 "deadline: 19.000 s: the liveness bound (10.000 s) after the end",
                 "queue depth up to the deadline: 2 ready at 12.000 s",
                 f"next delivery to another consumer: consumer c6 (process 6, history index "
                 f"{nxt.index}) at 22.000 s, 14.800 s after the end",
                 "faults from the end to the deadline: partition-one on n1 (8.000 s to 9.000 s)"):
        assert md.text(fact) in part, fact
    # The history's table: the broker's cancel, the partition and its heal, the leader sampled,
    # and the next delivery, with exact times and UTC; never the deliveries before the end.
    rows = [line for line in part.splitlines() if re.match(r"\| \d+ \|", line)]
    assert [int(r.split("|")[1]) for r in rows] == [end.index, end.index + 1, end.index + 2,
                                                   end.index + 3, nxt.index]
    assert rows[0].startswith(f"| {end.index} | 7.200000 | 08:00:07.200 | cancel ok, by broker, "
                              "holding 1-0, 1-1 | 5 | c5 | n2 |")
    assert "nemesis: start-partition partition-one on n1" in rows[1]
    assert "harness: queue leader n2" in rows[3]
    assert rows[4].startswith(f"| {nxt.index} | 22.000000 | 08:00:22.000 | delivered (consume) "
                              "| 6 | c6 | n3 | flagged |")


def test_a_stalled_hand_over_never_followed_by_a_delivery_and_without_history(
        tmp_path: Path) -> None:
    from reports.finding_hand_over import stalled
    from tests.reports.finding_store import hand_over_ops, hand_over_results, plant_hand_over

    run = plant_hand_over(tmp_path / "sac")
    results = hand_over_results(hand_over_ops())
    section = results["consumer_timeout"]
    section["hand_over"]["stalled_examples"][0]["next"] = None
    section["hand_over"]["stalled_examples"][0]["delay_ms"] = None
    section["hand_over"]["stalled"] = 7  # the checker kept one example of seven
    section["violations"]["lost"] = 1  # another violation: the rule's own general words
    (run / "results.json").write_text(json.dumps(results))
    (run / "history.jsonl").unlink()
    assert stalled(results)[1] == ["consumer_timeout: 6 more stalled hand-over(s) than shown "
                                   "here (results.json keeps 1)"]
    page = render(load(run))
    assert page.startswith("# A timed-out consumer fed after its cancel")
    assert "- next delivery to another consumer: none in the main phase" in page
    assert ("The run stored no history: results.json's words above are all there is of this "
            "hand-over.") in page
    assert md.text("- consumer_timeout: 6 more stalled hand-over(s) than shown here") in page
