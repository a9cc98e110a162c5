"""Tests of the option table (harness.options): the parsers it generates group `--help` as
before, every option sets its spec field, no flag is declared twice, bad values exit 2 naming
the option, and every spec field a user may set has a flag or a scenario-file key."""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from pathlib import Path
from typing import Any

import pytest

from clusters.backend import BackendOptions
from harness import options
from harness.check import check_options
from harness.cli import build_parser, check_overrides, main, unchecked_spec
from harness.options import OPTIONS, RUNS, Option, get_field
from harness.scenario_file import loads_scenario, with_setting
from harness.spec import TestSpec

TEST = ["--scenario", "--name", "--nodes", "--time-limit", "--seed", "--store",
        "--recovery-timeout", "--no-progress"]
BROKER = ["--partition-handling", "--net-ticktime", "--rabbitmq", "--metadata-store",
          "--permit-transient-queues"]
QUEUE = ["--queue", "--queue-type", "--transient-queue", "--quorum-initial-group-size",
         "--delivery-limit", "--ha-mode", "--ha-params", "--ha-sync-mode",
         "--ha-promote-on-shutdown", "--ha-promote-on-failure", "--queue-master-locator",
         "--single-active-consumer", "--max-length", "--overflow", "--dead-letter-exchange",
         "--delayed-retry-type", "--delayed-retry-min", "--delayed-retry-max",
         "--consumer-disconnected-timeout", "--max-priority"]
WORKLOAD = ["--publishers", "--consumers", "--rate", "--consume-rate",
            "--pause-consumers-in-faults", "--backlog", "--priorities", "--publish-timeout",
            "--stay", "--confirm-deadline", "--window", "--prefetch", "--transient-messages", "--no-confirms", "--no-mandatory",
            "--consumer-crash-after", "--reject-share", "--nack-share", "--hold-share",
            "--hold-s", "--consumer-timeout-ms", "--consumer-cancel-notify",
            "--metadata-probe-interval",
            "--metadata-probe-timeout", "--placement-interval"]
NEMESIS = ["--nemesis", "--nemesis-order", "--nemesis-interval", "--nemesis-duration",
           "--nemesis-targets", "--packet-loss", "--packet-scope", "--bandwidth-kbit",
           "--delay-ms"]
BACKEND = ["--backend", "--inventory", "--accept-new-host-keys", "--install-rabbitmq",
           "--docker-image", "--docker-network", "--docker-subnet", "--unsynced-fs",
           "--writeback-expire", "--young-cluster"]
RUN_GROUPS = {"test": TEST, "broker": BROKER, "queue": QUEUE, "workload": WORKLOAD,
              "nemesis": NEMESIS,
              "check": ["--spark-master", "--strict-order", "--unflagged-redeliveries-invalid"],
              "backend": BACKEND}
JUDGEMENT = "judgement (default: the run's spec, else the defaults)"

# Each command's --help sections, in order, and the flags each shows: as before the table.
HELP = {
    "run": {"options": ["--repeat", "--scenario-file", "--replay", "--require-strength"],
            **RUN_GROUPS},
    "matrix": {"options": ["--scenarios", "--with-twins", "--repeat", "--scenario-file",
                           "--vary", "--stay-variants"], **RUN_GROUPS},
    "nightly": {"options": ["--budget", "--scenarios", "--no-twins", "--stay-variants"],
                **RUN_GROUPS},
    "explore": {"options": [], "explore": [
        "--runs", "--hours", "--pool", "--faults", "--targets", "--max-faults", "--queue-types",
        "--partition-handlings", "--stays", "--fixed-workload", "--shrink", "--shrink-max-runs", "--vary",
        "--scenario-file"],
        **RUN_GROUPS},
    "shrink": {"positional arguments": [], "options": [
        "--replays", "--min-fails", "--confirm", "--max-runs", "--any-anomaly", "--store",
        "--no-progress"]},
    "check": {"positional arguments": [],
              "options": ["--spark-master", "--out", "--require-strength"],
              JUDGEMENT: ["--strict-order", "--unflagged-redeliveries-invalid",
                          "--flagged-duplicates-invalid",
                          "--unflagged-duplicates-valid", "--no-require-drain"],
              "Spark": ["--parquet", "--work-dir", "--driver-memory"]},
    "table": {"positional arguments": [],
              "options": ["--recheck", "--scenarios", "--out", "--pairs", "--variant"]},
}


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _sections(help_text: str) -> dict[str, list[str]]:
    """Returns --help's sections in order, each with the flags it shows."""
    out: dict[str, list[str]] = {}
    current = None
    for line in help_text.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = out.setdefault(line[:-1], [])
        elif current is not None and (m := re.match(r"^  (?:-\w, )?(--[a-z-]+)", line)):
            current.append(m.group(1))
    return out


