"""The verdict on a measured trial: what the sampler is told. Pure.

A trial that failed through its configuration, or went past an SLO, or met no load of a
capacity profile is infeasible: its constraints are violated (``> 0``) so that the sampler learns
to avoid the region, and its objective values are those of a trial that served nothing. A served
trial gets its objectives' means and one constraint per SLO (how far past its limit, ``<= 0``
met). A failure that is not the configuration's (the machine's or autotune's) tells the sampler
nothing: no values, no constraints (the trial is failed in Optuna, which samplers ignore).

What is told must be finite (``finite_values``): Optuna stores +inf, and optuna-dashboard then
draws an axis that reads "inf". An infeasible trial is told as COMPLETE with its constraints
violated, so constrained samplers (TPE, NSGA-II, GP read ``Trial.set_constraint``) rank it below
every feasible trial by its violation, whatever its values; its values are a placeholder on the
axis the served trials span (the worst they told), and the dashboard draws it grey, as
infeasible. Its failure class stays in its user attributes and its note.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.core.deployment import failures
from autotune.core.metrics.slo import Slo
from autotune.core.trial.capacity_search import boundary_text
from autotune.core.trial.objectives import Objective, objective_values
from autotune.core.trial.outcome import TrialOutcome

FEASIBLE = "served"  # constraint: > 0 when the trial did not deliver a valid measurement


def capacity_key(profile: str) -> str:
    """Constraint: > 0 when no load of the capacity profile met its SLOs."""
    return f"{profile}:capacity"


@dataclass(frozen=True)
class Told:
    """The outcome to store (SLO failures classified), its constraints and objective values
    (None: nothing to tell the sampler, the failure is not the configuration's)."""

    outcome: TrialOutcome
    constraints: dict[str, float]
    values: list[float] | None


def what_to_tell(outcome: TrialOutcome, objectives: Sequence[Objective], slos: Sequence[Slo],
          capacity_profiles: Sequence[str]) -> Told:
    """The verdict on ``outcome``: constraints served, then one per SLO and capacity profile."""
    if outcome.failure is not None and not outcome.failure.blames_configuration:
        return Told(outcome, {}, None)
    if outcome.failure is not None:
        constraints = {FEASIBLE: 1.0, **{slo.key: 1.0 for slo in slos},
                       **{capacity_key(p): 1.0 for p in capacity_profiles}}
        return Told(outcome, constraints, [o.infeasible_value for o in objectives])
    means = {p: r.means() for p, r in outcome.results.items()}
    violations = {slo.key: slo.violation(means[slo.profile][slo.metric]) for slo in slos}
    past = [key for key, v in violations.items() if v > 0]
    outcome = dataclasses.replace(outcome, slo_violations=violations)
    none = [s for s in outcome.capacity.values()
            if not s.boundary.found and s.boundary.below_incumbent is None]
    if past:
        outcome = dataclasses.replace(outcome, failure=failures.SLO_VIOLATED,
                                      failure_message=f"past the SLO {', '.join(past)}")
    elif none:
        outcome = dataclasses.replace(
            outcome, failure=failures.SLO_VIOLATED,
            failure_message="; ".join(f"{s.profile}: {boundary_text(s)}" for s in none))
    constraints = {FEASIBLE: 0.0, **violations, **{
        capacity_key(p): float(any(s.profile == p for s in none)) for p in capacity_profiles}}
    # A search stopped below an incumbent measured no capacity: the sampler is told the value
    # of a trial that carried nothing there (the trial itself is dominated).
    values = [objective_values([o], means)[0] if o.profile in means else o.infeasible_value
              for o in objectives]
    return Told(outcome, constraints, values)


def finite_values(values: Sequence[float], objectives: Sequence[Objective],
                  told: Sequence[Sequence[float]]) -> list[float]:
    """``values`` with every value that is not finite (a trial that served nothing) replaced
    by the worst finite value that ``told`` (the feasible trials' values) hold on that
    objective, or 0 where none holds one: a placeholder inside the plotted range."""
    out = []
    for i, (value, o) in enumerate(zip(values, objectives, strict=True)):
        if math.isfinite(value):
            out.append(value)
            continue
        seen = [v[i] for v in told if len(v) > i and math.isfinite(v[i])]
        out.append((max(seen) if o.minimize else min(seen)) if seen else 0.0)
    return out
