"""One test held fixed, a few settings varied: `--vary KEY=V1,V2,...` on matrix and explore.

A test's faults (a scenario file's seeded schedule, or an explored candidate's)
stay the same while the queue kind, the broker release line, or any setting a
scenario file names (`queue.type`, `broker.rabbitmq`,
`broker.partition_handling`, `workload.client.prefetch`, ...) takes each of
its values in turn; several `--vary` options make their cross product. The
runs' verdicts then sit side by side in one table (harness.matrix
`variant_table`, a column per value of the first varied key).

A variant that the release line cannot run (a mirrored queue on RabbitMQ 4.0:
clusters.releases says why) is *not applicable*: never run, listed with the
reason. Any other setting that cannot make a test is a usage error before
anything starts.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

from checkers.options import CheckOptions
from clusters.releases import DEFAULT_LINE, DEFAULT_METADATA_STORE, RELEASES, known_line
from harness.matrix import RABBITMQ_KEY, STAY_KEY, settings_of
from harness.scenario_file import with_setting
from harness.spec import SpecError, TestSpec
from workloads.kinds import kind_of

# The help of `--vary` (matrix, explore).
VARY_HELP = ("KEY=V1,V2,...: hold the test's faults fixed and run it once for each value of a "
             "scenario file's setting (queue.type=quorum,mirrored,classic,stream; "
             "broker.rabbitmq=3.10,4.0; workload.client.prefetch=1,100); repeat it for a cross "
             "product. Verdicts side by side, a column per value of the first; a variant the "
             "release cannot run (mirrored on 4.0) is listed not applicable, never run")
# One variant: (key, value text) for each varied setting, in the order the keys were given.
Variant = tuple[tuple[str, str], ...]


def parse_vary(texts: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """Takes `--vary` texts, each KEY=V1,V2,... Returns (key, values) for each, in order.

    Raises SpecError for a text without `=` or values, or a key given twice.
    """
    out: list[tuple[str, tuple[str, ...]]] = []
    for text in texts:
        key, sep, values = (x.strip() for x in text.partition("="))
        said = tuple(v.strip() for v in values.split(",") if v.strip())
        if not sep or not key or not said:
            raise SpecError(f"--vary {text!r}: write KEY=V1,V2,... (e.g. "
                            f"queue.type=quorum,mirrored,classic,stream)")
        if key in (k for k, _v in out):
            raise SpecError(f"--vary {key} is given twice")
        out.append((key, tuple(dict.fromkeys(said))))
    return out


def variants(dims: Sequence[tuple[str, tuple[str, ...]]]) -> list[Variant]:
    """Takes (key, values) dimensions. Returns every combination, the first key's values
    varying slowest ([()] for none: the test as it is)."""
    return [tuple(zip([k for k, _v in dims], combo, strict=True))
            for combo in itertools.product(*(values for _k, values in dims))]


def label(variant: Variant) -> str:
    """Takes a variant. Returns it as a Row's `variant` ("queue.type=mirrored, ..."), leaving
    out the release line (a Row says it on its own)."""
    return ", ".join(f"{k}={v}" for k, v in variant if k != RABBITMQ_KEY)


METADATA_KEY = "broker.metadata_store"  # a metadata store other than Mnesia, as a Row says it


def with_store(variant: str, metadata_store: str | None, line: str | None = None) -> str:
    """Takes a Row's variant, its run's metadata store (None when the spec names none) and its
    release line (None: 3.10). Returns the variant, naming the store when it is not the line's
    default (Mnesia, but Khepri on 4.3, its only store) and the variant does not say it
    already: a Khepri run on 4.0 is a line of a table of its own, never counted with the Mnesia
    runs of its scenario."""
    known = known_line(line or DEFAULT_LINE)
    default = RELEASES[known].default_metadata_store if known else DEFAULT_METADATA_STORE
    if metadata_store in (None, default) or f"{METADATA_KEY}=" in variant:
        return variant
    return ", ".join(filter(None, [variant, f"{METADATA_KEY}={metadata_store}"]))


def with_stay(variant: str, stay: str | None) -> str:
    """Takes a Row's variant and its run's client mode (`workload.stay`; None for a spec that
    names none). Returns the variant naming the mode when clients stayed and the variant does
    not say it already: a run whose clients stay is judged for more than its scenario predicts
    (harness.matrix `expectation_of`), so it is a line of its own, never counted with its
    scenario's runs ("partition (workload.stay=both)" beside "partition")."""
    if stay in (None, "none") or f"{STAY_KEY}=" in variant:
        return variant
    return ", ".join(filter(None, [variant, f"{STAY_KEY}={stay}"]))


