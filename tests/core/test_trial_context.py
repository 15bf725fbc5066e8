"""A trial's context (core.plan.trial_context): the node's fixed setup and the study's bench
plan, with one deployment's own values; the node's records are never changed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.core.deployment.slots import Slot
from autotune.core.plan.trial_context import BenchSpec, TrialValues, trial_context
from autotune.core.trial.capacity_search import Boundary
from autotune.core.workload.profiles import get_profile


@dataclass(frozen=True)
class Node:
    """The fields of study.run.trial_function.TrialSetup that trial_context sets, and two it keeps."""

    model: str
    workdir: Path
    slot: Slot
    startup_timeout_s: float
    extra_env: tuple[tuple[str, str], ...] = ()
    validated: object = None


NODE = Node(model="", workdir=Path("/node"), slot=Slot("cpu", (0, 1), 1), startup_timeout_s=90.0)
BENCH = BenchSpec(profiles=(get_profile("low-concurrency"),), sources={}, repeats=2, seed=7)


def test_a_trial_gets_its_own_folder_marker_and_verdict_on_the_nodes_slot():
    setup, bench = trial_context(NODE, BENCH, TrialValues(
        model="m", workdir=Path("/node/trials/s/trial-0003"),
        extra_env=(("AUTOTUNE_TRIAL", "uid:3"),), validated="checked"))
    assert (setup.model, setup.workdir, setup.extra_env, setup.validated) == (
        "m", Path("/node/trials/s/trial-0003"), (("AUTOTUNE_TRIAL", "uid:3"),), "checked")
    assert (setup.slot, setup.startup_timeout_s) == (NODE.slot, 90.0)  # the node's, unchanged
    assert (NODE.model, NODE.workdir, NODE.extra_env) == ("", Path("/node"), ())
    assert bench == BENCH  # no study data, no budget: the study's plan as it is


def test_a_confirmation_reprobes_the_boundary_its_search_found():
    found = {"capacity": Boundary(8.0, 16.0, 11.5, "bracketed", ())}
    _, bench = trial_context(NODE, BENCH, TrialValues(model="m", workdir=Path("/c"), around=found))
    assert bench.around == found
    assert (bench.race, dict(bench.incumbents), dict(bench.run_seconds)) == (None, {}, {})
