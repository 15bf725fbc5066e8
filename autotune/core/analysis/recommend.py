"""Recommendations: the trial for each use, the trials the noise cannot separate from it, and
why, with intervals. Pure.

A difference whose interval contains zero is a tie: ``recommend`` lists the tied trials and
prefers the one that changes fewest flags from vLLM's defaults; a trial without a rival is
never called best "beyond the noise". A tie comes with its cost (``TieCost``): the confirmation
rounds that would separate the smallest difference worth caring about, what they cost in
device time (rounds x the tied trials x the study's measured cost of one deployment), and the
command that runs them. ``table`` puts every use's answer in one compact table of 80 columns.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.core.analysis.study_data import StudyData, format_params
from autotune.core.maths.durations import duration_text
from autotune.core.maths.pareto import knee
from autotune.core.maths.stats import POWER, Change, compare, rounds_to_separate
from autotune.core.trial.objectives import Objective
from autotune.core.trial.outcome import TrialOutcome

USES = ("interactive", "throughput", "balanced")
SMALLEST_DIFFERENCE = 0.05  # the relative difference worth caring about, unless a study says
BEYOND_BUDGET_S = 8 * 3600  # a tie's price past this (or 10 times the study's own time) is said
BEYOND_STUDY_FACTOR = 10
BEYOND_FLOOR_S = 600  # never beyond a sensible budget below this, however short the study
TABLE_WIDTH = 80


@dataclass(frozen=True)
class TieSettings:
    """What a tie's cost is worked out from, beside the study's data: the study (named in the
    command) and the smallest relative difference worth caring about. The data says the rest:
    the noise of one deployment's mean, and each trial's deployments so far (its search's and
    its confirmation's); a confirmation round adds one deployment to each trial."""

    study: str
    smallest_difference: float = SMALLEST_DIFFERENCE


@dataclass(frozen=True)
class Observed:
    """A tied rival against the pick on one objective, with its interval (a tie: it holds 0)."""

    trial: int
    objective: str
    change: Change


@dataclass(frozen=True)
class TieCost:
    """What it takes to resolve a tie: ``rounds`` more confirmation rounds of ``trials`` (the
    pick first) separate a true difference of ``smallest_difference_pct`` on ``objective``
    (the noisiest of the tie's) with chance ``power``, two-sided at 5%; derived from that
    stated difference, never from the ``observed`` ones."""

    trials: tuple[int, ...]
    objective: str
    smallest_difference_pct: float
    power: float
    rounds: int
    observed: tuple[Observed, ...]
    noise: str  # where the noise behind the rounds comes from
    command: str
    deployment_s: float | None = None  # the study's measured cost of one deployment
    study_s: float | None = None  # the study's own device time so far (its trials' wall time)

    @property
    def deployments(self) -> int:
        """Deployments the rounds take: each round deploys every tied trial once."""
        return self.rounds * len(self.trials)

    @property
    def seconds(self) -> float | None:
        """The price in device time (None: the study has no measured deployment yet)."""
        return None if self.deployment_s is None else self.deployments * self.deployment_s

    @property
    def beyond_budget(self) -> bool:
        """Past any sensible budget: more than 8 h, or 10 times the study's own time (and more
        than 10 minutes)."""
        s = self.seconds
        return s is not None and (s > BEYOND_BUDGET_S or (
            bool(self.study_s) and s > max(BEYOND_STUDY_FACTOR * (self.study_s or 0.0),
                                           BEYOND_FLOOR_S)))

    @property
    def price(self) -> str:
        """For the compact table: '~1 h 40 min', or the rounds where no time is known."""
        if self.rounds == 0:
            return "none"
        s = self.seconds
        return f"{self.rounds} round(s)" if s is None else f"~{duration_text(s)}"

    @property
    def time_text(self) -> str:
        """The price in time, as sentences, with what lowers it when it is beyond any sensible
        budget."""
        s = self.seconds
        if s is None:
            return " No deployment of this study is measured yet: no price in time."
        text = (f" That is {self.deployments} deployment(s) of about "
                f"{duration_text(self.deployment_s or 0)}: about {duration_text(s)} of "
                "deployments.")
        if self.beyond_budget:
            text += (f" That is beyond any sensible budget (more than 8 h, or more than 10 times "
                     f"this study's {duration_text(self.study_s or 0)}); it falls with more "
                     f"requests per run (a smaller `--precision` target) or a larger "
                     f"`--smallest-difference` than {self.smallest_difference_pct:g}%.")
        return text

    @property
    def text(self) -> str:
        d = f"{self.smallest_difference_pct:g}%"
        seen = "; ".join(
            f"#{o.trial} against #{self.trials[0]} on {o.objective}: {o.change.text}, "
            f"{'larger' if abs(o.change.pct) > self.smallest_difference_pct else 'smaller'} "
            f"than {d}" for o in self.observed)
        if self.rounds == 0:
            return (f" The runs already measured would separate a difference of {d} on "
                    f"{self.objective} {self.power:.0%} of the time (two-sided 5%; noise "
                    f"{self.noise}), and separated none: observed {seen}.")
        return (f" To resolve the tie: {self.rounds} more confirmation round(s) of trials "
                f"{', '.join(f'#{n}' for n in self.trials)} (each deploys every one of them "
                f"once) would separate a true difference of {d} on {self.objective} "
                f"{self.power:.0%} of the time (two-sided 5%; noise {self.noise}): "
                f"`{self.command}`.{self.time_text} Observed: {seen}.")


@dataclass(frozen=True)
class Recommendation:
    """The trial picked for a use, the trials the noise cannot separate from it, and why; a
    tie with what resolving it would take (without ``TieSettings``, ``tie_cost`` is None)."""

    use: str
    trial: TrialOutcome
    tied: tuple[TrialOutcome, ...]
    reason: str
    tie_cost: TieCost | None = None


class NoFeasibleTrial(Exception):
    """No trial of the study can be recommended yet."""


def _tied(data: StudyData, best: TrialOutcome, pool: Sequence[TrialOutcome],
          objectives: Sequence[Objective]) -> list[TrialOutcome]:
    """Members of ``pool`` whose difference to ``best`` is within the noise on every one of
    ``objectives`` (``best`` included)."""
    return [t for t in pool if t.number == best.number or not any(
        compare(data.objective_estimate(t, o), data.objective_estimate(best, o)).significant
        for o in objectives)]


def tie_cost(data: StudyData, pick: TrialOutcome, rivals: Sequence[TrialOutcome],
             objectives: Sequence[Objective], settings: TieSettings) -> TieCost:
    """The confirmation rounds after which every rival would be separated from ``pick`` with
    chance ``POWER`` were it ``settings.smallest_difference`` apart on any of ``objectives``:
    the most that any pair and objective needs."""
    def runs(t: TrialOutcome, o: Objective) -> int:  # deployments: the noise is of one's mean
        return len(t.results[o.profile].deployment_means(o.metric))

    need = {o: max(rounds_to_separate(settings.smallest_difference, data.noise.of(o.name),
                                      runs_per_round=1,
                                      runs_now=(runs(pick, o), runs(t, o))) for t in rivals)
            for o in objectives}
    worst = max(objectives, key=lambda o: need[o])
    trials = (pick.number, *(t.number for t in rivals))
    command = shlex.join(["autotune", "confirm", "--study", settings.study, "--trials",
                          ",".join(map(str, trials)), "--rounds", str(need[worst])])
    noise = data.noise.of(worst.name)
    observed = tuple(Observed(t.number, o.label, compare(data.objective_estimate(t, o),
                                                         data.objective_estimate(pick, o)))
                     for t in rivals for o in objectives)
    walls = [t.trial_wall_s for t in data.outcomes if t.trial_wall_s]
    return TieCost(trials, worst.label, 100 * settings.smallest_difference, POWER, need[worst],
                   observed, f"log-sd {noise.log_sd:.3f}, {noise.source}", command,
                   deployment_s=data.deployment_s, study_s=sum(walls) if walls else None)


def recommend_each(data: StudyData, uses: Sequence[str], settings: TieSettings | None = None
                   ) -> list[Recommendation | str]:
    """The recommendation of each of ``uses``, or a line saying why there is none yet."""
    found: list[Recommendation | str] = []
    for use in uses:
        try:
            found.append(recommend(data, use, settings))
        except NoFeasibleTrial as exc:
            found.append(f"{use}: {exc}")
    return found


def recommend(data: StudyData, use: str, settings: TieSettings | None = None) -> Recommendation:
    """interactive: best on the objective of the lowest-concurrency profile (default: mean
    E2EL); throughput: best on the objective of the highest-concurrency profile (default:
    output throughput); balanced: the knee of the front. Among trials the noise cannot
    separate from that pick, the one with the fewest changes from vLLM's defaults is
    recommended; with ``settings``, a tie says what resolving it would take."""
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
    cost = None
    if others:
        text += (f" It is tied within the noise with {', '.join(t.label for t in others)} for "
                 f"{why}; of these it changes the fewest flags from vLLM's defaults "
                 f"({len(data.changes_from_defaults(pick))}).")
        if settings is not None:
            cost = tie_cost(data, pick, others, objectives, settings)
            text += cost.text
    elif len(pool) == 1:
        text += (" It is the only feasible trial: with no rival to compare it with, nothing is "
                 "claimed beyond the noise.")
    else:
        text += f" It has {why}, beyond the noise."
    changes = data.changes_from_defaults(pick)
    text += f" Changes from vLLM's defaults: {format_params(changes) or 'none'}."
    text += baseline_sentence(data, pick)
    return Recommendation(use, pick, tuple(others), text, cost)


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




def _number(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}" if abs(x) < 1 else f"{x:.1f}"


def _cell(e) -> str:
    """An estimate in few characters: 'mean [low, high]'."""
    return f"{_number(e.mean)} [{_number(e.low)}, {_number(e.high)}]"


def _rivals(tied: Sequence[TrialOutcome], width: int) -> str:
    text = ",".join(f"#{t.number}" for t in tied) or "-"
    if len(text) <= width:
        return text
    shown = []
    for t in tied:
        more = f" +{len(tied) - len(shown) - 1}"
        if len(",".join(shown + [f"#{t.number}"])) + len(more) > width:
            break
        shown.append(f"#{t.number}")
    return ",".join(shown) + f" +{len(tied) - len(shown)}"


def table(data: StudyData, recs: Sequence[Recommendation | str], study: str) -> list[str]:
    """Every use's answer in one table of at most 80 columns (``TABLE_WIDTH``), one row per use:
    the pick, each objective's mean [95% interval], the tied rivals and the price of resolving
    the tie in device time; under it the objectives' names and the export command(s). A use
    without a recommendation is given as a string (why there is none)."""
    objectives = data.objectives
    heads = ["use", "pick", *(o.metric for o in objectives), "tied", "tie's price"]
    rows: list[list[str]] = []
    notes: list[str] = []
    for rec in recs:
        if isinstance(rec, str):
            notes.append(rec)
            continue
        cost = rec.tie_cost
        price = "-" if not rec.tied else "?" if cost is None else cost.price + (
            " !" if cost.beyond_budget else "")
        rows.append([rec.use, f"#{rec.trial.number}",
                     *(_cell(data.objective_estimate(rec.trial, o)) for o in objectives),
                     ",".join(f"#{t.number}" for t in rec.tied) or "-", price])
    widths = [max(len(r[i]) for r in [heads, *rows]) for i in range(len(heads))]
    tied_col = len(heads) - 2
    over = sum(widths) + 2 * (len(widths) - 1) - TABLE_WIDTH
    if over > 0:  # the rivals' column gives way first: '#3,#7 +4'
        widths[tied_col] = max(len(heads[tied_col]), widths[tied_col] - over)
        for r, rec in zip(rows, [r for r in recs if not isinstance(r, str)], strict=True):
            r[tied_col] = _rivals(rec.tied, widths[tied_col])
    widths = [min(w, max(len(r[i]) for r in [heads, *rows])) for i, w in enumerate(widths)]
    lines = ["  ".join((c[:widths[i]] if i >= 2 else c).ljust(widths[i]) if i < len(heads) - 1
                       else c for i, c in enumerate(row)).rstrip() for row in [heads, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += [f"{o.metric}: {o.label}, {o.direction}" for o in objectives]
    lines.append("values: mean [95% interval]; tied: not separable from the pick within the "
                 "noise;")
    lines.append("tie's price: the device time of the confirmation rounds that would resolve it")
    if any(not isinstance(r, str) and r.tie_cost and r.tie_cost.beyond_budget for r in recs):
        lines.append("!: beyond any sensible budget; --explain says what would lower it")
    lines += notes
    picks = [r for r in recs if not isinstance(r, str)]
    for t in {r.trial.number: r.trial for r in picks}.values():  # a load its runs never had
        lines += [f"#{t.number} {o.profile}: {t.reached(o.profile)}: not measured at the profile's load"
                  for o in objectives if t.reached(o.profile)]
    for r in picks:
        lines.append(f"{r.use}: " + shlex.join(["autotune", "export", "--study", study, "--for",
                                                 r.use]))
    return lines
