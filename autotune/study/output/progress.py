"""The lines a running study says: each trial's phase and result, the front so far, the budget
that will end it. Text only: the lines go to the ``say`` the CLI passes (its print), so that
the numbering (#N, as every table names a trial) and the clock are defined once."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from rich.markup import escape

from autotune.core.deployment.slots import Slot
from autotune.core.maths.durations import duration_text
from autotune.core.maths.numbers import number_text
from autotune.core.metrics.registry import LATENCY_METRIC, THROUGHPUT_METRIC, unit_of
from autotune.core.plan.estimate import UNBOUNDED_TRIALS
from autotune.core.trial.capacity_search import boundary_text
from autotune.core.trial.outcome import TrialOutcome
from autotune.study.store.storage import redact


def study_budget_text(plan) -> str:
    """'5 trials', '5 trials or 0:04:00' or '0:04:00' (the time alone decides); ``plan``: its
    ``trials`` and ``time_budget_s``."""
    limit = plan.time_budget_s
    trials = f"{plan.trials} trials"
    if limit is None:
        return trials
    return duration_text(limit) if plan.trials >= UNBOUNDED_TRIALS else f"{trials} or {duration_text(limit)}"


def opening_line(plan, slots: Sequence[Slot], *, worker: str | None = None) -> str:
    """The first line of `run` (the study it works on: model, space, profiles, objectives,
    budget, slots) or of a `worker` (who joins which study, the budget, the slots)."""
    devices = f"{len(slots)} slot(s): {'; '.join(s.devices_text() for s in slots)}"
    budget = f"budget {study_budget_text(plan)}, {devices}"
    if worker is not None:
        return f"worker {worker} joins study {plan.study_name!r} in {redact(plan.storage)}: {budget}"
    return (f"study {plan.study_name!r} in {redact(plan.storage)}: model {plan.model.name}, space "
            f"{plan.space.path}, profiles {', '.join(plan.profile_names)}, objectives "
            f"{', '.join(o.name for o in plan.objectives)}, {budget}")


class ProgressLines:
    """Says each trial by its number (#N) with how far the study is ('3 of 10'), the phase and
    the time elapsed since ``started`` (epoch seconds; default now: `run` passes its own start,
    so the clock runs on through confirmation), one line per change; ``label`` names the
    worker when several print to one terminal. The lines are rich markup (the label escaped)."""

    def __init__(self, say: Callable[[str], object], label: str = "",
                 started: float | None = None) -> None:
        self.say = say
        self.t0 = time.time() if started is None else started
        self.label = escape(f" [{label}]") if label else ""

    def _stamp(self) -> str:
        s = int(max(time.time() - self.t0, 0))
        return f"[{duration_text(s, clock=True)}]{self.label}"

    def phase(self, number: int, total: int, phase: str, trial: int | None = None) -> None:
        name = f"#{trial} ({_of(number, total)})" if trial is not None else _of(number, total)
        self.say(f"{self._stamp()} trial {name}: {phase}")

    def trial_done(self, number: int, total: int, trial: TrialOutcome, front: list[int]) -> None:
        self.say(f"{self._stamp()} trial #{trial.number} ({_of(number, total)}): "
                 f"{trial_result_line(trial)}")
        self.say(f"{self._stamp()} Pareto front so far: "
                 f"{', '.join(f'#{n}' for n in front) or 'no feasible trial yet'}")

    def message(self, text: str) -> None:
        self.say(f"{self._stamp()} {text}")


def _of(number: int, total: int) -> str:
    """'3 of 10', or '3 so far' where a time budget, not a trial count, ends the study."""
    return f"{number} of {total}" if total < UNBOUNDED_TRIALS else f"{number} so far"


def trial_result_line(t: TrialOutcome) -> str:
    if t.failure is not None:
        dup = f" (same flags as #{t.duplicate_of}, not relaunched)" if t.duplicate_of is not None \
            and t.startup_s is None else ""
        return f"infeasible, {t.failure.name}: {t.failure_message[:200]}{dup}"
    tput, lat = THROUGHPUT_METRIC, LATENCY_METRIC
    parts = [f"{p}: {number_text(r.mean(tput))} {unit_of(tput)}, {number_text(r.mean(lat))} {unit_of(lat)}"
             for p, r in t.results.items() if p not in t.capacity]
    parts += [f"{p}: {boundary_text(s)}" + (
        f", {number_text(t.value(p, tput))} {unit_of(tput)} there" if s.boundary.found else "")
        for p, s in t.capacity.items()]
    return f"ready in {t.startup_detail}; " + "; ".join(parts)
