"""The effect of each parameter on each objective metric, per profile, with its interval; and
the sign flips between profiles. Pure.

Matched pairs where they exist, else a linear model; a ratio or a difference as the metric's
record says, and no log of a value <= 0 is ever taken. A flip needs both profiles' intervals to
exclude zero with opposite signs (docs/studies.md#report)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from autotune.core.analysis.study_data import StudyData
from autotune.core.maths.stats import Change, Difference, assumed_log_sd, mean_paired, pooled_sd
from autotune.core.metrics.registry import METRICS, Scale, unit_of
from autotune.core.trial.outcome import TrialOutcome


@dataclass(frozen=True)
class Effect:
    """The effect of setting ``param`` to ``value`` instead of ``base`` on one metric at one
    profile, with its interval, or withheld with the reason."""

    param: str
    value: str
    base: str
    profile: str
    metric: str
    change: Change | Difference | None
    method: str = ""  # "2 matched pairs" | "model over 9 trials", and why a difference
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


@dataclass(frozen=True)
class _Scale:
    """How one metric of one profile is compared over a pool of trials: each trial's value on
    the effect scale (in the pool's order), the noise of one run on that scale, and how an
    effect is built from a difference on it."""

    y: tuple[float, ...]  # log(value) on the ratio scale, the value itself on the difference one
    noise_sd: float
    noise_df: float
    ratio: bool
    unit: str
    why: str = ""  # why a ratio metric is compared as a difference

    def change(self, d: float, se: float, df: float) -> Change | Difference:
        return Change.from_log(d, se, df) if self.ratio else Difference.from_se(d, se, df, self.unit)


def _scale(data: StudyData, pool: Sequence[TrialOutcome], profile: str, metric: str) -> _Scale:
    values = [t.value(profile, metric) for t in pool]
    declared = METRICS[metric].effect_scale if metric in METRICS else Scale.RATIO
    if declared is Scale.RATIO and all(v > 0 for v in values):
        noise = data.noise.of(f"{profile}:{metric}")
        return _Scale(tuple(math.log(v) for v in values), noise.log_sd, noise.df, True, "")
    why = "" if declared is Scale.DIFFERENCE else "as a difference: a trial measured it as 0"
    pooled = pooled_sd(t.results[profile].values(metric) for t in pool)
    if pooled is not None:
        sd, df = pooled[0], float(pooled[1])
    else:  # no repeats: the assumed relative noise at the pool's typical value
        sd, df = assumed_log_sd(metric) * float(np.mean(np.abs(values))), math.inf
    return _Scale(tuple(values), sd, df, False, unit_of(metric), why)


def _matched_diffs(pool: Sequence[TrialOutcome], param: str, base: str, value: str,
                   scale: _Scale) -> list[float]:
    out = []
    for i, a in enumerate(pool):
        if str(a.params.get(param)) != base:
            continue
        rest = {k: v for k, v in a.params.items() if k != param}
        for j, b in enumerate(pool):
            if str(b.params.get(param)) == value and rest == {
                    k: v for k, v in b.params.items() if k != param}:
                out.append(scale.y[j] - scale.y[i])
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


def _model_changes(pool: Sequence[TrialOutcome], profile: str, metric: str, scale: _Scale,
                   levels: Mapping[str, tuple[str, list[str]]]
                   ) -> dict[tuple[str, str], Change | Difference | str]:
    """Least squares of the metric on its effect scale on every parameter at once; the residual
    variance is never taken below the measurement noise. A column the trials cannot separate
    gets a reason."""
    x, columns = _design(pool, levels)
    y = np.array(scale.y)
    rank = np.linalg.matrix_rank(x)
    df = len(pool) - x.shape[1]
    if rank < x.shape[1] or df < 1:
        why = (f"{len(pool)} feasible trials cannot separate {len(columns)} parameter values "
               "from each other; more trials (or matched pairs) needed")
        return {c: why for c in columns}
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    rss = float(np.sum((y - x @ coef) ** 2))
    n_mean = float(np.mean([len(t.results[profile].deployment_means(metric)) for t in pool]))
    resid_var, noise_var = rss / df, scale.noise_sd ** 2 / n_mean
    var, dof = (resid_var, float(df)) if resid_var >= noise_var else (noise_var, scale.noise_df)
    cov = var * np.linalg.inv(x.T @ x)
    return {c: scale.change(float(coef[j + 1]), math.sqrt(cov[j + 1, j + 1]), dof)
            for j, c in enumerate(columns)}


def effects(data: StudyData, metric: str) -> list[Effect]:
    """Per profile, parameter and non-base value: the effect on ``metric`` (trials whose value
    of it is missing or not finite are left out)."""
    out: list[Effect] = []
    for profile in data.profiles:
        pool = [t for t in data.outcomes if t.feasible and t.has(profile, metric)
                and math.isfinite(t.value(profile, metric))]
        if not pool:
            continue
        scale = _scale(data, pool, profile, metric)
        values: dict[str, set[str]] = defaultdict(set)
        for t in pool:
            for k, v in t.params.items():
                values[k].add(str(v))
        levels = {}
        for param in sorted(values):
            if len(values[param]) > 1:
                base = _base_value(data, param, sorted(values[param]))
                levels[param] = (base, sorted(values[param] - {base}))
        model: dict[tuple[str, str], Change | Difference | str] | None = None
        n_each = float(np.mean([len(t.results[profile].deployment_means(metric)) for t in pool]))
        why = f" ({scale.why})" if scale.why else ""
        for param, (base, others) in levels.items():
            for value in others:
                diffs = _matched_diffs(pool, param, base, value, scale)
                if diffs:
                    change = scale.change(*mean_paired(diffs, scale.noise_sd, scale.noise_df, n_each))
                    out.append(Effect(param, value, base, profile, metric, change,
                                      f"{len(diffs)} matched pair{'s' * (len(diffs) > 1)}{why}"))
                    continue
                if model is None:
                    model = _model_changes(pool, profile, metric, scale, levels)
                found = model[(param, value)]
                if isinstance(found, str):
                    out.append(Effect(param, value, base, profile, metric, None, withheld=found))
                else:
                    out.append(Effect(param, value, base, profile, metric, found,
                                      f"model over {len(pool)} trials{why}"))
    return out


@dataclass(frozen=True)
class SignFlip:
    """An effect that helps at one profile and hurts at another, both beyond the noise."""

    param: str
    value: str
    metric: str
    by_profile: Mapping[str, Change | Difference]


def sign_flips(effects_: Sequence[Effect]) -> tuple[list[SignFlip], list[str]]:
    """Flips established by the intervals, and the parameter changes whose point estimates
    change sign without both intervals excluding zero (not claimed; listed as such)."""
    groups: dict[tuple[str, str, str], dict[str, Change | Difference]] = defaultdict(dict)
    for e in effects_:
        if e.change is not None:
            groups[(e.param, e.value, e.metric)][e.profile] = e.change
    flips, unconfirmed = [], []
    for (param, value, metric), by_profile in sorted(groups.items()):
        significant = [c for c in by_profile.values() if c.significant]
        if any(c.sign > 0 for c in significant) and any(c.sign < 0 for c in significant):
            flips.append(SignFlip(param, value, metric, by_profile))
        elif any(c.sign > 0 for c in by_profile.values()) and any(c.sign < 0 for c in by_profile.values()):
            unconfirmed.append(f"{param}={value} ({metric})")
    return flips, unconfirmed


