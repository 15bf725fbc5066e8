"""What a confirmation deploys, inside the time it has. Pure.

``schedule_confirmation``: before it starts, what fits the time left at the measured cost of a
redeployment (fewer rounds, fewer finalists, or none, said in one line). ``next_deployment``:
after the first round, the finalist whose redeployment most reduces the chance that a use's pick
is wrong, until every use is decided or equivalent (docs/studies.md#confirmation)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scipy.special import ndtr

from autotune.core.analysis.study_data import StudyData
from autotune.core.maths.durations import duration_text
from autotune.core.maths.stats import Verdict
from autotune.core.plan.budget import compile_filled_s, measured_trials
from autotune.core.trial.objectives import Objective
from autotune.core.trial.outcome import TrialOutcome
from autotune.errors import ConfigError

CONFIRM_ROUNDS = 2  # rounds of a confirmation asked by default: the first, and one for ties


def trial_numbers(text: str) -> list[int]:
    """`confirm --trials 3,7`: trial numbers, each once."""
    parts = [part.strip().removeprefix("#") for part in text.split(",")]
    if not all(part.isdigit() for part in parts):
        raise ConfigError(f"--trials {text!r}: expected trial numbers separated by commas, e.g. 3,7")
    return list(dict.fromkeys(int(part) for part in parts))


def deployment_cost_s(outcomes: Sequence[TrialOutcome], *, again: bool = False) -> float | None:
    """The measured wall seconds of one deployment: the mean ``trial_wall_s`` of the served trials
    (raced ones excepted: a race cuts its runs short); None where none has one (none yet, or an
    imported study). ``again``: a measured engine's redeployment, its compiled graphs cached: each
    wall less the compile seconds its trial spent filling that cache (on 2 CPU cores a 94 s trial
    less its 30 s of compile: 64 s; its redeployments took 57 s)."""
    return _mean([t.trial_wall_s - (compile_filled_s(t) if again else 0.0)
                  for t in measured_trials(outcomes) if t.trial_wall_s])


def failed_deployment_cost_s(outcomes: Sequence[TrialOutcome]) -> float | None:
    """Until a trial is served, the floor of what one costs: the mean ``trial_wall_s`` of the
    trials that launched a server and failed with it (a crash, a start-up timeout; rejected
    flags launch none). None when no such trial carries one."""
    return _mean([t.trial_wall_s for t in outcomes
                  if t.trial_wall_s and t.failure and t.startup_s and not t.results and not t.skipped])


def _mean(walls: Sequence[float]) -> float | None:
    return sum(walls) / len(walls) if walls else None


def by_priority(chosen: Sequence[int], baseline: int | None) -> list[int]:
    """``chosen`` (finalists in ``study_data.finalists``' order: the front's members along it,
    then the baseline) in the order a shrunk confirmation keeps them: the front's two ends,
    the baseline, then the members between the ends."""
    front = [n for n in chosen if n != baseline]
    ends = list(dict.fromkeys(front[:1] + front[-1:]))
    base = [baseline] if baseline is not None and baseline in chosen else []
    return ends + base + [n for n in front if n not in ends]


@dataclass(frozen=True)
class ConfirmationSchedule:
    """The confirmation to run: ``trials`` (by priority) deployed once per round for
    ``rounds`` rounds (none: skipped), and the one line that says what was cut."""

    trials: tuple[int, ...]
    rounds: int
    message: str

    @property
    def deployments(self) -> int:
        return len(self.trials) * self.rounds


def schedule_confirmation(trials: Sequence[int], rounds: int, *, left_s: float | None,
                          deployment_s: float | None) -> ConfirmationSchedule:
    """The confirmation of ``trials`` (by priority, see ``by_priority``) in ``rounds`` rounds
    that fits ``left_s`` seconds (None: no time budget) at ``deployment_s`` a deployment (None:
    not measured). Rounds are cut first (the first round deploys every finalist once; later
    rounds only resolve ties), then finalists, lowest priority first; with no room for one
    deployment it is skipped. Without a measured cost the asked confirmation is planned, and
    each deployment still starts only while time is left."""
    trials = tuple(trials)
    asked = f"{len(trials)} trial(s) x {rounds} round(s)"
    if not trials or rounds < 1:
        return ConfirmationSchedule((), 0, "confirmation: no finalist to confirm")
    if left_s is None:
        return ConfirmationSchedule(trials, rounds, f"confirmation: {asked}")
    if deployment_s is None:
        return ConfirmationSchedule(trials, rounds, (
            f"confirmation: {asked}; no served trial measured the cost of a deployment, so each "
            f"deployment starts only while time is left ({duration_text(left_s)})"))
    full = len(trials) * rounds * deployment_s
    room = math.floor(left_s / deployment_s + 1e-9)
    would = (f"the full confirmation ({asked}) would take {duration_text(full)} at ~{duration_text(deployment_s)} a "
             f"deployment; {duration_text(left_s)} of the time budget is left")
    if room >= len(trials) * rounds:
        return ConfirmationSchedule(trials, rounds, f"confirmation: {asked}, about "
                                    f"{duration_text(full)} of {duration_text(left_s)} left")
    if room >= len(trials):
        fit = room // len(trials)
        return ConfirmationSchedule(trials, fit, f"confirmation shrunk to {len(trials)} "
                                    f"trial(s) x {fit} round(s): {would}")
    if room >= 1:
        return ConfirmationSchedule(trials[:room], 1, (
            f"confirmation shrunk to {room} trial(s) x 1 round(s) "
            f"({', '.join(f'#{n}' for n in trials[:room])}): {would}"))
    return ConfirmationSchedule((), 0, f"confirmation skipped: {would}")


@dataclass(frozen=True)
class RoundDecision:
    """The finalists the next step redeploys (none: stop) and why, in one line."""

    open: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class OpenPair:
    """A comparison a use's answer rests on that is still undecided: the pick against a rival
    or against the baseline, on the use's objectives."""

    pick: int
    other: int
    objectives: tuple[Objective, ...]


