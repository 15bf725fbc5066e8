"""When a fixed profile's run knows its numbers: the stop rule. Pure: the client asks it, it
sends nothing.

``stops_early`` is the one decision of which runs may stop; a ``StopRule`` is balanced (n* =
sigma_w / sigma_b x sqrt(C_d / c_r)) or precise (``--precision``); the client and ``recheck`` ask
only ``Pinned.stop``. Each metric's interval, and the balance: docs/precision.md."""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from autotune.core.maths.numbers import parse_percent
from autotune.core.maths.platforms import platform
from autotune.core.maths.stats import NoiseModel, t_quantile
from autotune.core.metrics.registry import METRICS
from autotune.core.metrics.summary import RequestResult, max_concurrency, tpot_s
from autotune.core.workload.profiles import WorkloadProfile
from autotune.core.workload.requests import RequestSource

PRECISE, BALANCED, CEILING, TIME_LIMIT = "precise", "balanced", "ceiling", "time limit"
BUDGET = "time budget"  # the study's time budget left this run no more seconds (issue #46)
STOP_REASONS = (PRECISE, BALANCED, CEILING, TIME_LIMIT, BUDGET)
# A balanced run also stops once its own 95% half-widths are at most this share of the smallest
# difference worth caring about (issue #46, docs/precision.md "Precise enough"): two runs that
# precise tell a true difference of that size apart with about 80% chance from their requests
# alone (z = 1/(share x sqrt 2) x 1.96 = 2.77 = 1.96 + 0.81), so more requests cannot change
# a verdict about it; the deployments' spread decides the rest.
PRECISION_SHARE = 0.5
TIME_LIMIT_ERROR = "run time limit"  # how the client words a request cut by the profile's timeout_s

_THROUGHPUT = ("output_throughput", "total_token_throughput", "request_throughput")


def parse_precision(text: str | None) -> float | None:
    """``--precision``: ``1.25%`` or ``1.25`` as 0.0125, ``0`` as off; None (not given): the
    balanced length. A one-line error otherwise."""
    if text is None:
        return None
    if text.strip().removesuffix("%").strip() in ("0", "0.0"):
        return 0.0
    return parse_percent(text, "--precision")


def stops_early(profile: WorkloadProfile, source: RequestSource) -> bool:
    """Whether a run of ``profile`` with requests from ``source`` may stop before its
    ``num_prompts``: only at a fixed concurrency. A capacity probe has its own settle rule; a
    profile whose load is an arrival process (a request rate, or requests that carry their own
    send times: a trace) sends every request, because a prefix of it would measure a shorter
    trace and its drain, with a throughput that Little's law at a fixed concurrency does not
    describe. The plan announces the rule by this, and the client applies it by this."""
    return (profile.capacity is None and math.isinf(profile.request_rate)
            and not getattr(source, "timed", False))


@dataclass(frozen=True)
class Balance:
    """Where a run's length balances against its deployment (docs/precision.md): the
    spread of a configuration's deployment means (``between_log_sd``, sigma_b) and the cost of
    one deployment (``deployment_s``, C_d). A run of relative per-request spread sigma_w at
    c_r seconds a request is worth n* = sigma_w / sigma_b x sqrt(C_d / c_r) requests: beyond
    that, the same device time buys more certainty as another deployment."""

    between_log_sd: float
    deployment_s: float

    def __post_init__(self) -> None:
        if not (self.between_log_sd > 0 and self.deployment_s > 0):
            raise ValueError(f"Balance: between_log_sd {self.between_log_sd} and deployment_s "
                             f"{self.deployment_s} must be > 0")

    def requests(self, within_sd: float, request_s: float) -> float:
        """n*: the balanced number of requests of a run (inf where the spread or the cost is
        not known yet)."""
        if not (math.isfinite(within_sd) and request_s > 0):
            return math.inf
        return within_sd / self.between_log_sd * math.sqrt(self.deployment_s / request_s)

    @classmethod
    def prior(cls, name: str) -> Balance:
        """Before a study has measured anything: the platform's assumed spread between
        deployments and cost of a redeployment (``platforms.Platform``); an unknown platform
        gets the GPU's (the smaller spread: the longer runs)."""
        known = platform(name)
        return cls(known.between_log_sd, known.redeploy_s)

    @property
    def text(self) -> str:
        return f"sigma_b {self.between_log_sd:.2%}, C_d {self.deployment_s:.0f} s"


