"""The explore page (no cluster: runs are a fake function): drawn from explore.json alone, with
the coverage table, one schedule's verdicts side by side across queue kinds and release lines
(mirrored on 4.0 not applicable), a line per run linking its report relatively, and every value
escaped."""

from __future__ import annotations

import json
import re

from harness.explore import Budget, Explorer
from harness.explore_space import Space
from harness.spec import TestSpec
from reports.explore_page import explore_html, write_explore_page
from tests.harness.test_explore import FakeRuns


def test_the_page_shows_coverage_and_one_schedule_across_kinds_and_lines(tmp_path):
    dims = [("queue.type", ("quorum", "mirrored")), ("broker.rabbitmq", ("3.10", "4.0"))]
    ex = Explorer(TestSpec(), Space(max_faults=1, faults=("kill",)), 3, tmp_path / "store",
                  Budget(runs=3), 2, dims)
    runs = FakeRuns(tmp_path / "runs", {"kill": ("failover",)},
                    invalid=lambda s: s.queue.type == "mirrored")
    assert ex.execute(runs, lambda _s: None) == 1
    page = ex.out_dir / "explore.html"
    html = page.read_text()
    doc = json.loads((ex.out_dir / "explore.json").read_text())
    assert html == explore_html(ex.out_dir, doc)  # from the stored record alone
    cov = html[html.index("<h2>Coverage"):html.index("<h2>One schedule")]
    assert "<th>effect \\ fault kind</th>" in cov and "<td>failover</td>" in cov
    side = html[html.index("<h2>One schedule across variants</h2>"):html.index("<h2>Runs</h2>")]
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", side)
    assert heads == ["candidate", "queue.type=quorum, RabbitMQ 3.10",
                     "queue.type=quorum, RabbitMQ 4.0", "queue.type=mirrored, RabbitMQ 3.10",
                     "queue.type=mirrored, RabbitMQ 4.0"]
    first = side[side.index("<td>candidate-000</td>"):].split("</tr>", 1)[0]
    assert re.findall(r">(valid|INVALID|invalid)</span>", first) == ["valid", "valid", "invalid"]
    assert "not applicable: classic queue mirroring was removed in RabbitMQ 4.0" in first
    rows = html[html.index("<h2>Runs</h2>"):]
    assert rows.count("<td>candidate-000</td>") == 3
    assert 'href="../../../runs/explore-quorum/' in rows  # relative, to the run's directory
    assert "(repeat: python -m harness explore --seed 3); 3 run(s); exit code 1" in html
    assert "Each schedule held fixed across queue.type=quorum,mirrored; " \
        "broker.rabbitmq=3.10,4.0." in html


def test_a_run_s_error_is_escaped_and_a_record_without_runs_draws(tmp_path):
    doc = {"seed": 1, "runs": 1, "exit_code": 2, "vary": [], "coverage": [],
           "steps": [{"number": 0, "schedule": [{"start_s": 5, "entry": "kill<b>", "duration_s": 9}],
                      "runs": [{"variant": "", "verdict": "unknown", "run_dir": "",
                                "error": "<script>alert(1)</script>"}]}]}
    (tmp_path / "explore.json").write_text(json.dumps(doc))
    html = write_explore_page(tmp_path).read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "kill&lt;b&gt;" in html and "No fault reached anything yet." in html
    assert "One schedule across variants" not in html
    assert write_explore_page(tmp_path / "none") is None
