"""Confirmation of finalists: the front's members and the baseline (or the trials asked for),
deployed again and measured in interleaved rounds (A, B, base, then B, base, A, ...), so that
drift of the machine hits every finalist alike. A capacity profile is not searched again:
each redeployment re-probes the boundary the trial's search found (``BenchPlan.around``).
The confirmed runs are stored apart from the search's and added to those of earlier
confirmations (``state.add_confirmed``); they are what recommendations, exports and reports
use."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import optuna

from autotune.core.analysis.study_data import StudyData, finalists
from autotune.core.trial.outcome import ProfileResult, TrialOutcome
from autotune.errors import ConfigError
from autotune.study.plans import StudyPlan
from autotune.study.records import study_data
from autotune.study.state import add_confirmed
from autotune.study.trial import TrialFunction, TrialSetup, run_trial

CONFIRM_ROUNDS = 2  # rounds of a confirmation: every finalist deployed once per round


def check_rounds(rounds: int) -> None:
    """The rule for ``--rounds``: a confirmation deploys every trial at least once."""
    if rounds < 1:
        raise ConfigError(f"--rounds {rounds}: must be >= 1 (each round deploys every trial once)")


def chosen_trials(data: StudyData, numbers: Sequence[int]) -> list[TrialOutcome]:
    """The trials ``numbers`` asked for by `confirm --trials`: each a served (feasible) trial."""
    served = {t.number: t for t in data.outcomes if t.feasible and t.argv}
    wrong = [n for n in numbers if n not in served]
    if wrong or not numbers:
        raise ConfigError(f"--trials {','.join(map(str, numbers))}: {', '.join(f'#{n}' for n in wrong)} "
                          f"not a served trial of this study; served: "
                          f"{', '.join(f'#{n}' for n in sorted(served)) or 'none'}")
    return [served[n] for n in dict.fromkeys(numbers)]


def confirm(study: optuna.Study, plan: StudyPlan, setup: TrialSetup, *, k: int = 0,
            trials: Sequence[int] | None = None, rounds: int = CONFIRM_ROUNDS,
            trial_fn: TrialFunction = run_trial,
            say: Callable[[str], None] = lambda text: None) -> dict[int, dict[str, ProfileResult]]:
    """Deploy ``trials`` (default: up to ``k`` finalists and the baseline) ``rounds`` times,
    rotating the order every round; add the runs of every profile per trial to those stored,
    and return this confirmation's. A trial that fails a redeployment keeps the runs of the
    rounds it served, and the failure is said."""
    check_rounds(rounds)
    data = study_data(study, confirmed=False)
    chosen = finalists(data, k) if trials is None else chosen_trials(data, trials)
    base = plan.workdir / "trials" / plan.study_name
    earlier = {t.number: len(list(base.glob(f"confirm-{t.number:04d}-*"))) for t in chosen}
    runs: dict[int, dict[str, list]] = {t.number: {} for t in chosen}
    for r in range(rounds):
        order = chosen[r % len(chosen):] + chosen[:r % len(chosen)] if chosen else []
        for i, t in enumerate(order):
            tag = f"confirm round {r + 1}/{rounds}, {i + 1}/{len(order)}: trial {t.label}"
            here = dataclasses.replace(
                setup, model=plan.model.name,
                workdir=base / f"confirm-{t.number:04d}-{earlier[t.number] + r + 1}")
            bench = dataclasses.replace(plan.bench, around={
                p: s.boundary for p, s in t.capacity.items() if s.boundary.found})
            m = trial_fn(t.argv, bench, here, lambda ph, tag=tag: say(f"{tag}: {ph}"))
            if m.failure is not None:
                say(f"{tag}: failed again, {m.failure.name}: {m.failure_message[:200]}")
                continue
            for profile, result in m.results.items():
                runs[t.number].setdefault(profile, []).extend(result.runs)
    confirmed = {n: {p: ProfileResult(p, tuple(r)) for p, r in by_profile.items()}
                 for n, by_profile in runs.items() if by_profile}
    add_confirmed(study, confirmed)
    return confirmed