@pytest.mark.parametrize("command", sorted(HELP))
def test_help_groups_every_command_as_before(command):
    shown = _sections(_subparsers()[command].format_help())
    assert list(shown) == list(HELP[command])
    for title, flags in HELP[command].items():
        assert sorted(shown[title]) == sorted(flags + (["--help"] if title == "options" else []))


def test_help_shows_the_specs_own_defaults():
    text = " ".join(_subparsers()["run"].format_help().split())
    spec = TestSpec()
    assert f"seconds of main phase (default {spec.time_limit_s:g})" in text
    assert f"(default {spec.workload.client.prefetch})" in text
    assert f"the RabbitMQ release line (default {spec.broker.rabbitmq}," in text
    assert "{default}" not in text


def test_no_flag_is_declared_twice():
    flags = [o.flag for o in OPTIONS]
    assert len(flags) == len(set(flags))
    assert len({o.name for o in OPTIONS}) == len(OPTIONS)
    # --strict-order is one row, taken by the runs and by check.
    strict = [o for o in OPTIONS if o.flag == "--strict-order"]
    assert len(strict) == 1 and strict[0].commands == RUNS | {"check"}


def test_a_flag_several_commands_take_is_a_row_of_the_table():
    table = {o.flag for o in OPTIONS}
    seen: dict[str, list[str]] = {}
    for command, parser in _subparsers().items():
        for action in parser._actions:
            for flag in action.option_strings:
                seen.setdefault(flag, []).append(command)
    shared = {f for f, commands in seen.items() if len(commands) > 1} - {"-h", "--help"}
    # --out is each command's own output file (check: results.json, table: its tables,
    # archive: the archive), not one setting; --replays is shrink's count of replays of each
    # candidate and finding's series files to count replays in, not one setting either.
    assert shared - table == {"--out", "--replays"}
    for o in OPTIONS:
        assert sorted(seen[o.flag]) == sorted(o.commands), o.flag


def test_every_row_names_a_spec_field_and_a_known_group():
    spec = TestSpec()
    for o in OPTIONS:
        assert o.group in options.GROUPS or o.group == "", o.flag
        assert all(on.group in (None, "", *options.GROUPS) for on in o.on.values()), o.flag
        if o.field is not None:
            get_field(spec, o.field)  # raises AttributeError for a field the spec lacks
            assert o.default is None, f"{o.flag}: a spec option's default is the spec's"


# Values the generic rule (_sample) cannot draw: flag -> (text, the field's value).
SAMPLES: dict[str, tuple[str, Any]] = {
    "--rabbitmq": ("4.0", "4.0"),
    "--writeback-expire": ("off", None),
    "--nemesis": ("kill,pause", ("kill", "pause")),
    "--nemesis-targets": ("leader", "leader"),
    "--consume-rate": ("unlimited", None),
    "--consumer-cancel-notify": ("off", False),
    "--ha-params": ("n1,n2", ["n1", "n2"]),
    "--inventory": ("inventory.toml", str(Path("inventory.toml").resolve())),
    "--work-dir": ("/tmp/spark-work", Path("/tmp/spark-work")),
    "--spark-master": ("spark://h:7077", "spark://h:7077"),
}


def _sample(o: Option, default: Any) -> tuple[list[str], Any]:
    """Returns the command line words that give an option a value other than the spec's
    default, and the value its field then holds."""
    if o.flag in SAMPLES:
        text, value = SAMPLES[o.flag]
        return [o.flag, text], value
    if o.switch is not options.NO_SWITCH:
        return [o.flag], o.switch
    if o.choices:
        choice = next(c for c in o.choices if c != default)
        return [o.flag, choice], choice
    if o.parse in (int, float):
        value = o.parse((default or 2) + 1)
        return [o.flag, str(value)], value
    assert o.parse is None, f"{o.flag}: give it a sample"
    return [o.flag, f"other-{default}"], f"other-{default}"


