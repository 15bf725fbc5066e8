"""Recommendations: the trial for each use, the trials the noise cannot separate from it, and
why, with intervals. Pure.

A difference whose interval contains zero is a tie: ``recommend`` lists the tied trials and
prefers the one that changes fewest flags from vLLM's defaults; a trial without a rival is
never called best "beyond the noise".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.core.analysis.study_data import StudyData, describe_params
from autotune.core.maths.pareto import knee
from autotune.core.maths.stats import compare
from autotune.core.trial.objectives import Objective
from autotune.core.trial.outcome import TrialOutcome

USES = ("interactive", "throughput", "balanced")


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
    elif len(pool) == 1:
        text += (" It is the only feasible trial: with no rival to compare it with, nothing is "
                 "claimed beyond the noise.")
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