@dataclass(frozen=True)
class StopRule:
    """A fixed profile's run stops once its requests reach the balanced n* (``balance``), or,
    with ``target_rel`` instead (``--precision``), once every pinned metric's 95% interval is
    within ``target_rel`` (0.0125: +-1.25%) of its value; either after at least
    ``min_requests`` requests and ``min_waves`` whole waves. Its ceiling is the profile's
    ``num_prompts``."""

    target_rel: float | None = None
    min_requests: int = 10
    min_waves: int = 2
    balance: Balance | None = None
    # With ``balance``: the run also stops, as ``precise``, once every pinned metric's 95%
    # interval is within this fraction of its value (``enough_rel``: PRECISION_SHARE x the
    # smallest difference worth caring about), whichever length comes first. None: n* alone.
    enough_rel: float | None = None

    def __post_init__(self) -> None:
        one = (self.target_rel is None) != (self.balance is None)
        if (not one or (self.target_rel is not None and not self.target_rel > 0)
                or self.min_requests < 2 or self.min_waves < 1
                or (self.enough_rel is not None and (self.balance is None or not self.enough_rel > 0))):
            raise ValueError(f"StopRule: one of target_rel {self.target_rel} (> 0) or balance "
                             f"{self.balance} (enough_rel {self.enough_rel} > 0 only with a balance), "
                             f"min_requests {self.min_requests} >= 2 and "
                             f"min_waves {self.min_waves} >= 1")

    @property
    def reason(self) -> str:
        """The stop reason this rule gives: ``balanced`` or ``precise``."""
        return BALANCED if self.balance is not None else PRECISE

    def floor(self, concurrency: int) -> int:
        """The fewest requests sent before the rule is asked."""
        return max(self.min_requests, self.min_waves * concurrency)

    def asks(self, sent: int, concurrency: int, ceiling: int) -> bool:
        """Whether the rule is asked with ``sent`` requests sent: a whole number of waves, at
        least the floor, and below the ceiling (at the ceiling there is nothing left to spare)."""
        return sent % max(concurrency, 1) == 0 and self.floor(concurrency) <= sent < ceiling


@dataclass(frozen=True)
class Pinned:
    """What one fixed profile's run must pin, and by which rule: the metrics the study uses
    from that profile (its objectives and SLOs)."""

    rule: StopRule
    metrics: tuple[str, ...]
    # Seconds this run may take before the study's time budget ends (None: no budget): at the
    # first whole wave past them the run stops, as ``time budget``, whatever the rule says.
    max_run_s: float | None = None

    def stop(self, done: Sequence[RequestResult], *, sent: int, concurrency: int, ceiling: int,
             elapsed_s: float) -> str:
        """The rule's answer as a request completes ('': go on, else the stop reason), with ``sent``
        sent, ``done`` completed and ``elapsed_s`` from the first send among ``done``. Asked only at a
        whole wave, from the floor and below the ``ceiling``: ``time budget`` once ``elapsed_s`` reaches
        ``max_run_s``, ``precise`` once every metric is within the target, ``balanced`` once ``sent``
        reaches n*. A failed request stops nothing; the client and ``recheck`` ask only this."""
        rule = self.rule
        if not rule.asks(sent, concurrency, ceiling):
            return ""
        if self.max_run_s is not None and elapsed_s >= self.max_run_s:
            return BUDGET
        if rule.balance is None:
            target = float(rule.target_rel or 0.0)
            return PRECISE if precision(done, self.metrics, target).precise else ""
        if not done or any(not r.success for r in done):
            return ""
        if rule.enough_rel is not None and precision(done, self.metrics, rule.enough_rel).precise:
            return PRECISE  # small next to the smallest difference: shorter than n* here
        spread = max((within_sd(done, m) for m in self.metrics if pinnable(m)), default=0.0)
        return BALANCED if sent >= rule.balance.requests(spread, elapsed_s / len(done)) else ""


