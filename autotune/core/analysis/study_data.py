"""A study's trials as analysis sees them (``StudyData``): the front, estimates with intervals,
changes against the baseline, the pooled noise, finalists and failures. Pure: built by the
study layer, read by ``core.analysis.recommendation`` and ``core.analysis.effects``; rendering
happens elsewhere.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from autotune.core.maths.pareto import pareto_front
from autotune.core.maths.stats import (
    Comparison,
    Estimate,
    Noise,
    NoiseModel,
    Spread,
    deployment_noise,
    judge,
    pooled_sd,
    redeployment_prior,
)
from autotune.core.metrics.registry import METRICS, THROUGHPUT_METRIC
from autotune.core.space.search_space import Value
from autotune.core.trial.capacity_search import Incumbent, by_load
from autotune.core.trial.objectives import Objective
from autotune.core.trial.outcome import TrialOutcome


@dataclass(frozen=True)
class StudyData:
    """What analysis needs of a study."""

    outcomes: tuple[TrialOutcome, ...]
    objectives: tuple[Objective, ...]
    noise: NoiseModel
    baseline: TrialOutcome | None = None
    defaults: Mapping[str, Value] = field(default_factory=dict)  # vLLM's value per parameter
    loads: Mapping[str, float] = field(default_factory=dict)  # profile -> concurrency it runs at
    repeats: int = 1  # runs per profile of one deployment: what a confirmation round adds
    confirmed: frozenset[int] = frozenset()  # trials whose results are confirmed runs
    deployment_s: float | None = None  # one redeployment's measured cost (deployment_cost_s)
    smallest_difference: float = 0.05  # the relative difference worth caring about: the margin

    def objective_for(self, use: str) -> Objective:
        """The objective of a use: interactive, the one on the profile with the lowest
        concurrency (the first such); throughput, the one on the highest (the last such).
        Profiles of unknown concurrency (an imported study) fall back to the objectives' order."""
        order = {o.name: i for i, o in enumerate(self.objectives)}
        if use == "interactive":
            return min(self.objectives, key=lambda o: (self.loads.get(o.profile, 0.0), order[o.name]))
        return max(self.objectives, key=lambda o: (self.loads.get(o.profile, 0.0), order[o.name]))

    @property
    def profiles(self) -> list[str]:
        seen = dict.fromkeys(o.profile for o in self.objectives)
        for t in self.outcomes:
            seen.update(dict.fromkeys(t.results))
        return list(seen)

    @property
    def feasible(self) -> list[TrialOutcome]:
        return [t for t in self.outcomes if t.feasible
                and all(t.has(o.profile, o.metric) for o in self.objectives)]

    def estimate(self, t: TrialOutcome, profile: str, metric: str) -> Estimate:
        return t.estimate(profile, metric, self.noise.of(f"{profile}:{metric}"))

    def objective_estimate(self, t: TrialOutcome, o: Objective) -> Estimate:
        return self.estimate(t, o.profile, o.metric)

    def costs(self, t: TrialOutcome) -> tuple[float, ...]:
        return tuple(o.cost(t.value(o.profile, o.metric)) for o in self.objectives)

    def front(self) -> list[TrialOutcome]:
        """Feasible non-dominated trials, ordered by the first objective, best first."""
        return sorted(pareto_front(self.feasible, self.costs), key=self.costs)

    def changes_from_defaults(self, t: TrialOutcome) -> dict[str, Value]:
        return {k: v for k, v in sorted(t.params.items())
                if k in self.defaults and self.defaults[k] != v}

    @property
    def reference_point(self) -> str:
        return "baseline" if self.baseline is not None else "vLLM's defaults"

    def differences(self, t: TrialOutcome) -> dict[str, Value]:
        """What ``t`` changes from the baseline, or from vLLM's defaults without one."""
        if self.baseline is not None:
            return differing_params(t, self.baseline)
        return self.changes_from_defaults(t)

    def judge(self, t: TrialOutcome, other: TrialOutcome, o: Objective) -> Comparison:
        """``t`` against ``other`` on objective ``o``: better, worse, equivalent or undecided
        (``stats.judge``, at the study's smallest difference)."""
        return judge(self.objective_estimate(t, o), self.objective_estimate(other, o),
                     margin=self.smallest_difference, minimize=o.minimize)

    def versus_baseline(self, t: TrialOutcome, profile: str, metric: str) -> Comparison | None:
        """``t`` against the baseline on one metric, by the one verdict rule (None: no
        baseline, ``t`` is it, or a value <= 0 leaves no ratio)."""
        b = self.baseline
        if b is None or not b.feasible or not b.has(profile, metric) or b.number == t.number:
            return None
        mine, theirs = self.estimate(t, profile, metric), self.estimate(b, profile, metric)
        if not (mine.mean > 0 and theirs.mean > 0):
            return None  # no ratio of a value <= 0 (a hit rate of 0): no relative change
        higher = METRICS[metric].higher_is_better if metric in METRICS else False
        return judge(mine, theirs, margin=self.smallest_difference, minimize=not higher)