SPEC_ROWS = [o for o in OPTIONS if o.field is not None]


@pytest.mark.parametrize("o", SPEC_ROWS, ids=[o.flag for o in SPEC_ROWS])
def test_every_option_sets_its_spec_field(o):
    default = get_field(TestSpec(), o.field)
    words, value = _sample(o, default)
    assert value != default
    for command in sorted(o.commands & RUNS):
        a = build_parser().parse_args([command, *words])
        assert get_field(unchecked_spec(a), o.field) == value, command
    if "check" in o.commands:
        a = build_parser().parse_args(["check", "run-dir", *words])
        name = o.field.removeprefix("check.")
        assert getattr(check_options(None, check_overrides(a)), name) == value


@pytest.mark.parametrize("words,field,value", [
    (["--queue", "q2"], "queue.name", "q2"),
    (["--transient-queue"], "queue.durable", False),
    (["--transient-messages"], "workload.client.persistent", False),
    (["--no-confirms"], "workload.client.confirms", False),
    (["--no-mandatory"], "workload.client.mandatory", False),
    (["--consumer-crash-after", "7"], "workload.client.crash_after", 7),
    (["--publish-timeout", "9"], "workload.client.publish_timeout_s", 9.0),
    (["--placement-interval", "0"], "placement_interval_s", 0.0),
    (["--metadata-probe-interval", "1"], "workload.metadata_probe_interval_s", 1.0),
    (["--reject-share", "0.2"], "workload.client.reject_share", 0.2),
    (["--hold-s", "3"], "workload.client.hold_s", 3.0),
    (["--consumer-timeout-ms", "5000"], "workload.client.consumer_timeout_ms", 5000),
    (["--consumer-cancel-notify", "off"], "workload.client.consumer_cancel_notify", False),
    (["--consumer-cancel-notify", "on"], "workload.client.consumer_cancel_notify", True),
    (["--delayed-retry-min", "200"], "queue.delayed_retry_min_ms", 200),
    (["--metadata-probe-timeout", "2.5"], "workload.metadata_probe_timeout_s", 2.5),
    (["--time-limit", "30"], "time_limit_s", 30.0),
    (["--nemesis-interval", "3"], "nemesis.interval_s", 3.0),
    (["--backend", "docker"], "backend.kind", "docker"),
    (["--rabbitmq", "4.0"], "broker.rabbitmq", "4.0"),
])
def test_flags_whose_names_differ_from_their_fields_set_the_right_one(words, field, value):
    spec = unchecked_spec(build_parser().parse_args(["run", *words]))
    assert get_field(spec, field) == value
    assert spec == options.set_field(unchecked_spec(build_parser().parse_args(["run"])),
                                     field, value)


@pytest.mark.parametrize("words,changes", [
    (["--unflagged-duplicates-valid"], {"unflagged_duplicates_invalid": False}),
    (["--no-require-drain"], {"require_drain": False}),
    (["--strict-order", "--flagged-duplicates-invalid", "--driver-memory", "6g"],
     {"strict_order": True, "flagged_duplicates_invalid": True, "driver_memory": "6g"}),
])
def test_check_takes_its_judgement_from_the_table(words, changes):
    given = check_overrides(build_parser().parse_args(["check", "run-dir", *words]))
    assert {k: v for k, v in given.items() if v is not None} == changes


def test_options_not_given_keep_the_base_spec():
    a = build_parser().parse_args(["run", "--scenario", "mirrored-partition"])
    assert unchecked_spec(a) == unchecked_spec(build_parser().parse_args(
        ["run", "--scenario", "mirrored-partition", "--queue-type", "mirrored"]))
    assert all(v is None for v in check_overrides(build_parser().parse_args(
        ["check", "run-dir"])).values())


def test_faults_given_over_a_schedule_draw_them_instead(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[[nemesis.schedule]]\nstart_s = 5.0\nfault = "kill@n1"\n'
                    'duration_s = 10.0\n')
    a = build_parser().parse_args(["run", "--scenario-file", str(path), "--nemesis", "pause"])
    nemesis = unchecked_spec(a).nemesis
    assert (nemesis.order, nemesis.schedule, nemesis.faults) == ("random", (), ("pause",))
    a = build_parser().parse_args(["run", "--scenario-file", str(path)])
    assert unchecked_spec(a).nemesis.order == "once"


BAD = [o for o in OPTIONS if o.choices or o.parse in (int, float, options.rate,
                                                       options.releases)]


