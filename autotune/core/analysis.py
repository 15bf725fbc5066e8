"""Analysis of a study's trials: the front, recommendations with ties, effects and sign flips,
each with its interval. Pure: takes ``StudyData`` (built by the study layer) and returns records;
rendering happens elsewhere.

Rules that keep claims honest:
- a difference whose interval contains zero is a tie: ``recommend`` lists the tied trials and
  prefers the one that changes fewest flags from vLLM's defaults;
- a parameter's effect comes from matched pairs of trials that differ in that parameter only
  (as the reference configs do) where they exist, otherwise from a linear model of the log
  metric over all feasible trials; with too few trials to separate it, it is withheld;
- a sign flip is claimed only when two profiles' intervals both exclude zero with opposite signs.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from autotune.core.capacity import Incumbent, by_load
from autotune.core.objectives import Objective
from autotune.core.outcome import TrialOutcome
from autotune.core.pareto import knee, pareto_front
from autotune.core.space import Value
from autotune.core.stats import Change, Estimate, NoiseModel, compare, mean_log_change, pooled_noise

USES = ("interactive", "throughput", "balanced")


@dataclass(frozen=True)
class StudyData:
    """What analysis needs of a study."""

    outcomes: tuple[TrialOutcome, ...]
    objectives: tuple[Objective, ...]
    noise: NoiseModel
    baseline: TrialOutcome | None = None
    defaults: Mapping[str, Value] = field(default_factory=dict)  # vLLM's value per parameter
    loads: Mapping[str, float] = field(default_factory=dict)  # profile -> concurrency it runs at

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

    def versus_baseline(self, t: TrialOutcome, profile: str, metric: str) -> Change | None:
        b = self.baseline
        if b is None or not b.feasible or not b.has(profile, metric) or b.number == t.number:
            return None
        return compare(self.estimate(t, profile, metric), self.estimate(b, profile, metric))


def incumbents(data: StudyData, profile: str) -> tuple[Incumbent, ...]:
    """Every feasible trial's capacity on ``profile`` with its costs on the objectives of the
    other profiles: what a new capacity search may start from (``core.capacity``)."""
    return tuple(
        Incumbent(t.number, t.capacity[profile].boundary.load,
                  t.value(profile, "output_throughput"),
                  {o.name: o.cost(t.value(o.profile, o.metric))
                   for o in data.objectives if o.profile != profile})
        for t in data.feasible if profile in t.capacity)


def noise_of(outcomes: Sequence[TrialOutcome]) -> NoiseModel:
    """Pooled noise per ``profile:metric`` from the repeats of every feasible trial; for a
    capacity profile, from the runs at every load its search measured more than once."""
    groups: dict[str, list[list[float]]] = defaultdict(list)
    for t in outcomes:
        if not t.feasible:
            continue
        for profile, result in t.results.items():
            if profile in t.capacity:
                continue  # below: every load a search measured more than once
            for metric in (result.runs[0] if result.runs else {}):
                groups[f"{profile}:{metric}"].append(result.values(metric))
        for profile, found in t.capacity.items():
            for runs in by_load(found.probes).values():
                for metric in runs[0]:
                    groups[f"{profile}:{metric}"].append([r[metric] for r in runs if metric in r])
    return pooled_noise(groups)


def differing_params(t: TrialOutcome, baseline: TrialOutcome | None) -> dict[str, Value]:
    """Parameters whose value differs from the baseline's (all of them without a baseline)."""
    if baseline is None:
        return dict(t.params)
    keys = set(t.params) | set(baseline.params)
    return {k: t.params.get(k) for k in sorted(keys) if t.params.get(k) != baseline.params.get(k)}


