"""How long a run would take, for `run --dry-run`: the trials still to run, the baseline's
calibration redeployment and the confirmation, at the cost of a deployment the study (or another
of the same model) measured, else at the platform's prior. Pure. A measured cost is what the
time budget expects (``budget.trial_cost``, ``deployment_cost_s``); a prior is a guess from one
machine (``platforms.Platform``), and the line says which it is."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.core.maths.durations import duration_text
from autotune.core.maths.platforms import CPU, platform
from autotune.core.plan.budget import measured_trials, trial_cost
from autotune.core.plan.confirmation import deployment_cost_s
from autotune.core.trial.outcome import TrialOutcome

UNBOUNDED_TRIALS = 10_000  # with a time budget and no trial count: the time decides


@dataclass(frozen=True)
class DeploymentCost:
    """What one deployment costs (wall seconds, start-up to teardown) and where that is from."""

    trial_s: float  # a new engine's trial
    again_s: float  # a redeployment of a measured engine (calibration, confirmation)
    startup_s: float | None  # the start-up within a trial, where measured
    source: str  # "measured: 4 served trials of this study, priced as ..." | "assumed: ..."


def measured_cost(outcomes: Sequence[TrialOutcome], where: str) -> DeploymentCost | None:
    """The cost of one more trial as `run`'s time budget prices it (``budget.trial_cost``: on
    a warm machine, the first deployment's cold start excluded), and of a redeployment, from
    the served trials of ``outcomes`` (``where``: 'of this study'); None when none carries its
    wall time."""
    cost = trial_cost(outcomes)
    if cost is None:
        return None
    served = [t for t in measured_trials(outcomes) if t.trial_wall_s]
    return DeploymentCost(
        cost.total_s, deployment_cost_s(outcomes, again=True) or cost.total_s, cost.start_s,
        f"measured: {len(served)} served trial{'s' * (len(served) != 1)} {where}, priced as "
        "the time budget prices the next (the first deployment's cold start excluded)")


def assumed_cost(name: str) -> DeploymentCost:
    """The platform's prior (``cpu`` or ``gpu``), where nothing is measured."""
    prior = platform(name)
    label = "CPU build" if prior.name == CPU else "GPU"
    return DeploymentCost(prior.trial_s, prior.redeploy_s, None,
                          f"assumed: nothing measured yet, the {label} prior of "
                          f"~{duration_text(prior.trial_s)} a trial")


@dataclass(frozen=True)
class RunEstimate:
    """A run's expected wall time: ``trials`` more trials (None: as many as the time budget
    allows) on ``slots`` slots at once, ``calibration`` and ``confirmation`` redeployments
    (one at a time), capped by the time budget ``budget_s``."""

    trials: int | None
    slots: int
    calibration: int
    confirmation: int
    budget_s: float | None
    cost: DeploymentCost

    @property
    def uncapped_s(self) -> float | None:
        """The sum of its parts (None where the time budget alone decides the trials)."""
        if self.trials is None:
            return None
        waves = math.ceil(self.trials / max(self.slots, 1))
        return waves * self.cost.trial_s + (self.calibration + self.confirmation) * self.cost.again_s

    @property
    def total_s(self) -> float:
        uncapped = self.uncapped_s
        if uncapped is None:
            return self.budget_s or 0.0
        return min(uncapped, self.budget_s) if self.budget_s is not None else uncapped

    @property
    def text(self) -> str:
        """'estimated length: about 24 min: 10 trials x ~1 min 30 s on 1 slot, 1 calibration
        redeployment, confirmation up to 6 deployments of ~1 min 30 s (assumed: ...)'."""
        c = self.cost
        slot = f"{self.slots} slot{'s' * (self.slots != 1)}"
        if self.trials is None:
            fit = max(int(self.budget_s or 0.0) // max(int(c.trial_s), 1), 0) * max(self.slots, 1)
            parts = [f"the time budget decides: about {fit} trials of ~{duration_text(c.trial_s)} "
                     f"on {slot} fit in it, less the calibration and the confirmation"]
        else:
            parts = [f"{self.trials} trial{'s' * (self.trials != 1)} x ~{duration_text(c.trial_s)} "
                     f"on {slot}"]
            if self.calibration:
                parts.append(f"{self.calibration} calibration redeployment")
            if self.confirmation:
                parts.append(f"confirmation up to {self.confirmation} deployments of "
                             f"~{duration_text(c.again_s)}")
        startup = (f", start-up ~{duration_text(c.startup_s)} of a trial"
                   if c.startup_s is not None else "")
        capped = ("; capped by the time budget" if self.budget_s is not None
                  and self.uncapped_s is not None and self.uncapped_s > self.budget_s else "")
        return (f"estimated length: about {duration_text(self.total_s)}: {', '.join(parts)}"
                f"{capped} ({c.source}{startup})")