def open_pairs(data: StudyData) -> list[OpenPair]:
    """Every undecided comparison behind the uses' answers: each pick against its undecided
    rivals and, where undecided, against the baseline (``recommend``'s verdicts)."""
    # Imported here: recommend may price ties with this module's ``deployment_cost_s``.
    from autotune.core.analysis.recommendation import USES, NoFeasibleTrial, recommend, use_objectives

    found: dict[tuple[int, int], OpenPair] = {}
    for use in USES:
        try:
            rec = recommend(data, use)
        except NoFeasibleTrial:
            continue
        objectives = use_objectives(data, use)
        others = [t.number for t in rec.tied]
        if rec.versus is not None and rec.versus.verdict is Verdict.UNDECIDED:
            others.append(rec.versus.baseline.number)
        for n in others:
            key = (min(rec.trial.number, n), max(rec.trial.number, n))
            found.setdefault(key, OpenPair(rec.trial.number, n, objectives))
    return list(found.values())


def in_question(data: StudyData, finalists: Sequence[int]) -> tuple[list[int], str]:
    """The trials whose redeployment could change a use's answer: both sides of every
    comparison still undecided (``open_pairs``: a pick against its baseline or a rival) that
    involves a finalist or the baseline, so that no pair is redeployed by half; the
    ``finalists`` among them first, in their order, then the other sides by number; and one
    line on what is left out. A pick already decided or equivalent against every other is not
    redeployed (issue #46): another deployment would only confirm what is said."""
    pairs = open_pairs(data)
    ends = set(finalists) | ({data.baseline.number} if data.baseline is not None else set())
    involved = [p for p in pairs if p.pick in ends or p.other in ends]
    sides = {n for p in involved for n in (p.pick, p.other)}
    wanted = [n for n in finalists if n in sides] + sorted(sides - set(finalists))
    if wanted:
        kept = ", ".join(f"#{n}" for n in wanted)
        left = [n for n in finalists if n not in wanted]
        out = f"; #{', #'.join(map(str, left))} decided, not redeployed" if left else ""
        return wanted, (f"{len(pairs)} comparison(s) undecided: confirming {kept}{out}")
    if pairs:
        return [], ("confirmation: not needed, the comparisons still undecided involve no "
                    "finalist")
    return [], ("confirmation: not needed, every use's answer is decided or equivalent against "
                "the baseline and its rivals (interactive, throughput, balanced)")


