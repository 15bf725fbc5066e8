"""Uncertainty of measured numbers: intervals, pooled noise, relative changes. Pure.
Noise on shared machines is multiplicative (a busy core slows a whole run by a share), so all is
on the log scale; a metric's noise is that of one deployment's mean (``deployment_noise``;
docs/noise.md#how-a-trials-interval-is-formed). A ``Change`` is a relative difference with its
interval, a ``Difference`` an absolute one for metrics that can be 0 (a rate, a count); a change
whose interval contains zero is a tie, never a finding."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from scipy.special import ndtr, ndtri, stdtrit  # scipy.stats costs a second to import

from autotune.core.maths.numbers import number_text
from autotune.core.maths.platforms import PLATFORMS
from autotune.core.metrics.registry import ASSUMED_LOG_SD, METRICS

LEVEL = 0.95


@functools.lru_cache(maxsize=4096)
def t_quantile(df: float, level: float = LEVEL) -> float:
    """Two-sided quantile of Student's t (the normal one for infinite df). Memoised: a
    recommendation asks for the same few degrees of freedom hundreds of times."""
    q = 0.5 + level / 2
    return float(ndtri(q) if math.isinf(df) else stdtrit(df, q))


def assumed_log_sd(metric: str) -> float:
    """The noise assumed for ``metric`` before a study has repeats (its registry record's)."""
    return METRICS[metric].assumed_log_sd if metric in METRICS else ASSUMED_LOG_SD


@dataclass(frozen=True)
class Noise:
    """The noise of one metric: log-scale standard deviation and its degrees of freedom."""

    log_sd: float
    df: float  # inf when assumed
    source: str  # "pooled from 12 repeats of 6 trials" | "assumed"
    # The spread between deployments measured (own or inherited) where there is one, even
    # when the repeats' floor is larger: what the run-length balance needs (sigma_b).
    between_log_sd: float | None = None

    @property
    def assumed(self) -> bool:
        return math.isinf(self.df)


def redeployment_prior(key: str, platform: str = "") -> Noise:
    """The assumed noise of one deployment's mean of ``key`` ('profile:metric' or a metric)
    before any redeployment: the platform's measured spread between deployments (its
    ``Platform.between_log_sd``; a study measures its own once it redeploys, docs/noise.md), scaled up for
    a metric that the registry assumes noisier than latencies and throughputs (TTFT); on an
    unknown platform the registry's assumed noise of the metric."""
    metric = key.rsplit(":", 1)[-1]
    if platform not in PLATFORMS:
        return Noise(assumed_log_sd(metric), math.inf, "assumed")  # platform unknown
    base = PLATFORMS[platform].between_log_sd
    scale = max(1.0, assumed_log_sd(metric) / ASSUMED_LOG_SD)
    return Noise(base * scale, math.inf,
                 f"assumed: {base:.0%} between deployments on {platform.upper()}, docs/noise.md"
                 + (f", x{scale:.3g} for this metric" if scale > 1 else ""))


@dataclass(frozen=True)
class NoiseModel:
    """Per-metric noise of one deployment's mean in a study; metrics without a measurement get
    the platform's assumed spread between deployments (``redeployment_prior``)."""

    by_metric: Mapping[str, Noise]
    platform: str = ""  # cpu | gpu | "" unknown: which assumed spread a metric without data gets

    def of(self, metric: str) -> Noise:
        return self.by_metric.get(metric) or redeployment_prior(metric, self.platform)


def _has_logs(values: Sequence[float]) -> bool:
    # Checked value by value: numpy's reductions cost more than the few values of a group.
    return len(values) > 0 and all(v > 0 and math.isfinite(v) for v in values)


def _logs(values: Sequence[float]) -> np.ndarray | None:
    if not _has_logs(values):
        return None
    return np.log(np.asarray(values, dtype=float))


def pooled_sd(groups: Iterable[Sequence[float]]) -> tuple[float, int, int] | None:
    """The within-group standard deviation in the values' own unit, pooled over the groups of
    two or more finite values and weighted by their degrees of freedom, with those degrees of
    freedom and the number of groups; None without any such group."""
    ss, df, trials = 0.0, 0, 0
    for values in groups:
        if len(values) < 2:  # before numpy: most groups of a search are single runs
            continue
        group_ss = _sum_of_squares(values)
        if group_ss is None:
            continue
        ss += group_ss
        df += len(values) - 1
        trials += 1
    return (math.sqrt(ss / df), df, trials) if df else None


_PAIRWISE_BLOCK = 8  # numpy adds fewer values than this one after another; more, in 8 lanes


def _sum_of_squares(values: Sequence[float]) -> float | None:
    """The squared deviations from their mean of two or more values, summed (None: one is not
    finite). A small group is summed in plain Python in numpy's order, to the same bits at a
    tenth of the cost: a study's noise sums a few deployments of each trial on every read."""
    if len(values) >= _PAIRWISE_BLOCK:
        arr = np.asarray(values, dtype=float)
        if not np.all(np.isfinite(arr)):
            return None
        return float(np.sum((arr - arr.mean()) ** 2))
    xs = [float(v) for v in values]
    if not all(math.isfinite(x) for x in xs):
        return None
    total = 0.0
    for x in xs:
        total += x
    mean = total / len(xs)
    ss = 0.0
    for x in xs:
        ss += (x - mean) * (x - mean)
    return ss


def pooled_noise(groups: Mapping[str, Iterable[Sequence[float]]]) -> NoiseModel:
    """Pool the within-group log variance of each metric over its groups (one group: the
    repeats of one profile on one deployment) weighted by their degrees of freedom; groups with
    a value <= 0 have no log and are left out."""
    out: dict[str, Noise] = {}
    for metric, metric_groups in groups.items():
        found = pooled_sd(logs for logs in map(_logs, metric_groups) if logs is not None)
        if found is not None:
            sd, df, trials = found
            out[metric] = Noise(sd, float(df),
                                f"pooled from {df + trials} repeats of {trials} measurement(s)")
    return NoiseModel(out)


@dataclass(frozen=True)
class Spread:
    """A spread between deployments measured elsewhere (another study on the same machine, vLLM,
    model and profile): its log-sd, degrees of freedom and where it comes from."""

    log_sd: float
    df: float
    source: str


def pool_spreads(spreads: Sequence[Spread]) -> Spread | None:
    """Several measured spreads as one: their variances pooled, weighted by their degrees of
    freedom (None without any)."""
    kept = [s for s in spreads if s.df > 0]
    if not kept:
        return None
    df = sum(s.df for s in kept)
    sd = math.sqrt(sum(s.df * s.log_sd ** 2 for s in kept) / df)
    return Spread(sd, df, ", ".join(s.source for s in kept))


def deployment_noise(within: Sequence[Sequence[float]], between: Sequence[Sequence[float]],
                     prior: Noise, inherited: Spread | None = None) -> Noise | None:
    """The noise of one deployment's mean of a metric, from its positive values (None: none):
    ``within`` each deployment (repeats), ``between`` deployments of one configuration (its means),
    ``inherited`` from other studies under the same conditions (pooled, weighted by degrees of
    freedom). The between-spread pooled over configurations, never below the repeats' spread over
    sqrt(runs per deployment) (a deployment's mean cannot be surer than its runs); without any
    redeployment, measured or inherited, ``prior`` held to that same floor."""
    # A group of one value has no spread: only whether one has a log counts, not the log.
    logs_w = [np.log(np.asarray(g, dtype=float)) for g in within if len(g) > 1 and _has_logs(g)]
    logs_b = [x for x in map(_logs, between) if x is not None]
    if not logs_w and not any(map(_has_logs, within)) and not logs_b and inherited is None:
        return None
    floor, floor_df, floor_src = 0.0, math.inf, ""
    found_w = pooled_sd(logs_w)
    if found_w is not None:
        sd, df, groups = found_w
        per = float(np.mean([len(g) for g in logs_w if len(g) > 1]))
        floor, floor_df = sd / math.sqrt(per), float(df)
        floor_src = f"repeats: {sd:.1%} pooled from {df + groups} runs on {groups} deployment(s)"
    found_b = pooled_sd(logs_b)
    own = None if found_b is None else Spread(
        found_b[0], float(found_b[1]),
        f"{found_b[1] + found_b[2]} deployments of {found_b[2]} configuration(s) here")
    spread = pool_spreads([s for s in (own, inherited) if s is not None])
    if spread is not None:
        sd, df = spread.log_sd, spread.df
        if sd >= floor:
            return Noise(sd, df, f"between deployments: pooled from {spread.source}", sd)
        return Noise(floor, floor_df, f"{floor_src} (more than between deployments, {sd:.1%})",
                     sd)
    if floor > prior.log_sd:
        return Noise(floor, floor_df, f"{floor_src} (more than the {prior.source})")
    return prior


def _t_interval(d: float, se: float, df: float, level: float = LEVEL) -> tuple[float, float, float]:
    """``d`` with the two ends of its two-sided ``level`` interval (Student's t on ``df``)."""
    t = t_quantile(df, level)
    return d, d - t * se, d + t * se


class _Interval:
    """What a change and a difference share: a point and its interval on a scale where 0 is
    no difference; ``significant`` when the interval excludes zero."""

    @property
    def _bounds(self) -> tuple[float, float, float]:
        raise NotImplementedError

    @property
    def significant(self) -> bool:
        _, low, high = self._bounds
        return low > 0 or high < 0

    @property
    def sign(self) -> float:
        point = self._bounds[0]
        return math.copysign(1.0, point) if point else 0.0


@dataclass(frozen=True)
class Change(_Interval):
    """A relative change in percent with its interval."""

    pct: float
    low_pct: float
    high_pct: float

    @property
    def _bounds(self) -> tuple[float, float, float]:
        return self.pct, self.low_pct, self.high_pct

    @property
    def text(self) -> str:
        return f"{self.pct:+.1f}% [{self.low_pct:+.1f}, {self.high_pct:+.1f}]"

    @classmethod
    def from_log(cls, d: float, se: float, df: float, level: float = LEVEL) -> Change:
        return cls(*(100.0 * math.expm1(x) for x in _t_interval(d, se, df, level)))


@dataclass(frozen=True)
class Difference(_Interval):
    """An absolute difference in ``unit`` with its interval."""

    value: float
    low: float
    high: float
    unit: str

    @property
    def _bounds(self) -> tuple[float, float, float]:
        return self.value, self.low, self.high

    @property
    def text(self) -> str:
        """'+12.5 pp [+3.1, +21.9]': a difference of shares in percentage points (pp), never
        to be read as a relative change."""
        unit = " pp" if self.unit == "%" else f" {self.unit}" if self.unit else ""
        return f"{self.value:+.3g}{unit} [{self.low:+.3g}, {self.high:+.3g}]"

    @classmethod
    def from_se(cls, d: float, se: float, df: float, unit: str) -> Difference:
        return cls(*_t_interval(d, se, df), unit)


@dataclass(frozen=True)
class Estimate:
    """A metric's mean over ``n`` deployments (or runs) with the noise of one behind its
    interval."""

    mean: float
    n: int
    noise: Noise

    @property
    def _half(self) -> float:
        return t_quantile(self.noise.df) * self.noise.log_sd / math.sqrt(max(self.n, 1))

    @property
    def low(self) -> float:
        return self.mean * math.exp(-self._half)

    @property
    def high(self) -> float:
        return self.mean * math.exp(self._half)

    @property
    def text(self) -> str:
        """'1,000 [943, 1,061]': as every table writes a number (``number_text``), the bounds
        with their mean's digits."""
        m = self.mean
        return f"{number_text(m)} [{number_text(self.low, m)}, {number_text(self.high, m)}]"


def estimate(values: Sequence[float], noise: Noise) -> Estimate:
    """The mean of ``values`` (deployment means, or runs), with ``noise`` (of one value) for its
    interval."""
    return Estimate(float(np.mean(values)), len(values), noise)


def _log_difference(a: Estimate, b: Estimate) -> tuple[float, float, float]:
    """log(a/b) with its standard error and (Welch-style) degrees of freedom."""
    d = math.log(a.mean / b.mean) if a.mean > 0 and b.mean > 0 else math.nan
    va = a.noise.log_sd ** 2 / max(a.n, 1)
    vb = b.noise.log_sd ** 2 / max(b.n, 1)
    se = math.sqrt(va + vb)
    dfs = [a.noise.df, b.noise.df]
    if any(math.isinf(x) for x in dfs) or se == 0:
        df = min(dfs)
    else:
        df = (va + vb) ** 2 / (va ** 2 / dfs[0] + vb ** 2 / dfs[1])
    return d, se, df


def compare(a: Estimate, b: Estimate, level: float = LEVEL) -> Change:
    """``a`` relative to ``b``, with a two-sided ``level`` interval from both estimates' noise
    (Welch-style degrees of freedom when the two noises differ)."""
    return Change.from_log(*_log_difference(a, b), level=level)


# Two one-sided tests at 5% each: equivalence is shown when the 90% interval lies inside the
# margin (Schuirmann 1987), the same error rate as the 95% interval that shows a difference.
EQUIVALENCE_LEVEL = 0.90


class Verdict(StrEnum):
    """How one configuration compares with another on an objective, one rule everywhere."""

    BETTER = "better"  # the 95% interval of the difference excludes zero, in its favour
    WORSE = "worse"  # ... against it
    EQUIVALENT = "equivalent"  # the 90% interval lies within +/- the smallest difference
    UNDECIDED = "undecided"  # neither: more deployments would tell


@dataclass(frozen=True)
class Comparison:
    """``a`` against ``b`` on one objective: the 95% interval of the relative change (``change``),
    the 90% one that equivalence is judged on (``tost``), the margin (the smallest difference
    worth caring about, in %) and the verdict. A real difference smaller than the margin is
    equivalent: not worth a flag change."""

    change: Change
    tost: Change
    margin_pct: float
    verdict: Verdict

    @property
    def text(self) -> str:
        if self.verdict is Verdict.EQUIVALENT:
            return (f"equivalent: {self.change.pct:+.1f}%, 90% interval [{self.tost.low_pct:+.1f}, "
                    f"{self.tost.high_pct:+.1f}] within +/-{self.margin_pct:g}%")
        return f"{self.verdict.value}: {self.change.text}"


def judge(a: Estimate, b: Estimate, *, margin: float, minimize: bool) -> Comparison:
    """The verdict on ``a`` against ``b`` for an objective that is minimised or not, with the
    smallest relative difference worth caring about ``margin`` (0.05: 5%): equivalent when the
    90% interval of the change lies within +/- margin; else better or worse when its 95%
    interval excludes zero; else undecided. Not separated is never equal."""
    d, se, df = _log_difference(a, b)
    change = Change.from_log(d, se, df)
    tost = Change.from_log(d, se, df, level=EQUIVALENCE_LEVEL)
    m = 100.0 * margin
    if math.isfinite(d) and -m <= tost.low_pct and tost.high_pct <= m:
        verdict = Verdict.EQUIVALENT
    elif change.significant:
        verdict = Verdict.BETTER if (change.pct < 0) == minimize else Verdict.WORSE
    else:
        verdict = Verdict.UNDECIDED
    return Comparison(change, tost, m, verdict)


def combined(verdicts: Sequence[Verdict]) -> Verdict:
    """One verdict over several objectives: equivalent on all is equivalent; better on some and
    worse on none is better (worse alike: a rival worse on one objective and better on none
    cannot come out ahead on every one); a trade-off, or no objective decided, is undecided."""
    kinds = set(verdicts)
    if kinds == {Verdict.EQUIVALENT}:
        return Verdict.EQUIVALENT
    if Verdict.BETTER in kinds and Verdict.WORSE not in kinds:
        return Verdict.BETTER
    if Verdict.WORSE in kinds and Verdict.BETTER not in kinds:
        return Verdict.WORSE
    return Verdict.UNDECIDED


POWER = 0.8  # the chance of separating a stated difference that sample sizes aim for


def separation_chance(difference: float, noise: Noise, n_a: float, n_b: float) -> float:
    """The chance that ``compare`` separates the means of ``n_a`` and ``n_b`` runs of two
    configurations whose true relative difference is ``difference`` (0.05: 5%), under ``noise``
    (two-sided at ``LEVEL``; the normal approximation with the t quantile of the noise's
    degrees of freedom)."""
    d = abs(math.log1p(difference))
    se = noise.log_sd * math.sqrt(1.0 / n_a + 1.0 / n_b)
    if se == 0:
        return 1.0 if d > 0 else 0.0
    t = t_quantile(noise.df)
    return float(ndtr(d / se - t) + ndtr(-d / se - t))


def rounds_to_separate(difference: float, noise: Noise, *, runs_per_round: int,
                       runs_now: tuple[int, int] = (0, 0), power: float = POWER) -> int:
    """The fewest rounds, each adding ``runs_per_round`` runs to both of two configurations
    that hold ``runs_now`` runs, after which a true relative difference of ``difference`` is
    separated with at least the chance ``power``. Derived from the difference worth caring
    about, never from an observed one (the observed one is what the noise leaves in doubt);
    the noise's degrees of freedom are today's, which new runs only raise."""
    if not difference > 0 or runs_per_round < 1 or not 0 < power < 1:
        raise ValueError(f"difference {difference} must be > 0, runs_per_round "
                         f"{runs_per_round} >= 1 and power {power} in (0, 1)")

    def chance(rounds: int) -> float:
        n_a, n_b = (n + rounds * runs_per_round for n in runs_now)
        return separation_chance(difference, noise, n_a, n_b) if min(n_a, n_b) > 0 else 0.0

    # Equal runs n each need about 2 (sd (t + z) / d)^2; from there, the exact fewest.
    each = 2 * (noise.log_sd * (t_quantile(noise.df) + float(ndtri(power)))
                / math.log1p(difference)) ** 2
    low, high = 0, max(1, math.ceil(each / runs_per_round))
    while chance(high) < power:
        low, high = high, 2 * high
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if chance(mid) >= power else (mid + 1, high)
    return low


def mean_paired(diffs: Sequence[float], noise_sd: float, noise_df: float, n_each: float
                ) -> tuple[float, float, float]:
    """The mean of paired differences with its standard error and degrees of freedom: from
    the pairs' own scatter when there are several, never narrower than what the measurement
    noise (``noise_sd`` on the differences' scale, one run) allows."""
    k = len(diffs)
    d = float(np.mean(diffs))
    noise_se = noise_sd * math.sqrt(2.0 / max(n_each, 1.0)) / math.sqrt(k)
    if k >= 2:
        pair_se = float(np.std(diffs, ddof=1)) / math.sqrt(k)
        if pair_se > noise_se:
            return d, pair_se, k - 1
    return d, noise_se, noise_df