def incumbents(data: StudyData, profile: str) -> tuple[Incumbent, ...]:
    """Every feasible trial's capacity on ``profile`` with its costs on the objectives of the
    other profiles: what a new capacity search may start from (``core.trial.capacity_search``)."""
    return tuple(
        Incumbent(t.number, t.capacity[profile].boundary.load,
                  t.value(profile, THROUGHPUT_METRIC),
                  {o.name: o.cost(t.value(o.profile, o.metric))
                   for o in data.objectives if o.profile != profile})
        for t in data.feasible if profile in t.capacity)


def _spread_groups(outcomes: Sequence[TrialOutcome]
                   ) -> tuple[dict[str, list[list[float]]], dict[str, list[list[float]]]]:
    """Per ``profile:metric``, the runs of each deployment (within) and each configuration's
    deployment means where it was deployed more than once (between)."""
    within: dict[str, list[list[float]]] = defaultdict(list)
    between: dict[str, list[list[float]]] = defaultdict(list)
    for t in outcomes:
        if not t.feasible:
            continue
        for profile, result in t.results.items():
            for metric in dict.fromkeys(k for r in result.runs for k in r):
                key = f"{profile}:{metric}"
                means = result.deployment_means(metric)
                if len(means) > 1:
                    between[key].append(means)
                if profile not in t.capacity:  # below: every load a search measured more than once
                    within[key].extend(result.by_deployment(metric))
        for profile, found in t.capacity.items():
            for runs in by_load(found.probes).values():
                for metric in runs[0]:
                    within[f"{profile}:{metric}"].append([r[metric] for r in runs if metric in r])
    return within, between


def noise_of(outcomes: Sequence[TrialOutcome], platform: str = "",
             inherited: Mapping[str, Spread] | None = None) -> NoiseModel:
    """The noise of one deployment's mean per ``profile:metric`` (``stats.deployment_noise``):
    between the deployments of every feasible trial deployed more than once, pooled with the
    spread ``inherited`` from other studies under the same conditions, never below the repeats
    within its deployments (for a capacity profile: the runs at every load its search measured
    more than once); before any redeployment, measured or inherited, ``platform``'s assumed
    spread."""
    within, between = _spread_groups(outcomes)
    inherited = inherited or {}
    out: dict[str, Noise] = {}
    for key in {**within, **between}:
        noise = deployment_noise(within.get(key, []), between.get(key, []),
                                 redeployment_prior(key, platform), inherited.get(key))
        if noise is not None:
            out[key] = noise
    return NoiseModel(out, platform)


def measured_spreads(outcomes: Sequence[TrialOutcome]) -> dict[str, tuple[float, int]]:
    """This study's own spread between deployments per ``profile:metric`` (log-sd, degrees of
    freedom), from its trials deployed more than once: what another study may inherit."""
    _, between = _spread_groups(outcomes)
    out = {}
    for key, groups in between.items():
        logs = [np.log(np.asarray(g, dtype=float)) for g in groups
                if all(v > 0 and math.isfinite(v) for v in g)]
        found = pooled_sd(logs)
        if found is not None:
            out[key] = (found[0], found[1])
    return out


def noise_line(data: StudyData) -> str:
    """One line under every table that rests on noise: per objective, whether the spread
    behind its intervals is measured (with its degrees of freedom) or assumed, and how large."""
    parts = []
    for o in data.objectives:
        n = data.noise.of(o.name)
        kind = "assumed" if n.assumed else f"measured, {n.df:.0f} df"
        parts.append(f"{o.label}: {kind}, log-sd {n.log_sd:.3f} ({n.source})")
    return "noise: " + ("; ".join(parts) or "no objective")


def differing_params(t: TrialOutcome, baseline: TrialOutcome | None) -> dict[str, Value]:
    """Parameters whose value differs from the baseline's (all of them without a baseline)."""
    if baseline is None:
        return dict(t.params)
    keys = set(t.params) | set(baseline.params)
    return {k: t.params.get(k) for k in sorted(keys) if t.params.get(k) != baseline.params.get(k)}


def format_params(params: Mapping[str, Value]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def failures_by_class(outcomes: Sequence[TrialOutcome]) -> dict[str, list[TrialOutcome]]:
    out: dict[str, list[TrialOutcome]] = defaultdict(list)
    for t in outcomes:
        if t.failure is not None:
            out[t.failure.name].append(t)
    return dict(sorted(out.items()))


def finalists(data: StudyData, k: int) -> list[TrialOutcome]:
    """Up to ``k`` members of the front, spread along it (its two ends first), and the
    baseline when it is feasible: what a confirmation deploys again."""
    front = data.front()
    if len(front) > k:
        picks = sorted({round(i * (len(front) - 1) / max(k - 1, 1)) for i in range(k)})
        front = [front[i] for i in picks]
    base = data.baseline
    if base is not None and base.feasible and all(t.number != base.number for t in front):
        front.append(base)
    return front