@dataclass(frozen=True)
class Precision:
    """Each pinned metric's interval half-width relative to its value (inf: not yet known), and
    whether they are all within the target."""

    precise: bool
    half_widths: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RunStop:
    """How one run ended: ``requests`` sent (and measured), why it stopped (``STOP_REASONS``),
    the most requests it had in flight at once against the profile's ``concurrency``, and the
    seconds the study's time budget allowed it (``Pinned.max_run_s``; None: no budget, or a
    run stored before it was kept), so that a ``time budget`` stop can be replayed
    (``recheck``)."""

    requests: int
    reason: str
    reached_concurrency: int = 0
    concurrency: int = 0
    max_run_s: float | None = None

    @property
    def short_of_load(self) -> bool:
        return 0 < self.reached_concurrency < self.concurrency

    @property
    def reached_text(self) -> str:
        """'reached 8 of 100' where the run never had the profile's concurrency in flight."""
        return (f"reached {self.reached_concurrency} of {self.concurrency}"
                if self.short_of_load else "")

    def to_dict(self) -> dict[str, int | str | float]:
        """The stored layout; ``max_run_s`` only where a time budget set one."""
        stored: dict[str, int | str | float] = {
            "requests": self.requests, "stop": self.reason,
            "reached_concurrency": self.reached_concurrency, "concurrency": self.concurrency}
        if self.max_run_s is not None:
            stored["max_run_s"] = self.max_run_s
        return stored

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> RunStop:
        budget = data.get("max_run_s")
        return cls(int(data.get("requests", 0) or 0), str(data.get("stop", "") or ""),  # type: ignore[call-overload]
                   int(data.get("reached_concurrency", 0) or 0),  # type: ignore[call-overload]
                   int(data.get("concurrency", 0) or 0),  # type: ignore[call-overload]
                   None if budget is None else float(budget))  # type: ignore[arg-type]


def pinnable(metric: str) -> bool:
    """Whether the requests of a run can pin ``metric`` (the rule ignores the others): a mean or
    a percentile of a per-request latency (``Metric.latency``, ``statistic``), a throughput."""
    m = METRICS.get(metric)
    return m is not None and (m.statistic == "mean" or m.quantile is not None) or metric in _THROUGHPUT


def _mean_half(values: np.ndarray) -> float:
    # numpy's mean and std(ddof=1), spelled out: the same sums in a third of the time (the
    # client asks this at every wave of every run).
    n = values.size
    if n < 2:
        return math.inf
    mean = float(np.add.reduce(values)) / n
    if mean <= 0:
        return math.inf
    deviations = values - mean
    sd = math.sqrt(float(np.add.reduce(deviations * deviations)) / (n - 1))
    return t_quantile(n - 1) * sd / math.sqrt(n) / mean


def _ratio_half(num: np.ndarray, den: np.ndarray) -> float:
    """Relative half-width of mean(num) / mean(den) over paired per-request values (delta
    method: var(R)/R^2 = (s_x^2/x^2 + s_y^2/y^2 - 2 s_xy/(x y)) / n)."""
    n = num.size
    if n < 2:
        return math.inf
    x, y = float(num.mean()), float(den.mean())
    if x <= 0 or y <= 0:
        return math.inf
    cov = np.cov(num, den, ddof=1)
    rel_var = (cov[0, 0] / x**2 + cov[1, 1] / y**2 - 2 * cov[0, 1] / (x * y)) / n
    return t_quantile(n - 1) * math.sqrt(max(float(rel_var), 0.0))


def _percentile_half(values: np.ndarray, q: float) -> float:
    """Half the distribution-free 95% interval of the q-quantile (order statistics at the
    normal approximation of the binomial ranks), relative to the sample quantile."""
    n = values.size
    if n < 2:
        return math.inf
    z = t_quantile(math.inf)
    spread = z * math.sqrt(n * q * (1 - q))
    low, high = math.floor(n * q - spread), math.ceil(n * q + spread) + 1  # 1-based ranks
    if low < 1 or high > n:
        return math.inf
    ordered = np.sort(values)
    point = float(np.percentile(ordered, q * 100))
    if point <= 0:
        return math.inf
    return (float(ordered[high - 1]) - float(ordered[low - 1])) / 2 / point