@pytest.mark.parametrize("o", BAD, ids=[o.flag for o in BAD])
def test_a_bad_value_exits_2_naming_the_option(o, capsys):
    command = sorted(o.commands)[0]
    words = [command, "run-dir"] if command in ("check", "table") else [command]
    assert main([*words, o.flag, "bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and f"argument {o.flag}" in err and "bogus" in err


@pytest.mark.parametrize("argv,said", [
    (["run", "--net-ticktime", "0"], "net_ticktime (--net-ticktime) must be 1..3600 s"),
    (["run", "--publishers", "0"], "publishers (--publishers) must be >= 1"),
    (["run", "--rate", "0"], "rate (--rate) must be > 0"),
    (["run", "--packet-loss", "2"], "packet_loss (--packet-loss) is a probability"),
    (["run", "--nemesis", "kill:packet_loss=2"], "fault entry 'kill:packet_loss=2'"),
    (["run", "--stay", "publishers", "--confirm-deadline", "30"],
     "--confirm-deadline 30 s is shorter than the liveness bound 42.5 s"),
    (["run", "--stay", "both", "--confirm-deadline", "60", "--net-ticktime", "60"],
     "--confirm-deadline 60 s is shorter than the liveness bound 255 s (1.25 x net_ticktime "
     "(--net-ticktime) 60 s"),
])
def test_a_value_the_spec_refuses_exits_2_naming_the_option(argv, said, capsys):
    assert main(argv) == 2
    assert said in capsys.readouterr().err


# -- every field a user may set -------------------------------------------------------------------

def _leaves(cls: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Returns (dotted name, type) for every field of a spec dataclass, nested parts walked."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            out += _leaves(hint, f"{prefix}{f.name}.")
        else:
            out.append((f"{prefix}{f.name}", hint))
    return out


def _other_text(hint: Any, default: Any) -> str:
    """Returns a value other than `default`, as --vary and a scenario file's key take its text."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is typing.Literal:
        return next(str(a) for a in typing.get_args(hint) if a != default)
    if default is None:
        return _other_text(args[0], None) if args else "3"
    if isinstance(default, bool):
        return "false" if default else "true"
    if isinstance(default, int | float):
        return str(default + 1)
    if isinstance(default, tuple):
        return '[["key", "value"]]' if args and typing.get_args(args[0]) else '["kill"]'
    return {int: "3", float: "2.5", str: "other", Path: "/tmp/other"}.get(hint, f"{default}-x")


def test_every_spec_field_a_user_may_set_has_a_flag_or_a_scenario_file_key():
    flagged = {o.field for o in OPTIONS if o.field is not None}
    spec = TestSpec()
    keyed = []
    for key, hint in _leaves(TestSpec):
        if key in flagged:
            continue
        if key == "nemesis.schedule":  # [[nemesis.schedule]] tables, not one value
            played = loads_scenario('[[nemesis.schedule]]\nstart_s = 5.0\nfault = "kill"\n'
                                    'duration_s = 10.0\n')
            assert played.nemesis.schedule == ((5.0, "kill", 10.0),)
            continue
        default = get_field(spec, key)
        changed = with_setting(spec, key, _other_text(hint, default))
        assert get_field(changed, key) != default, key
        keyed.append(key)
    # Those without a flag are tuning a scenario file (or --vary) sets: none is left out.
    assert "broker.extra" in keyed and "workload.client.heartbeat_s" in keyed
    assert len(flagged) + len(keyed) + 1 == len(_leaves(TestSpec))


def test_backend_flags_set_the_backend_and_unset_ones_keep_the_base(capsys):
    a = build_parser().parse_args(["run", "--backend", "ssh", "--inventory", "inv.toml",
                                   "--accept-new-host-keys", "--install-rabbitmq"])
    o = options.apply_options(TestSpec(), a).backend
    assert (o.kind, o.accept_new_host_keys, o.install_rabbitmq) == ("ssh", True, True)
    assert o.inventory is not None and Path(o.inventory).is_absolute()
    base = TestSpec(backend=BackendOptions(kind="docker", docker_image="mine"))
    assert options.apply_options(base, build_parser().parse_args(["run"])) == base
    assert main(["run", "--backend", "vagrant"]) == 2
    assert "argument --backend: invalid choice: 'vagrant'" in capsys.readouterr().err
