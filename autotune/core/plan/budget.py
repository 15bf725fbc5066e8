"""A study's time budget as one record: what is used and left, whether one more deployment
fits beside the confirmation's reserve, and the lines that say so; what one more trial is
expected to cost, phase by phase (``trial_cost``); and the sampler's random start sized
to the trials the budget allows (``StartUp``). Pure."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.core.maths.durations import duration_text
from autotune.core.maths.platforms import platform as platform_prior
from autotune.core.trial.outcome import TrialOutcome

# Start-up phases that fill caches every later deployment of the machine shares (kernels compiled
# just in time): only the first deployment pays them. torch.compile's graphs are not among them:
# each new engine compiles its own.
COLD_ONLY_PHASES = ("jit_s", "flashinfer_jit_s")


def measured_trials(outcomes: Sequence[TrialOutcome]) -> list[TrialOutcome]:
    """The trials whose costs price what comes next: served (results), measured whole (not
    raced: a race cuts its runs short) and not skipped. One filter for every cost a study
    learns (``trial_cost``, ``redeployment_start_s``, ``confirmation.deployment_cost_s``)."""
    return [t for t in outcomes if t.results and not t.raced and not t.skipped]


def compile_filled_s(t: TrialOutcome) -> float:
    """The seconds ``t``'s start spent compiling graphs into the shared cache (a ``miss``),
    which a redeployment of the same engine finds there and does not spend again."""
    phases = t.startup_phases
    return float(phases.get("compile_s", 0.0) or 0.0) if phases.get("compile_cache") == "miss" else 0.0


def redeployment_start_s(outcomes: Sequence[TrialOutcome]) -> float | None:
    """The expected start of a redeployment of a measured engine (a confirmation's), which
    finds its compiled graphs in the cache: the median start-up of the measured trials
    (``measured_trials``), each less the compile seconds it spent filling that cache
    (``compile_filled_s``); None before any."""
    starts = [t.startup_s - compile_filled_s(t) for t in measured_trials(outcomes)
              if t.startup_s is not None]
    return max(statistics.median(starts), 0.0) if starts else None


@dataclass(frozen=True)
class TrialCost:
    """What one more trial is expected to cost, in two phases: its start on this machine as it
    is now (``start_s``) and the rest (``rest_s``: its runs, teardown and what surrounds them)."""

    start_s: float
    rest_s: float

    @property
    def total_s(self) -> float:
        return self.start_s + self.rest_s


def expected_trial_s(outcomes: Sequence[TrialOutcome]) -> float | None:
    """``trial_cost``'s total (None before any served trial)."""
    cost = trial_cost(outcomes)
    return cost.total_s if cost is not None else None


def trial_cost(outcomes: Sequence[TrialOutcome]) -> TrialCost | None:
    """What one more trial is expected to cost on this (by now warm) machine, from the served trials
    (measured, not raced or skipped; None before any): the median start-up after the study's first
    (the first alone: its start-up less ``COLD_ONLY_PHASES``) plus the rest of a trial, the mean of
    the trials after the first, else the first's. So the first deployment's cold start and its runs,
    sized before the spread was known, do not price the rest (issue #46: a 134-141 s first trial
    priced a 59 s one)."""
    served = sorted((t for t in measured_trials(outcomes) if t.trial_wall_s),
                    key=lambda t: t.number)
    if not served:
        return None
    first, later = served[0], served[1:]
    starts = [t.startup_s for t in later if t.startup_s is not None]
    if starts:
        start = statistics.median(starts)
    else:
        cold = sum(float(first.startup_phases.get(k, 0.0) or 0.0) for k in COLD_ONLY_PHASES)
        start = max((first.startup_s or 0.0) - cold, 0.0)
    rest = [float(t.trial_wall_s or 0.0) - (t.startup_s or 0.0) for t in (later or served)]
    return TrialCost(start, max(statistics.fmean(rest), 0.0))


@dataclass(frozen=True)
class TimeLeft:
    """Where a study stands against its time budget (seconds of wall clock, every slot's trials
    included): whether one more trial fits, and about how many do."""

    used_s: float
    budget_s: float
    trial_s: float | None  # expected cost of one more trial: a deployment's (None: none measured)
    reserve_s: float  # kept for the confirmation at the end

    @property
    def left_s(self) -> float:
        return max(self.budget_s - self.used_s, 0.0)

    @property
    def fits(self) -> bool:
        """A new trial starts only when its expected cost fits beside the reserve; the first
        one, whose cost nothing predicts yet, starts while any time is left."""
        if self.trial_s is None:
            return self.left_s > self.reserve_s
        return self.used_s + self.trial_s + self.reserve_s <= self.budget_s

    @property
    def trials_to_come(self) -> int:
        if not self.trial_s:
            return 0
        return max(int((self.left_s - self.reserve_s) // self.trial_s), 0)

    @property
    def text(self) -> str:
        more = (f"about {self.trials_to_come} more trial(s) of ~{duration_text(self.trial_s)}"
                if self.trial_s else "no deployment measured yet, so the next trial's cost is "
                "unknown: it starts while time is left")
        used, budget = duration_text(self.used_s), duration_text(self.budget_s)
        return (f"time used {used} of {budget}, {duration_text(self.left_s)} left: {more}, "
                f"{duration_text(self.reserve_s)} kept for confirmation")

    @property
    def kept_text(self) -> str:
        """The study's last line on its budget: kept, or by how much it was not and why."""
        said = f"time budget {duration_text(self.budget_s)}: the study took {duration_text(self.used_s)}"
        if self.used_s <= self.budget_s:
            return f"{said}, {duration_text(self.budget_s - self.used_s)} to spare"
        return (f"{said}, {duration_text(self.used_s - self.budget_s)} over: a deployment outlasted its "
                "expected cost (the first one has none: nothing was measured before it)")

    def affords(self, cost_s: float) -> bool:
        """Whether a deployment of ``cost_s`` more (a calibration redeployment) fits beside the
        confirmation's reserve."""
        return self.used_s + cost_s + self.reserve_s <= self.budget_s


STARTUP_SHARE = 4  # a quarter of the expected trials are the sampler's random start ...
STARTUP_RANGE = (2, 5)  # ... within these bounds (docs/samplers.md, "A start that fits")


@dataclass(frozen=True)
class StartUp:
    """How many random trials the sampler starts with, from the trials a study expects to run:
    a quarter of them, within ``STARTUP_RANGE`` (a 9-minute GPU study of 4 trials is no random
    sample of 5; a long one keeps the 5 the replay chose), and where that expectation comes
    from."""

    random_trials: int
    expected_trials: int
    source: str  # "--trials 10" | "time budget 0:09:00 / ~0:02:00 a trial (assumed on GPU)"

    @property
    def text(self) -> str:
        low, high = STARTUP_RANGE
        return (f"the sampler starts with {self.random_trials} random trial(s): a quarter of the "
                f"{self.expected_trials} expected ({self.source}), within [{low}, {high}] "
                "(docs/samplers.md)")


def start_up(trials: int, *, budget_s: float | None, trial_s: float | None,
             platform: str) -> StartUp:
    """The sampler's random start for a study of at most ``trials`` trials within ``budget_s``
    seconds (None: no time budget), at ``trial_s`` a trial (None: none measured yet, the
    platform's assumed cost)."""
    expected, source = trials, f"--trials {trials}"
    if budget_s is not None:
        each = trial_s or platform_prior(platform).trial_s  # nothing measured: the prior
        by_time = max(int(budget_s // each), 1)
        if by_time < trials:
            how = "measured" if trial_s else f"assumed on {(platform or 'gpu').upper()}"
            expected, source = by_time, (f"time budget {duration_text(budget_s)} / "
                                         f"~{duration_text(each)} a trial, {how}")
    low, high = STARTUP_RANGE
    return StartUp(min(max(expected // STARTUP_SHARE, low), high), expected, source)
