"""Recommendations: the trial for each use, the trials the noise cannot separate from it, and
why, with intervals. Pure.

A difference whose interval contains zero is a tie: ``recommend`` lists the tied trials and
prefers the one that changes fewest flags from vLLM's defaults; a trial without a rival is
never called best "beyond the noise". A tie comes with its cost (``TieCost``): the confirmation
rounds that would separate the smallest difference worth caring about, and the command that
runs them.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.core.analysis.study_data import StudyData, format_params
from autotune.core.maths.pareto import knee
from autotune.core.maths.stats import POWER, Change, compare, rounds_to_separate
from autotune.core.trial.objectives import Objective
from autotune.core.trial.outcome import TrialOutcome

USES = ("interactive", "throughput", "balanced")
SMALLEST_DIFFERENCE = 0.05  # the relative difference worth caring about, unless a study says


@dataclass(frozen=True)
class TieSettings:
    """What a tie's cost is worked out from, beside the study's data: the study (named in the
    command) and the smallest relative difference worth caring about. The data says the rest:
    the noise of one deployment's mean, and each trial's deployments so far (its search's and
    its confirmation's); a confirmation round adds one deployment to each trial."""

    study: str
    smallest_difference: float = SMALLEST_DIFFERENCE


@dataclass(frozen=True)
class Observed:
    """A tied rival against the pick on one objective, with its interval (a tie: it holds 0)."""

    trial: int
    objective: str
    change: Change


@dataclass(frozen=True)
class TieCost:
    """What it takes to resolve a tie: ``rounds`` more confirmation rounds of ``trials`` (the
    pick first) separate a true difference of ``smallest_difference_pct`` on ``objective``
    (the noisiest of the tie's) with chance ``power``, two-sided at 5%; derived from that
    stated difference, never from the ``observed`` ones."""

    trials: tuple[int, ...]
    objective: str
    smallest_difference_pct: float
    power: float
    rounds: int
    observed: tuple[Observed, ...]
    noise: str  # where the noise behind the rounds comes from
    command: str

    @property
    def text(self) -> str:
        d = f"{self.smallest_difference_pct:g}%"
        seen = "; ".join(
            f"#{o.trial} against #{self.trials[0]} on {o.objective}: {o.change.text}, "
            f"{'larger' if abs(o.change.pct) > self.smallest_difference_pct else 'smaller'} "
            f"than {d}" for o in self.observed)
        if self.rounds == 0:
            return (f" The runs already measured would separate a difference of {d} on "
                    f"{self.objective} {self.power:.0%} of the time (two-sided 5%; noise "
                    f"{self.noise}), and separated none: observed {seen}.")
        return (f" To resolve the tie: {self.rounds} more confirmation round(s) of trials "
                f"{', '.join(f'#{n}' for n in self.trials)} (each deploys every one of them "
                f"once) would separate a true difference of {d} on {self.objective} "
                f"{self.power:.0%} of the time (two-sided 5%; noise {self.noise}): "
                f"`{self.command}`. Observed: {seen}.")


@dataclass(frozen=True)
class Recommendation:
    """The trial picked for a use, the trials the noise cannot separate from it, and why; a
    tie with what resolving it would take (without ``TieSettings``, ``tie_cost`` is None)."""

    use: str
    trial: TrialOutcome
    tied: tuple[TrialOutcome, ...]
    reason: str
    tie_cost: TieCost | None = None


class NoFeasibleTrial(Exception):
    """No trial of the study can be recommended yet."""


def _tied(data: StudyData, best: TrialOutcome, pool: Sequence[TrialOutcome],
          objectives: Sequence[Objective]) -> list[TrialOutcome]:
    """Members of ``pool`` whose difference to ``best`` is within the noise on every one of
    ``objectives`` (``best`` included)."""
    return [t for t in pool if t.number == best.number or not any(
        compare(data.objective_estimate(t, o), data.objective_estimate(best, o)).significant
        for o in objectives)]


def tie_cost(data: StudyData, pick: TrialOutcome, rivals: Sequence[TrialOutcome],
             objectives: Sequence[Objective], settings: TieSettings) -> TieCost:
    """The confirmation rounds after which every rival would be separated from ``pick`` with
    chance ``POWER`` were it ``settings.smallest_difference`` apart on any of ``objectives``:
    the most that any pair and objective needs."""
    def runs(t: TrialOutcome, o: Objective) -> int:  # deployments: the noise is of one's mean
        return len(t.results[o.profile].deployment_means(o.metric))

    need = {o: max(rounds_to_separate(settings.smallest_difference, data.noise.of(o.name),
                                      runs_per_round=1,
                                      runs_now=(runs(pick, o), runs(t, o))) for t in rivals)
            for o in objectives}
    worst = max(objectives, key=lambda o: need[o])
    trials = (pick.number, *(t.number for t in rivals))
    command = shlex.join(["autotune", "confirm", "--study", settings.study, "--trials",
                          ",".join(map(str, trials)), "--rounds", str(need[worst])])
    noise = data.noise.of(worst.name)
    observed = tuple(Observed(t.number, o.label, compare(data.objective_estimate(t, o),
                                                         data.objective_estimate(pick, o)))
                     for t in rivals for o in objectives)
    return TieCost(trials, worst.label, 100 * settings.smallest_difference, POWER, need[worst],
                   observed, f"log-sd {noise.log_sd:.3f}, {noise.source}", command)


def recommend(data: StudyData, use: str, settings: TieSettings | None = None) -> Recommendation:
    """interactive: best on the objective of the lowest-concurrency profile (default: mean
    E2EL); throughput: best on the objective of the highest-concurrency profile (default:
    output throughput); balanced: the knee of the front. Among trials the noise cannot
    separate from that pick, the one with the fewest changes from vLLM's defaults is
    recommended; with ``settings``, a tie says what resolving it would take."""
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
    cost = None
    if others:
        text += (f" It is tied within the noise with {', '.join(t.label for t in others)} for "
                 f"{why}; of these it changes the fewest flags from vLLM's defaults "
                 f"({len(data.changes_from_defaults(pick))}).")
        if settings is not None:
            cost = tie_cost(data, pick, others, objectives, settings)
            text += cost.text
    elif len(pool) == 1:
        text += (" It is the only feasible trial: with no rival to compare it with, nothing is "
                 "claimed beyond the noise.")
    else:
        text += f" It has {why}, beyond the noise."
    changes = data.changes_from_defaults(pick)
    text += f" Changes from vLLM's defaults: {format_params(changes) or 'none'}."
    text += baseline_sentence(data, pick)
    return Recommendation(use, pick, tuple(others), text, cost)


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


