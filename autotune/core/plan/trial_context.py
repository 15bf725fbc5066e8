"""A trial's context, built in one place: the node's fixed setup and the study's ``BenchSpec``,
combined with what differs per trial (its folder, what the study measured so far, the
time left). Search trials, calibration and confirmation deployments all come from here. Pure."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from autotune.core.analysis.study_data import StudyData, incumbents
from autotune.core.trial.capacity_search import Boundary, Incumbent
from autotune.core.trial.objectives import Objective
from autotune.core.trial.precision import Pinned, balanced_pins, within_budget
from autotune.core.trial.racing import Member, Race
from autotune.core.workload.profiles import WorkloadProfile
from autotune.core.workload.requests import RequestSource


@dataclass(frozen=True)
class BenchSpec:
    """How each deployment is measured: each profile's requests come from its source in
    ``sources`` (by profile name). Fixed profiles run ``repeats`` times; a capacity
    profile searches its load (after the fixed ones), starting at an incumbent's load where one
    of ``incumbents`` is at least as good on the study's other ``objectives``."""

    profiles: tuple[WorkloadProfile, ...]
    sources: Mapping[str, RequestSource]
    repeats: int = 1
    seed: int = 0
    objectives: tuple[Objective, ...] = ()
    incumbents: Mapping[str, tuple[Incumbent, ...]] = field(default_factory=dict)
    race: Race | None = None  # the front to race against (None: every run is measured)
    run_seconds: Mapping[str, float] = field(default_factory=dict)  # expected seconds per run
    # Where an earlier search of this configuration ended, by capacity profile: a confirmation
    # re-probes there instead of searching again.
    around: Mapping[str, Boundary] = field(default_factory=dict)
    # By fixed profile: the metrics its runs must pin and the rule that stops them once they
    # are (core.trial.precision); a profile not named sends its num_prompts every run.
    pinned: Mapping[str, Pinned] = field(default_factory=dict)

    @property
    def balanced(self) -> bool:
        """Whether some profile's runs stop at the balanced length (``precision.Balance``)."""
        return any(p.rule.balance is not None for p in self.pinned.values())

    def measured(self, data: StudyData) -> BenchSpec:
        """This spec with its balanced stop rules set from what the study ``data`` measured:
        its spread between deployments and its cost of a deployment, where it has them."""
        return dataclasses.replace(self, pinned=balanced_pins(self.pinned, data.noise,
                                                              data.deployment_s))


@dataclass(frozen=True)
class TrialValues:
    """What one deployment has of its own. ``data``: the study's data with its confirmed runs
    (balanced stops); ``search``: without them (run durations, incumbents, the front to race;
    None: a confirmation, which takes none of those); ``run_s``: the seconds a time budget
    leaves the fixed runs (None: no budget); ``around``: a capacity search's boundary to
    re-probe (a confirmation)."""

    model: str
    workdir: Path
    extra_env: tuple[tuple[str, str], ...] = ()
    validated: Any = None  # vLLM's verdict, reached before the trial (None: the trial validates)
    data: StudyData | None = None
    search: StudyData | None = None
    race: bool = False
    run_s: float | None = None
    around: Mapping[str, Boundary] = field(default_factory=dict)


_Setup = TypeVar("_Setup")


def trial_context(node: _Setup, bench: BenchSpec, trial: TrialValues) -> tuple[_Setup, BenchSpec]:
    """The setup and ``BenchSpec`` of one deployment: ``node`` (a frozen record with
    ``model``, ``workdir``, ``extra_env`` and ``validated``: where this node deploys, the same
    for all its trials) and the study's ``bench``, with ``trial``'s values."""
    setup = dataclasses.replace(node, model=trial.model, workdir=trial.workdir,  # type: ignore[type-var]
                                extra_env=trial.extra_env, validated=trial.validated)
    if bench.balanced and trial.data is not None:
        bench = bench.measured(trial.data)
    changes: dict[str, Any] = {}
    search = trial.search
    capacity = [p.name for p in bench.profiles if p.capacity is not None]
    if search is not None and (capacity or trial.race):
        changes["run_seconds"] = run_seconds(search)
        if capacity:
            changes["incumbents"] = {p: incumbents(search, p) for p in capacity}
        elif trial.race and search.front():
            changes["race"] = Race(bench.objectives, tuple(
                Member(t.label, tuple(search.objective_estimate(t, o) for o in bench.objectives))
                for t in search.front()), search.noise)
    if trial.around:
        changes["around"] = dict(trial.around)
    changes["pinned"] = within_budget(bench.pinned, trial.run_s, len(bench.pinned) * bench.repeats)
    return setup, dataclasses.replace(bench, **changes)


def run_seconds(data: StudyData) -> dict[str, float]:
    """The median duration of one run per profile over the study's measured trials."""
    found: dict[str, list[float]] = {}
    for t in data.feasible:
        for profile, result in t.results.items():
            found.setdefault(profile, []).extend(result.values("duration"))
    return {p: statistics.median(v) for p, v in found.items() if v}