def wrong_chance(data: StudyData, pairs: Sequence[OpenPair], extra: int | None = None) -> float:
    """The summed chance, over ``pairs`` and their objectives, that the measured order of the
    two is the wrong one: Phi(-|d| / se) of the log difference, with one more deployment of
    trial ``extra`` where given (the noise of one deployment's mean, ``data.noise``)."""
    by_number = {t.number: t for t in data.outcomes}
    total = 0.0
    for pair in pairs:
        a, b = by_number[pair.pick], by_number[pair.other]
        for o in pair.objectives:
            ea, eb = data.objective_estimate(a, o), data.objective_estimate(b, o)
            if not (ea.mean > 0 and eb.mean > 0):
                continue
            na = ea.n + (extra == a.number)
            nb = eb.n + (extra == b.number)
            sd = data.noise.of(o.name).log_sd
            se = sd * math.sqrt(1 / na + 1 / nb)
            total += float(ndtr(-abs(math.log(ea.mean / eb.mean)) / se)) if se > 0 else 0.0
    return total


def next_deployment(data: StudyData, finalists: Sequence[int]) -> RoundDecision:
    """The one finalist whose redeployment most reduces the chance that a use's pick is wrong
    (``wrong_chance`` over the open comparisons; a knowledge-gradient-like greedy step), or
    none when every use's answer is decided or equivalent. Only the ``finalists`` given (the
    confirmation's trials: ``in_question``'s, both sides of each open pair) are redeployed."""
    pairs = open_pairs(data)
    wanted = [n for n in finalists
              if any(n in (p.pick, p.other) for p in pairs)]
    if not wanted:
        if pairs:
            return RoundDecision((), "confirmation stops: the comparisons still undecided involve "
                                     "no finalist")
        return RoundDecision((), "confirmation stops: every use's answer is decided or "
                                 "equivalent (interactive, throughput, balanced)")
    now = wrong_chance(data, pairs)
    gain = {n: now - wrong_chance(data, pairs, extra=n) for n in wanted}
    best = max(wanted, key=lambda n: (gain[n], -wanted.index(n)))
    return RoundDecision((best,), (
        f"#{best}: its redeployment most reduces the chance that a pick is wrong "
        f"({len(pairs)} comparison(s) undecided)"))


@dataclass(frozen=True)
class ConfirmationState:
    """A confirmation's schedule and progress, as stored in the study so that an interrupted one
    is continued: the trials (by priority) and the rounds asked, the trials each step deploys
    once decided (step 0: all of them; later steps: one each, ``next_deployment``), the
    deployments finished as (step, trial), each trial's confirmation deployments over every
    confirmation (they name its folders), and whether it finished."""

    trials: tuple[int, ...] = ()
    rounds: int = 0
    steps: tuple[tuple[int, ...], ...] = ()
    done: tuple[tuple[int, int], ...] = ()
    deployed: tuple[tuple[int, int], ...] = ()  # (trial, deployments so far)
    finished: bool = False

    @property
    def total_steps(self) -> int:
        """Step 0, then one deployment a step up to what the asked rounds would deploy."""
        return 1 + (self.rounds - 1) * len(self.trials) if self.trials and self.rounds else 0

    def deployments_of(self, trial: int) -> int:
        return dict(self.deployed).get(trial, 0)

    def with_step(self, members: Sequence[int]) -> ConfirmationState:
        return dataclasses.replace(self, steps=(*self.steps, tuple(members)))

    def with_done(self, step: int, trial: int, count: int) -> ConfirmationState:
        deployed = {**dict(self.deployed), trial: count}
        return dataclasses.replace(self, done=(*self.done, (step, trial)),
                                   deployed=tuple(sorted(deployed.items())))

    def to_dict(self) -> dict:
        """The stored layout (that of earlier versions: ``round_trials`` names the steps)."""
        return {"trials": list(self.trials), "rounds": self.rounds,
                "round_trials": {str(i): list(m) for i, m in enumerate(self.steps)},
                "done": [list(d) for d in self.done],
                "deployed": {str(n): c for n, c in self.deployed}, "finished": self.finished}

    @classmethod
    def from_dict(cls, stored: Mapping) -> ConfirmationState:
        steps = stored.get("round_trials", {})
        return cls(tuple(stored.get("trials", ())), int(stored.get("rounds", 0)),
                   tuple(tuple(steps[str(i)]) for i in range(len(steps)) if str(i) in steps),
                   tuple((int(s), int(n)) for s, n in stored.get("done", ())),
                   tuple(sorted((int(n), int(c)) for n, c in stored.get("deployed", {}).items())),
                   bool(stored.get("finished", False)))
