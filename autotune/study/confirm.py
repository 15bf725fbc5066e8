"""Confirmation of finalists: the front's members and the baseline, deployed again and
measured in interleaved rounds (A, B, base, then B, base, A, ...), so that drift of the
machine hits every finalist alike. The confirmed numbers are stored apart from the search's
(``state.write_confirmed``) and are what recommendations, exports and reports use."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import optuna

from autotune.core.analysis.study_data import finalists
from autotune.core.trial.outcome import ProfileResult
from autotune.study.plans import StudyPlan
from autotune.study.records import study_data
from autotune.study.state import write_confirmed
from autotune.study.trial import TrialFunction, TrialSetup, run_trial

CONFIRM_ROUNDS = 2  # rounds of a confirmation: every finalist deployed once per round


def confirm(study: optuna.Study, plan: StudyPlan, setup: TrialSetup, *, k: int,
            rounds: int = CONFIRM_ROUNDS,
            trial_fn: TrialFunction = run_trial,
            say: Callable[[str], None] = lambda text: None) -> dict[int, dict[str, ProfileResult]]:
    """Deploy each finalist ``rounds`` times, rotating the order every round; store and return
    the runs of every profile per trial. A finalist that fails a redeployment keeps the runs
    of the rounds it served, and the failure is said."""
    chosen = finalists(study_data(study, confirmed=False), k)
    runs: dict[int, dict[str, list]] = {t.number: {} for t in chosen}
    for r in range(rounds):
        order = chosen[r % len(chosen):] + chosen[:r % len(chosen)] if chosen else []
        for i, t in enumerate(order):
            tag = f"confirm round {r + 1}/{rounds}, {i + 1}/{len(order)}: trial {t.label}"
            here = dataclasses.replace(
                setup, model=plan.model.name,
                workdir=plan.workdir / "trials" / plan.study_name / f"confirm-{t.number:04d}-{r + 1}")
            m = trial_fn(t.argv, plan.bench, here, lambda ph, tag=tag: say(f"{tag}: {ph}"))
            if m.failure is not None:
                say(f"{tag}: failed again, {m.failure.name}: {m.failure_message[:200]}")
                continue
            for profile, result in m.results.items():
                runs[t.number].setdefault(profile, []).extend(result.runs)
    confirmed = {n: {p: ProfileResult(p, tuple(r)) for p, r in by_profile.items()}
                 for n, by_profile in runs.items() if by_profile}
    write_confirmed(study, confirmed)
    return confirmed
