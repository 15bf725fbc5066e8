"""What a confirmation deploys, inside the time it has. Pure.

A confirmation redeploys finalists (the front's members and the baseline) in interleaved
rounds. Two decisions are made here, from numbers the study measured:

- ``plan_confirmation``: before it starts, the confirmation that fits the time left at the
  study's measured cost of one redeployment (``deployment_cost_s(again=True)``): the asked one, or fewer
  rounds, or fewer finalists (the front's two ends and the baseline first), or none, said in
  one line with what the full confirmation would take.
- ``open_finalists``: after its first round, which finalists a further round still informs:
  those tied with a rival (``recommend``'s ties) while the stated smallest difference is not
  ruled out between them. None open: every use is decided, or every tie is the answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.core.analysis.study_data import StudyData
from autotune.core.maths.durations import duration_text
from autotune.core.maths.stats import compare
from autotune.core.trial.objectives import Objective
from autotune.core.trial.outcome import TrialOutcome


def deployment_cost_s(outcomes: Sequence[TrialOutcome], *, again: bool = False) -> float | None:
    """The measured wall seconds of one deployment: the mean ``trial_wall_s`` of the served
    trials (measured, raced ones excepted: a race cuts its runs short); None when no served
    trial carries one (nothing measured yet, or an imported study). ``again``: of a
    deployment of an engine already measured (a confirmation's), which finds its compiled
    graphs in the shared cache: each wall less the compile seconds its trial spent filling
    that cache (on 2 CPU cores a 94 s trial less its 30 s of compile: 64 s; its redeployments
    took 57 s)."""
    return _mean([t.trial_wall_s - (_compile_filled_s(t) if again else 0.0) for t in outcomes
                  if t.trial_wall_s and t.results and not t.raced and not t.skipped])


def failed_deployment_cost_s(outcomes: Sequence[TrialOutcome]) -> float | None:
    """Until a trial is served, the floor of what one costs: the mean ``trial_wall_s`` of the
    trials that launched a server and failed with it (a crash, a start-up timeout; rejected
    flags launch none). None when no such trial carries one."""
    return _mean([t.trial_wall_s for t in outcomes
                  if t.trial_wall_s and t.failure and t.startup_s and not t.results and not t.skipped])


def _mean(walls: Sequence[float]) -> float | None:
    return sum(walls) / len(walls) if walls else None


def _compile_filled_s(t: TrialOutcome) -> float:
    phases = t.startup_phases
    return float(phases.get("compile_s", 0.0)) if phases.get("compile_cache") == "miss" else 0.0


def by_priority(chosen: Sequence[int], baseline: int | None) -> list[int]:
    """``chosen`` (finalists in ``study_data.finalists``' order: the front's members along it,
    then the baseline) in the order a shrunk confirmation keeps them: the front's two ends,
    the baseline, then the members between the ends."""
    front = [n for n in chosen if n != baseline]
    ends = list(dict.fromkeys(front[:1] + front[-1:]))
    base = [baseline] if baseline is not None and baseline in chosen else []
    return ends + base + [n for n in front if n not in ends]


@dataclass(frozen=True)
class ConfirmationPlan:
    """The confirmation to run: ``trials`` (by priority) deployed once per round for
    ``rounds`` rounds (none: skipped), and the one line that says what was cut."""

    trials: tuple[int, ...]
    rounds: int
    message: str

    @property
    def deployments(self) -> int:
        return len(self.trials) * self.rounds


def plan_confirmation(trials: Sequence[int], rounds: int, *, left_s: float | None,
                      deployment_s: float | None) -> ConfirmationPlan:
    """The confirmation of ``trials`` (by priority, see ``by_priority``) in ``rounds`` rounds
    that fits ``left_s`` seconds (None: no time budget) at ``deployment_s`` a deployment (None:
    not measured). Rounds are cut first (the first round deploys every finalist once; later
    rounds only resolve ties), then finalists, lowest priority first; with no room for one
    deployment it is skipped. Without a measured cost the asked confirmation is planned, and
    each deployment still starts only while time is left."""
    trials = tuple(trials)
    asked = f"{len(trials)} trial(s) x {rounds} round(s)"
    if not trials or rounds < 1:
        return ConfirmationPlan((), 0, "confirmation: no finalist to confirm")
    if left_s is None:
        return ConfirmationPlan(trials, rounds, f"confirmation: {asked}")
    if deployment_s is None:
        return ConfirmationPlan(trials, rounds, (
            f"confirmation: {asked}; no served trial measured the cost of a deployment, so each "
            f"deployment starts only while time is left ({duration_text(left_s)})"))
    full = len(trials) * rounds * deployment_s
    room = math.floor(left_s / deployment_s + 1e-9)
    would = (f"the full confirmation ({asked}) would take {duration_text(full)} at ~{duration_text(deployment_s)} a "
             f"deployment; {duration_text(left_s)} of the time budget is left")
    if room >= len(trials) * rounds:
        return ConfirmationPlan(trials, rounds, f"confirmation: {asked}, about {duration_text(full)} of "
                                                f"{duration_text(left_s)} left")
    if room >= len(trials):
        fit = room // len(trials)
        return ConfirmationPlan(trials, fit, f"confirmation shrunk to {len(trials)} trial(s) x "
                                             f"{fit} round(s): {would}")
    if room >= 1:
        return ConfirmationPlan(trials[:room], 1, (
            f"confirmation shrunk to {room} trial(s) x 1 round(s) "
            f"({', '.join(f'#{n}' for n in trials[:room])}): {would}"))
    return ConfirmationPlan((), 0, f"confirmation skipped: {would}")


@dataclass(frozen=True)
class RoundDecision:
    """The finalists a next round redeploys (none: stop) and why, in one line."""

    open: tuple[int, ...]
    reason: str


def _ruled_out(data: StudyData, a: TrialOutcome, b: TrialOutcome,
               objectives: Sequence[Objective], smallest_difference: float) -> bool:
    """True when, on every objective, the interval of ``a``'s change against ``b`` lies within
    +/- the smallest difference: whatever separates them is smaller than what matters."""
    d = 100.0 * smallest_difference
    for o in objectives:
        change = compare(data.objective_estimate(a, o), data.objective_estimate(b, o))
        if not (-d <= change.low_pct and change.high_pct <= d):
            return False
    return True


def open_finalists(data: StudyData, finalists: Sequence[int],
                   smallest_difference: float) -> RoundDecision:
    """Which of ``finalists`` a further round informs, from ``data`` (confirmed numbers
    included): for each use, the pick and each tied rival whose difference is not yet ruled
    out at ``smallest_difference``, when both are finalists (a rival that is not one is not
    redeployed, and the pick is then redeployed alone against it)."""
    # Imported here: recommend may price ties with this module's ``deployment_cost_s``.
    from autotune.core.analysis.recommend import USES, NoFeasibleTrial, recommend

    wanted = set(finalists)
    open_: set[int] = set()
    ties = 0
    for use in USES:
        try:
            rec = recommend(data, use)
        except NoFeasibleTrial:
            continue
        objectives = data.objectives if use == "balanced" else (data.objective_for(use),)
        for rival in rec.tied:
            ties += 1
            if _ruled_out(data, rival, rec.trial, objectives, smallest_difference):
                continue
            open_ |= {n for n in (rec.trial.number, rival.number) if n in wanted}
    d = f"{100 * smallest_difference:g}%"
    if open_:
        ordered = tuple(n for n in finalists if n in open_)
        return RoundDecision(ordered, f"still open at {d}: {', '.join(f'#{n}' for n in ordered)}")
    if ties:
        return RoundDecision((), f"confirmation stops: a difference of {d} is ruled out for every "
                                 "tie (the tie is the answer)")
    return RoundDecision((), "confirmation stops: every use (interactive, throughput, balanced) "
                             "is decided beyond the noise")
