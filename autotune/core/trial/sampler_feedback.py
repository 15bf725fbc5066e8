"""The verdict on a measured trial: what the sampler is told. Pure.

Infeasible (its configuration failed, an SLO missed, no load met): constraints > 0, so that the
sampler avoids the region. Served: objective means and one constraint per SLO. A failure not of
the configuration: nothing (FAIL). Values are finite: optuna-dashboard draws +inf as an axis
reading "inf" (docs/studies.md#failures)."""

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
