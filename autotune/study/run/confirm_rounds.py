"""Confirmation of finalists: the front's members and the baseline, deployed again in interleaved
rounds (A, B, base, then B, base, A, ...), so that drift of the machine hits every finalist
alike; a capacity profile re-probes its trial's boundary (``BenchSpec.around``). Planned by
``core.plan.confirmation``. Each deployment's runs are stored as it is torn down: an interrupted
confirmation keeps them, and `confirm` continues it (docs/studies.md#confirmation)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import optuna

from autotune.core.analysis.study_data import StudyData, finalists
from autotune.core.maths.durations import duration_text
from autotune.core.plan.budget import redeployment_start_s
from autotune.core.plan.confirmation import (
    CONFIRM_ROUNDS,
    ConfirmationState,
    by_priority,
    in_question,
    next_deployment,
    schedule_confirmation,
)
from autotune.core.plan.trial_context import TrialValues, trial_context
from autotune.core.trial.outcome import ProfileResult, TrialOutcome
from autotune.errors import ConfigError, StudyError
from autotune.study.output.notes import write_notes
from autotune.study.run.live_data import LiveData
from autotune.study.run.study_plan import StudyPlan
from autotune.study.run.trial_function import TrialFunction, TrialSetup, run_trial
from autotune.study.store.records import OthersNoise, store_noise
from autotune.study.store.state import add_confirmed, read_confirmation, write_confirmation


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


def _unfinished(stored: ConfirmationState, trials: Sequence[int] | None,
                finalists_now: Sequence[int]) -> bool:
    """A stored confirmation that did not finish, and that this call asks for again: the same
    trials, or (asked for the finalists) trials that are all finalists still (or the other
    side of an open pair with one); a search resumed since may have changed the front."""
    return bool(stored.trials) and not stored.finished and (
        set(stored.trials) <= set(finalists_now) if trials is None
        else set(trials) == set(stored.trials))


def plan_or_resume(study: optuna.Study, data: StudyData, *, k: int, trials: Sequence[int] | None,
                   rounds: int, left_s: float | None, say: Callable[[str], None],
                   judged: StudyData | None = None) -> ConfirmationState:
    """The confirmation to run: the unfinished one stored in the study, when this call asks for
    it again, or a new one of ``trials`` (default: up to ``k`` finalists and the baseline; given
    ``judged``, the study's data with its confirmed runs: of those, only the ones in a
    comparison still undecided there, ``in_question``)
    planned to fit ``left_s`` (``schedule_confirmation``), stored before anything deploys."""
    stored = read_confirmation(study)
    base = data.baseline.number if data.baseline is not None else None
    finalists_now = by_priority([t.number for t in finalists(data, k)], base) if trials is None else []
    # A confirmation redeploys both sides of an open pair (``in_question``): a stored one may
    # hold a rival that is no finalist.
    reach = (finalists_now + in_question(judged or data, finalists_now)[0]
             if trials is None and stored.trials and not stored.finished else finalists_now)
    if _unfinished(stored, trials, reach):
        say(f"continuing the confirmation stored in the study: {len(stored.done)} of up to "
            f"{len(stored.trials) * stored.rounds} deployment(s) done")
        return stored
    numbers = finalists_now if trials is None else [t.number for t in chosen_trials(data, trials)]
    if trials is None and judged is not None:
        numbers, why = in_question(judged, numbers)
        say(why)
        if not numbers:
            state = ConfirmationState(deployed=stored.deployed, finished=True)
            write_confirmation(study, state)
            return state
    planned = schedule_confirmation(numbers, rounds, left_s=left_s, deployment_s=data.deployment_s)
    say(planned.message)
    state = ConfirmationState(planned.trials, planned.rounds, deployed=stored.deployed,
                              finished=not planned.trials)
    write_confirmation(study, state)
    return state


def deploy_once(study: optuna.Study, plan: StudyPlan, setup: TrialSetup, t: TrialOutcome,
                count: int, *, trial_fn: TrialFunction, say: Callable[[str], None],
                tag: str, live: LiveData | None = None,
                run_s: float | None = None) -> dict[str, ProfileResult]:
    """Deploy trial ``t`` once more (its ``count``-th confirmation deployment) with the study's
    benchmark, a capacity profile re-probing the boundary its search found; its runs are stored
    the moment it is torn down. Returns them ({} when it failed, which is said). ``live``:
    the study's data in memory, as the caller holds it (None: read here); ``run_s``:
    the seconds a time budget leaves its fixed runs, shared among them (None: no budget)."""
    folder = plan.workdir / "trials" / plan.study_name
    while (folder / f"confirm-{t.number:04d}-{count}").exists():  # an older autotune's
        count += 1
    live = LiveData.open(study) if live is None else live
    here, bench = trial_context(setup, plan.bench, TrialValues(
        model=plan.model.name, workdir=folder / f"confirm-{t.number:04d}-{count}",
        data=live.data(), run_s=run_s,
        around={p: s.boundary for p, s in t.capacity.items() if s.boundary.found}))
    m = trial_fn(t.argv, bench, here, lambda ph: say(f"{tag}: {ph}"))
    if m.failure is not None:
        say(f"{tag}: failed again, {m.failure.name}: {m.failure_message[:200]}")
        return {}
    if m.results:
        add_confirmed(study, {t.number: dict(m.results)})
        live.attrs_changed()
        # the spread between deployments, for later studies to inherit (none inherited here)
        store_noise(study, live.data(others=OthersNoise()).outcomes)
        live.attrs_changed()
    return dict(m.results)


def confirm(study: optuna.Study, plan: StudyPlan, setup: TrialSetup, *, k: int = 0,
            trials: Sequence[int] | None = None, rounds: int = CONFIRM_ROUNDS,
            trial_fn: TrialFunction = run_trial,
            say: Callable[[str], None] = lambda text: None,
            budget_end: float | None = None,
            clock: Callable[[], float] = time.time,
            only_open: bool = False,
            live: LiveData | None = None,
            figures: bool = True) -> dict[int, dict[str, ProfileResult]]:
    """Deploy ``trials`` (default: up to ``k`` finalists and the baseline) once each, then one
    at a time the finalist whose redeployment most reduces the chance of a wrong pick, until
    every use is decided or equivalent or ``rounds`` are spent; none that would end past
    ``budget_end`` (epoch s). A stored unfinished one is continued; ``only_open``: only finalists
    in question; ``live``: the study's data, if held; ``figures``: drawn after (``write_notes``).
    Returns the runs added (a failed redeployment keeps its runs)."""
    check_rounds(rounds)
    # The study's data: the caller's (a session that ran the search), else read once here;
    # what the confirmation stores is written through.
    live = LiveData.open(study) if live is None else live
    data = live.data(confirmed=False)
    served = {t.number: t for t in data.outcomes if t.feasible and t.argv}
    left = None if budget_end is None else max(budget_end - clock(), 0.0)
    state = plan_or_resume(study, data, k=k, trials=trials, rounds=rounds, left_s=left, say=say,
                           judged=live.data() if only_open else None)
    chosen = [served[n] for n in state.trials if n in served]
    if not chosen:
        _write_notes(study, plan, say, figures)  # a skipped confirmation still leaves the notes confirmed
        return {}
    walls: list[float] = []
    runs: dict[int, dict[str, list]] = {t.number: {} for t in chosen}
    total = state.total_steps
    stop, budget_ended = "", False
    for r in range(total):
        if r < len(state.steps):
            members = list(state.steps[r])
        else:
            members = [t.number for t in chosen]
            if r > 0:
                decision = next_deployment(live.data(), members)
                if not decision.open:
                    stop = decision.reason
                    break
                say(f"confirm step {r + 1} of up to {total}: {decision.reason}")
                members = list(decision.open)
            state = state.with_step(members)
            write_confirmation(study, state)
        these = [served[n] for n in members if n in served]
        order = these[r % len(these):] + these[:r % len(these)] if these else []
        for i, t in enumerate(order):
            if (r, t.number) in state.done:
                continue
            each = sum(walls) / len(walls) if walls else data.deployment_s
            now = clock()
            if budget_end is not None and (now >= budget_end or (
                    each is not None and now + each > budget_end)):
                stop = (f"confirmation stops: the time budget ends "
                        f"({duration_text(max(budget_end - now, 0))} left, a deployment takes "
                        f"~{duration_text(each or 0)}); `autotune confirm --study "
                        f"{plan.study_name}` continues it")
                budget_ended = True
                break
            count = state.deployments_of(t.number) + 1
            tag = (f"confirm step {r + 1} of up to {total}, deployment {i + 1} of {len(order)}: "
                   f"trial {t.label}")
            start = redeployment_start_s(data.outcomes) or 0.0
            got = deploy_once(study, plan, setup, t, count, trial_fn=trial_fn, say=say, tag=tag,
                              live=live,
                              run_s=None if budget_end is None else budget_end - now - start)
            walls.append(clock() - now)
            for profile, result in got.items():
                runs[t.number].setdefault(profile, []).extend(result.runs)
            state = state.with_done(r, t.number, count)
            write_confirmation(study, state)
        if stop:
            break
    state = dataclasses.replace(state, finished=not budget_ended)  # else `confirm` continues it
    write_confirmation(study, state)
    say(stop or f"confirmation done: {len(state.done)} deployment(s), the most the asked "
               f"rounds allow")
    _write_notes(study, plan, say, figures)
    return {n: {p: ProfileResult(p, tuple(r)) for p, r in by_profile.items()}
            for n, by_profile in runs.items() if by_profile}


def _write_notes(study: optuna.Study, plan: StudyPlan, say: Callable[[str], None],
                 figures: bool) -> None:
    try:  # the dashboard's notes tell the confirmed numbers, as `pareto` does
        write_notes(study, plan, figures=figures)
    except StudyError as exc:
        say(str(exc))