def _latencies(ok: Sequence[RequestResult], which: str) -> np.ndarray:
    if which == "itl":
        return np.asarray([g for r in ok for g in r.itl_s], dtype=float)
    if which == "tpot":
        return np.asarray([t for t in map(tpot_s, ok) if t is not None], dtype=float)
    if which == "ttft":
        return np.asarray([r.ttft_s for r in ok], dtype=float)
    return np.asarray([r.latency_s for r in ok], dtype=float)


def half_width(ok: Sequence[RequestResult], metric: str) -> float:
    """``metric``'s 95% interval half-width relative to its value, from the successful
    requests ``ok`` (inf where they cannot tell yet); ValueError for a metric not ``pinnable``."""
    m = METRICS.get(metric)
    if m is not None and m.statistic == "mean" and m.latency == "itl":
        many = [r for r in ok if r.itl_s]
        return _ratio_half(np.asarray([sum(r.itl_s) for r in many], dtype=float),
                           np.asarray([len(r.itl_s) for r in many], dtype=float))
    if m is not None and m.statistic == "mean":
        return _mean_half(_latencies(ok, m.latency))
    if m is not None and m.quantile is not None:
        return _percentile_half(_latencies(ok, m.latency), m.quantile)
    if metric in _THROUGHPUT:
        tokens = np.asarray([1.0 if metric == "request_throughput" else
                             r.output_tokens + (r.prompt_len if metric.startswith("total") else 0)
                             for r in ok], dtype=float)
        return _ratio_half(tokens, np.asarray([r.latency_s for r in ok], dtype=float))
    raise ValueError(f"{metric!r} cannot be pinned from per-request records")


def within_sd(ok: Sequence[RequestResult], metric: str) -> float:
    """``metric``'s spread per request relative to its value (sigma_w): its 95% half-width
    times sqrt(n) over Student's t, so that for a per-request mean it is the requests'
    standard deviation over their mean, and for a ratio, a percentile or ITL the per-request
    spread that gives the same interval (inf where the requests cannot tell yet)."""
    n = sum(1 for r in ok if r.success)
    half = half_width([r for r in ok if r.success], metric)
    return half * math.sqrt(n) / t_quantile(n - 1) if n >= 2 and math.isfinite(half) else math.inf


def precision(results: Sequence[RequestResult], metrics: Sequence[str], target_rel: float
              ) -> Precision:
    """Whether ``results`` (the requests completed so far) pin every pinnable metric of
    ``metrics`` within ``target_rel``, with each one's relative half-width. Under Little's law
    at a fixed concurrency the throughputs' relative intervals do not depend on it. A failed
    request makes nothing precise (the run is invalid whatever comes next); no pinnable metric
    leaves nothing to wait for."""
    ok = [r for r in results if r.success]
    halves = {m: half_width(ok, m) for m in dict.fromkeys(metrics) if pinnable(m)}
    failed = len(ok) < len(results)
    return Precision(not failed and all(h <= target_rel for h in halves.values()), halves)


def reason_for(results: Sequence[RequestResult], *, sent: int, ceiling: int, early: str) -> str:
    """Why a run that sent ``sent`` of ``ceiling`` requests ended: ``time limit`` where a
    request was cut by the profile's time limit, else the rule's reason (``early``: ``precise``,
    ``balanced`` or ``time budget``) when it stopped the run, else ``ceiling``."""
    if any(TIME_LIMIT_ERROR in r.error for r in results if not r.success):
        return TIME_LIMIT
    return early if early and sent < ceiling else CEILING


def balanced_pins(pinned: Mapping[str, Pinned], noise: NoiseModel, deployment_s: float | None
                  ) -> dict[str, Pinned]:
    """The plan's balanced rules with what a study has measured: its measured spread between
    deployments (the smallest over each profile's pinned metrics: the longer run) where it has
    one, else the rule's prior (never the repeats' spread, which is the runs' own: sigma_w,
    not sigma_b); its measured cost of a deployment where it has one. A rule with a precision
    target is left as it is."""
    out = dict(pinned)
    for profile, pin in pinned.items():
        balance = pin.rule.balance
        if balance is None:
            continue
        measured = [n.between_log_sd for m in pin.metrics
                    if (n := noise.by_metric.get(f"{profile}:{m}")) is not None
                    and n.between_log_sd is not None and n.between_log_sd > 0]
        known = Balance(min(measured, default=balance.between_log_sd),
                        deployment_s if deployment_s and deployment_s > 0 else balance.deployment_s)
        out[profile] = dataclasses.replace(pin, rule=dataclasses.replace(pin.rule, balance=known))
    return out