def describe_params(params: Mapping[str, Value]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


# --------------------------------------------------------------------------- recommendations


@dataclass(frozen=True)
class Recommendation:
    """The trial picked for a use, the trials the noise cannot separate from it, and why."""

    use: str
    trial: TrialOutcome
    tied: tuple[TrialOutcome, ...]
    reason: str


class NoFeasibleTrial(Exception):
    """No trial of the study can be recommended yet."""


def _tied(data: StudyData, best: TrialOutcome, pool: Sequence[TrialOutcome],
          objectives: Sequence[Objective]) -> list[TrialOutcome]:
    """Members of ``pool`` whose difference to ``best`` is within the noise on every one of
    ``objectives`` (``best`` included)."""
    return [t for t in pool if t.number == best.number or not any(
        compare(data.objective_estimate(t, o), data.objective_estimate(best, o)).significant
        for o in objectives)]


def recommend(data: StudyData, use: str) -> Recommendation:
    """interactive: best on the objective of the lowest-concurrency profile (default: mean
    E2EL); throughput: best on the objective of the highest-concurrency profile (default:
    output throughput); balanced: the knee of the front. Among trials the noise cannot
    separate from that pick, the one with the fewest changes from vLLM's defaults is
    recommended."""
    pool = data.feasible
    if not pool:
        raise NoFeasibleTrial("no feasible trial in the study yet: run more trials first")
    if use == "balanced":
        front = data.front()
        best = knee(front, data.costs)
        objectives: Sequence[Objective] = data.objectives
        tied = _tied(data, best, pool, objectives)  # off the front but not separable: a tie
        why = (f"the knee of the front ({len(front)} trial(s)): closest to the ideal of "
               f"{' and '.join(o.label for o in objectives)} once each is scaled to the front")
    else:
        o = data.objective_for(use)
        best = min(pool, key=lambda t: o.cost(t.value(o.profile, o.metric)))
        objectives = (o,)
        tied = _tied(data, best, pool, objectives)
        why = f"the {'lowest' if o.minimize else 'highest'} {o.label}"
    pick = min(tied, key=lambda t: (len(data.changes_from_defaults(t)), data.costs(t)))
    values = "; ".join(f"{o.label}: {data.objective_estimate(pick, o).text}" for o in data.objectives)
    text = f"Trial {pick.label} for {use} use: {values} (mean [95% interval])."
    others = [t for t in tied if t.number != pick.number]
    if others:
        text += (f" It is tied within the noise with {', '.join(t.label for t in others)} for "
                 f"{why}; of these it changes the fewest flags from vLLM's defaults "
                 f"({len(data.changes_from_defaults(pick))}).")
    else:
        text += f" It has {why}, beyond the noise."
    changes = data.changes_from_defaults(pick)
    text += f" Changes from vLLM's defaults: {describe_params(changes) or 'none'}."
    text += baseline_sentence(data, pick)
    return Recommendation(use, pick, tuple(others), text)


def baseline_sentence(data: StudyData, t: TrialOutcome) -> str:
    parts = []
    for o in data.objectives:
        change = data.versus_baseline(t, o.profile, o.metric)
        if change is not None:
            verdict = "beyond the noise" if change.significant else "a tie"
            parts.append(f"{o.label} {change.text} ({verdict})")
    if not parts:
        return ""
    assert data.baseline is not None
    return f" Against the baseline {data.baseline.label}: " + "; ".join(parts) + "."


# --------------------------------------------------------------------------- effects


@dataclass(frozen=True)
class Effect:
    """The effect of setting ``param`` to ``value`` instead of ``base`` on one metric at one
    profile, with its interval, or withheld with the reason."""

    param: str
    value: str
    base: str
    profile: str
    metric: str
    change: Change | None
    method: str = ""  # "2 matched pairs" | "model over 9 trials"
    withheld: str = ""

    @property
    def verdict(self) -> str:
        if self.change is None:
            return f"withheld: {self.withheld}"
        if not self.change.significant:
            return f"no effect detected ({self.change.text})"
        return self.change.text


def _base_value(data: StudyData, param: str, values: Sequence[str]) -> str:
    for source in ((data.baseline.params if data.baseline else {}), data.defaults):
        if param in source and str(source[param]) in values:
            return str(source[param])
    return sorted(values)[0]


def _matched_diffs(pool: Sequence[TrialOutcome], param: str, base: str, value: str,
                   profile: str, metric: str) -> list[float]:
    out = []
    for a in pool:
        if str(a.params.get(param)) != base:
            continue
        rest = {k: v for k, v in a.params.items() if k != param}
        for b in pool:
            if str(b.params.get(param)) == value and rest == {
                    k: v for k, v in b.params.items() if k != param}:
                out.append(math.log(b.value(profile, metric) / a.value(profile, metric)))
    return out


def _design(pool: Sequence[TrialOutcome], levels: Mapping[str, tuple[str, list[str]]]
            ) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """One-hot columns (reference coding against each parameter's base value) and an
    intercept."""
    columns = [(p, v) for p, (_, others) in levels.items() for v in others]
    x = np.ones((len(pool), len(columns) + 1))
    for i, t in enumerate(pool):
        for j, (p, v) in enumerate(columns):
            x[i, j + 1] = float(str(t.params.get(p)) == v)
    return x, columns


def _model_changes(data: StudyData, pool: Sequence[TrialOutcome], profile: str, metric: str,
                   levels: Mapping[str, tuple[str, list[str]]]) -> dict[tuple[str, str], Change | str]:
    """Least squares of log(metric) on every parameter at once; the residual variance is never
    taken below the measurement noise. A column the trials cannot separate gets a reason."""
    x, columns = _design(pool, levels)
    y = np.log([t.value(profile, metric) for t in pool])
    rank = np.linalg.matrix_rank(x)
    df = len(pool) - x.shape[1]
    if rank < x.shape[1] or df < 1:
        why = (f"{len(pool)} feasible trials cannot separate {len(columns)} parameter values "
               "from each other; more trials (or matched pairs) needed")
        return {c: why for c in columns}
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    rss = float(np.sum((y - x @ coef) ** 2))
    noise = data.noise.of(f"{profile}:{metric}")
    n_mean = float(np.mean([len(t.results[profile].values(metric)) for t in pool]))
    resid_var, noise_var = rss / df, noise.log_sd ** 2 / n_mean
    var, dof = (resid_var, float(df)) if resid_var >= noise_var else (noise_var, noise.df)
    cov = var * np.linalg.inv(x.T @ x)
    return {c: Change.from_log(float(coef[j + 1]), math.sqrt(cov[j + 1, j + 1]), dof)
            for j, c in enumerate(columns)}


def effects(data: StudyData, metric: str) -> list[Effect]:
    """Per profile, parameter and non-base value: the effect on ``metric``."""
    out: list[Effect] = []
    for profile in data.profiles:
        pool = [t for t in data.outcomes if t.feasible and t.has(profile, metric)]
        values: dict[str, set[str]] = defaultdict(set)
        for t in pool:
            for k, v in t.params.items():
                values[k].add(str(v))
        levels = {}
        for param in sorted(values):
            if len(values[param]) > 1:
                base = _base_value(data, param, sorted(values[param]))
                levels[param] = (base, sorted(values[param] - {base}))
        model: dict[tuple[str, str], Change | str] | None = None
        n_each = float(np.mean([len(t.results[profile].values(metric)) for t in pool])) if pool else 1
        for param, (base, others) in levels.items():
            for value in others:
                diffs = _matched_diffs(pool, param, base, value, profile, metric)
                if diffs:
                    change = mean_log_change(diffs, data.noise.of(f"{profile}:{metric}"), n_each)
                    out.append(Effect(param, value, base, profile, metric, change,
                                      f"{len(diffs)} matched pair{'s' * (len(diffs) > 1)}"))
                    continue
                if model is None:
                    model = _model_changes(data, pool, profile, metric, levels)
                found = model[(param, value)]
                if isinstance(found, str):
                    out.append(Effect(param, value, base, profile, metric, None, withheld=found))
                else:
                    out.append(Effect(param, value, base, profile, metric, found,
                                      f"model over {len(pool)} trials"))
    return out


@dataclass(frozen=True)
class SignFlip:
    """An effect that helps at one profile and hurts at another, both beyond the noise."""

    param: str
    value: str
    metric: str
    by_profile: Mapping[str, Change]


def sign_flips(effects_: Sequence[Effect]) -> tuple[list[SignFlip], list[str]]:
    """Flips established by the intervals, and the parameter changes whose point estimates
    change sign without both intervals excluding zero (not claimed; listed as such)."""
    groups: dict[tuple[str, str, str], dict[str, Change]] = defaultdict(dict)
    for e in effects_:
        if e.change is not None:
            groups[(e.param, e.value, e.metric)][e.profile] = e.change
    flips, unconfirmed = [], []
    for (param, value, metric), by_profile in sorted(groups.items()):
        significant = [c for c in by_profile.values() if c.significant]
        if any(c.pct > 0 for c in significant) and any(c.pct < 0 for c in significant):
            flips.append(SignFlip(param, value, metric, by_profile))
        elif any(c.pct > 0 for c in by_profile.values()) and any(c.pct < 0 for c in by_profile.values()):
            unconfirmed.append(f"{param}={value} ({metric})")
    return flips, unconfirmed


def failures_by_class(outcomes: Sequence[TrialOutcome]) -> dict[str, list[TrialOutcome]]:
    out: dict[str, list[TrialOutcome]] = defaultdict(list)
    for t in outcomes:
        if t.failure is not None:
            out[t.failure.value].append(t)
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