def row_variant(spec: TestSpec, keys: Sequence[str]) -> str:
    """Takes a run's spec and the keys its series varies. Returns its Row's variant: its values
    of those keys (`label`), its client mode when clients stay (`with_stay`) and its metadata
    store when it is not its line's default (`with_store`)."""
    said = with_stay(label(settings(spec, keys)), spec.workload.stay)
    return with_store(said, spec.broker.metadata_store, spec.broker.rabbitmq)


def as_varied(spec: TestSpec, variant: str) -> TestSpec:
    """Takes a scenario's spec and a Row's variant ("queue.type=mirrored, workload.stay=both").
    Returns the spec with the variant's settings but the release line (`apply`: what a run of
    that variant played, to compare a stored run with). Raises SpecError for a setting that
    does not exist or a value of the wrong type."""
    said = settings_of(spec.broker.rabbitmq, variant)
    said.pop(RABBITMQ_KEY, None)
    return apply(spec, tuple(said.items()))


def stay_modes(name: str, spec: TestSpec, modes: Sequence[str]
               ) -> tuple[list[TestSpec], list[tuple[str, str]]]:
    """Takes a test's name, its validated spec and client modes (`--stay-variants`: "none" is
    the test as it is, "publishers", "consumers" or "both" its clients staying). Returns the
    spec of each mode that makes a test, validated, and (mode, reason) for each that does not
    (staying consumers of a test whose consumers crash by design): a mode asked of every
    scenario at once is not applicable to some, never a usage error."""
    made: list[TestSpec] = []
    refused: list[tuple[str, str]] = []
    for mode in modes:
        varied = with_setting(spec, STAY_KEY, mode)
        try:
            varied.validate()
        except SpecError as e:
            refused.append((mode, f"{name} with --stay {mode}: {e}"))
            continue
        made.append(varied)
    return made, refused


def apply(spec: TestSpec, variant: Variant) -> TestSpec:
    """Takes a spec and a variant. Returns the spec with the variant's settings and its queue
    kind's check rules (`rekinded`; not validated). Raises SpecError naming a setting that does
    not exist or a value of the wrong type."""
    varied = spec
    for key, value in variant:
        varied = with_setting(varied, key, value)
    return rekinded(spec, varied)


def rekinded(before: TestSpec, after: TestSpec) -> TestSpec:
    """Takes a spec and the same spec with settings changed. Returns the latter with its queue
    kind's check rules, those the former kind imposed reset to their defaults when the kind
    changed (a stream's duplicates allowed must not judge a quorum queue)."""
    old = kind_of(before.queue)
    if type(kind_of(after.queue)) is not type(old):
        defaults = CheckOptions()
        undo = {k: getattr(defaults, k) for k in old.check_rules()}
        after = dataclasses.replace(after, check=dataclasses.replace(after.check, **undo))
    return after.for_queue()


def expand(name: str, spec: TestSpec, dims: Sequence[tuple[str, tuple[str, ...]]]
           ) -> tuple[list[tuple[TestSpec, Variant]], list[tuple[Variant, str]]]:
    """Takes a test's name, its spec and the varied dimensions. Returns (spec, variant) for each
    variant that can run, each validated, and (variant, reason) for each its release line
    cannot run. Raises SpecError (naming the test and variant) for any other that cannot make a
    test."""
    runnable: list[tuple[TestSpec, Variant]] = []
    refused: list[tuple[Variant, str]] = []
    for variant in variants(dims):
        varied = apply(spec, variant)
        why = varied.refusal()
        if why:
            refused.append((variant, why))
            continue
        try:
            varied.validate()
        except SpecError as e:
            said = ", ".join(f"{k}={v}" for k, v in variant)
            raise SpecError(f"{name} with {said}: {e}") from e
        runnable.append((varied, variant))
    return runnable, refused


def settings(spec: TestSpec, keys: Sequence[str]) -> Variant:
    """Takes a spec and varied keys. Returns the spec's value of each, as text (what `label`
    shows for a run)."""
    def get(obj: Any, parts: list[str]) -> Any:
        return obj if not parts else get(getattr(obj, parts[0]), parts[1:])
    def text(v: Any) -> str:
        return "none" if v is None else str(v)
    return tuple((k, text(get(spec, k.split(".")))) for k in keys)