def within_budget(pinned: Mapping[str, Pinned], run_s: float | None, runs: int
                  ) -> dict[str, Pinned]:
    """``pinned`` with each run allowed its share of ``run_s`` seconds (what the study's time
    budget leaves a trial's runs; None: no budget, unchanged) over the trial's ``runs`` fixed
    runs: a slow configuration's runs stop at their floor rather than outlast the budget."""
    if run_s is None or runs < 1:
        return dict(pinned)
    each = max(run_s, 0.0) / runs
    return {p: dataclasses.replace(pin, max_run_s=each) for p, pin in pinned.items()}


def recheck(records: Sequence[RequestResult], rule: StopRule, *, metrics: Sequence[str],
            concurrency: int, ceiling: int, max_run_s: float | None = None) -> RunStop:
    """The stop a run's per-request ``records`` lead to under ``rule`` and ``max_run_s`` (what the time
    budget allowed it, as its ``RunStop`` stores it; None: no budget): the client's decision
    replayed. The rule is asked as each request completes (``done_s``, else send time plus latency),
    counting as sent those sent before then and as elapsed the time since the first send among the
    completed; the first stop answer ends the run with that many sent."""
    ends = [r.done_s if r.done_s is not None else r.start_s + r.latency_s for r in records]
    starts = sorted(r.start_s for r in records)
    pinned = Pinned(rule, tuple(metrics), max_run_s)
    done: list[RequestResult] = []
    first_s = math.inf  # the first send among ``done``, kept as they grow (linear, not quadratic)
    for i in sorted(range(len(records)), key=ends.__getitem__):
        done.append(records[i])
        first_s = min(first_s, records[i].start_s)
        sent = bisect.bisect_left(starts, ends[i])  # the sends strictly before this completion
        said = pinned.stop(done, sent=sent, concurrency=concurrency, ceiling=ceiling,
                           elapsed_s=ends[i] - first_s)
        if said:
            return RunStop(sent, said, max_concurrency(records), concurrency, max_run_s)
    return RunStop(len(records), reason_for(records, sent=len(records), ceiling=ceiling,
                                            early=""), max_concurrency(records), concurrency,
                   max_run_s)


def request_line(r: RequestResult, t0_s: float) -> dict[str, object]:
    """One request as a line of the ``requests-<profile>-<repeat>.jsonl`` artifact: its send
    and completion times in seconds from ``t0_s`` (the run's first send), its latencies in ms
    (every token gap, so that any metric can be recomputed), its tokens, success and error."""
    # Times unrounded: recheck counts the requests sent before each completion, to the tick.
    return {"send_s": r.start_s - t0_s,
            "done_s": None if r.done_s is None else r.done_s - t0_s,
            "ttft_ms": round(r.ttft_s * 1000, 4), "e2el_ms": round(r.latency_s * 1000, 4),
            "output_tokens": r.output_tokens, "prompt_len": r.prompt_len,
            "success": r.success, "error": r.error,
            "itl_ms": [round(g * 1000, 4) for g in r.itl_s]}


def request_from_line(line: Mapping[str, object]) -> RequestResult:
    """The request a ``request_line`` describes (times in seconds from the run's first send)."""
    done = line.get("done_s")
    return RequestResult(
        prompt_len=int(line.get("prompt_len", 0)),  # type: ignore[call-overload]
        start_s=float(line["send_s"]),  # type: ignore[arg-type]
        success=bool(line.get("success", True)),
        output_tokens=int(line.get("output_tokens", 0)),  # type: ignore[call-overload]
        ttft_s=float(line.get("ttft_ms", 0.0)) / 1000,  # type: ignore[arg-type]
        latency_s=float(line.get("e2el_ms", 0.0)) / 1000,  # type: ignore[arg-type]
        itl_s=tuple(float(g) / 1000 for g in line.get("itl_ms", ()) or ()),  # type: ignore[union-attr]
        error=str(line.get("error", "") or ""),
        done_s=None if done is None else float(done),  # type: ignore[arg-type]
    )
