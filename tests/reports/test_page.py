"""What every page says the same way (reports.page): the broker's versions, generically."""

from __future__ import annotations

from types import SimpleNamespace

from reports.page import (
    NO_VERSION,
    row_versions,
    version_cell_text,
    versions_line,
    versions_of,
)

VERSIONS = {"rabbitmq": "4.0.5", "erlang": "26.2.5", "metadata_store": "khepri",
            "feature_flags": [f"flag_{i}" for i in range(8)], "empty": None}


def test_every_version_is_said_in_its_order_lists_cut_and_blanks_left_out() -> None:
    assert versions_of(VERSIONS) == [
        ("rabbitmq", "4.0.5"), ("erlang", "26.2.5"), ("metadata store", "khepri"),
        ("feature flags", "flag_0, flag_1, flag_2, flag_3, flag_4, flag_5, … 2 more")]
    assert versions_line({"rabbitmq": "3.10.8", "erlang": "Erlang/OTP 25.2.3"}) == (
        "rabbitmq 3.10.8, erlang Erlang/OTP 25.2.3")
    assert versions_of(None) == [] and versions_line("3.10") == ""


def test_a_version_cell_leads_with_rabbitmq_and_says_the_rest_beneath() -> None:
    assert version_cell_text({"erlang": "26.2", "rabbitmq": "4.0.5"}) == ("4.0.5", "erlang 26.2")
    assert version_cell_text({"erlang": "26.2"}) == ("erlang 26.2", "")
    assert version_cell_text({}) == (NO_VERSION, "") == ("—", "")


def test_a_matrix_row_names_its_versions_or_its_release_line() -> None:
    assert row_versions({"rabbitmq": "4.0"}) == {"rabbitmq": "4.0"}
    assert row_versions({"rabbitmq": "4.0", "versions": {"rabbitmq": "4.0.5"}}) == {
        "rabbitmq": "4.0.5"}
    assert row_versions(SimpleNamespace(rabbitmq="3.10", versions={"erlang": "25"})) == {
        "rabbitmq": "3.10", "erlang": "25"}
    assert row_versions({"scenario": "old"}) == {} and row_versions(SimpleNamespace()) == {}
