"""Recommendations: the trial for each use, how it compares with the baseline and every rival,
and what deciding an undecided comparison would cost. Pure.

One rule everywhere (``stats.judge``). A simpler configuration replaces the best estimate only
when the two are equivalent, so "keep what you run" wins unless something beats it by more than
the margin; only an undecided comparison has a price (docs/studies.md#recommendations)."""

from __future__ import annotations

import dataclasses
import functools
import shlex
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.core.analysis.study_data import StudyData, format_params, noise_line
from autotune.core.maths.durations import duration_text
from autotune.core.maths.numbers import parse_percent
from autotune.core.maths.pareto import knee
from autotune.core.maths.stats import (
    POWER,
    Change,
    Comparison,
    Verdict,
    combined,
    compare,
    rounds_to_separate,
)
from autotune.core.trial.objectives import Objective
from autotune.core.trial.outcome import TrialOutcome
from autotune.errors import ConfigError

USES = ("interactive", "throughput", "balanced")
SMALLEST_DIFFERENCE = 0.05  # the relative difference worth caring about, unless a study says
BEYOND_BUDGET_S = 8 * 3600  # a tie's price past this (or 10 times the study's own time) is said
BEYOND_STUDY_FACTOR = 10
BEYOND_FLOOR_S = 600  # never beyond a sensible budget below this, however short the study
TABLE_WIDTH = 80


def default_uses(data: StudyData) -> tuple[str, ...]:
    """The uses recommended for when none is asked: every use, or with one objective only its
    best (there is no trade-off to pick along)."""
    return USES if len(data.objectives) > 1 else ("throughput",)


SMALLEST_DIFFERENCE_FLOOR_PCT = 0.5  # below this, '0.05' was meant as a fraction: 5%


def parse_smallest_difference(text: str | None) -> float:
    """``--smallest-difference``: ``5%`` or ``5`` (both five percent) as the fraction 0.05;
    not given, the default. A value below 0.5 is refused, naming the percentage it most likely
    meant ('0.05': did you mean 5%?), rather than read as a twentieth of a percent."""
    if text is None:
        return SMALLEST_DIFFERENCE
    value = parse_percent(text, "--smallest-difference")
    if 100 * value < SMALLEST_DIFFERENCE_FLOOR_PCT:
        raise ConfigError(f"--smallest-difference {text!r}: a percentage, at least "
                          f"{SMALLEST_DIFFERENCE_FLOOR_PCT:g}; did you mean {10_000 * value:g}%?")
    return value


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
    """The pick against an undecided rival on one objective (its change against the rival),
    with its interval."""

    trial: int
    objective: str
    change: Change


@dataclass(frozen=True)
class TieCost:
    """What it takes to decide undecided comparisons: ``rounds`` more confirmation rounds of ``trials`` (the
    pick first) separate a true difference of ``smallest_difference_pct`` on ``objective``
    (the noisiest of them) with chance ``power``, two-sided at 5%; derived from that
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
        """Deployments the rounds take: each round deploys every trial of the pair(s) once."""
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
        return counted(self.rounds, "round") if s is None else f"~{duration_text(s)}"

    @property
    def time_text(self) -> str:
        """The price in time, as sentences, with what lowers it when it is beyond any sensible
        budget."""
        s = self.seconds
        if s is None:
            return " No deployment of this study is measured yet: no price in time."
        text = (f" That is {counted(self.deployments, 'deployment')} of about "
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
            f"#{self.trials[0]} against #{o.trial} on {o.objective}: {o.change.text}, "
            f"{'larger' if abs(o.change.pct) > self.smallest_difference_pct else 'smaller'} "
            f"than {d}" for o in self.observed)
        if self.rounds == 0:
            return (f" The runs already measured would separate a difference of {d} on "
                    f"{self.objective} {self.power:.0%} of the time (two-sided 5%; noise "
                    f"{self.noise}), and separated none: observed {seen}.")
        return (f" To decide it: {counted(self.rounds, 'more confirmation round')} of trials "
                f"{', '.join(f'#{n}' for n in self.trials)} (each deploys every one of them "
                f"once) would separate a true difference of {d} on {self.objective} "
                f"{self.power:.0%} of the time (two-sided 5%; noise {self.noise}): "
                f"`{self.command}`.{self.time_text} Observed: {seen}.")


@dataclass(frozen=True)
class Rival:
    """Another feasible trial against the pick on the use's objectives: one comparison per
    objective (the rival relative to the pick) and their combined verdict."""

    trial: TrialOutcome
    comparisons: tuple[Comparison, ...]

    @functools.cached_property
    def verdict(self) -> Verdict:  # read many times over by a recommendation: combined once
        return combined([c.verdict for c in self.comparisons])

    @property
    def signed(self) -> str:
        """'+6.4%' (or '+6.4%/-1.0%' over two objectives): the pick's change against the rival,
        in each metric's own direction (a lower latency is negative), as every difference is
        written: the pick against the baseline, or against a rival."""
        return "/".join(f"{pick_change_pct(c):+.1f}%" for c in self.comparisons)


def pick_change_pct(rival: Comparison) -> float:
    """The pick's relative change against a rival, from the rival's comparison against the
    pick (the same log-ratio, turned around)."""
    return 100.0 * (1.0 / (1.0 + rival.change.pct / 100.0) - 1.0)


@dataclass(frozen=True)
class Versus:
    """The pick against the baseline on the use's objectives; ``same`` when the pick is the
    baseline ("keep what you run"); ``cost``: what deciding it takes, when undecided."""

    baseline: TrialOutcome
    comparisons: tuple[Comparison, ...]
    objectives: tuple[str, ...]
    cost: TieCost | None = None

    @property
    def same(self) -> bool:
        return not self.comparisons

    @property
    def verdict(self) -> Verdict:
        return Verdict.EQUIVALENT if self.same else combined([c.verdict for c in self.comparisons])

    @property
    def cell(self) -> str:
        """For the table: 'keep', 'better -16.6%', 'equivalent', 'undecided +2.1%'."""
        if self.same:
            return "keep"
        v = self.verdict
        if v is Verdict.EQUIVALENT:
            return "equivalent"
        return f"{v.value} " + "/".join(f"{c.change.pct:+.1f}%" for c in self.comparisons)

    @property
    def text(self) -> str:
        b = self.baseline.label
        if self.same:
            return f"It is the baseline {b}: keep what you run."
        parts = "; ".join(f"{o} {c.text}" for o, c in zip(self.objectives, self.comparisons,
                                                          strict=True))
        said = {Verdict.BETTER: "better than", Verdict.WORSE: "worse than",
                Verdict.EQUIVALENT: "equivalent to", Verdict.UNDECIDED: "undecided against"}
        text = f"Against the baseline {b}, it is {said[self.verdict]} it ({parts})."
        if self.verdict is Verdict.EQUIVALENT:
            text += " A change worth less than the smallest difference: keep what you run."
        if self.cost is not None:
            text += self.cost.text
        return text


@dataclass(frozen=True)
class Recommendation:
    """The trial picked for a use, every rival with its verdict, the pick against the
    baseline, and why; undecided rivals with what deciding them would take (``tie_cost``,
    None without ``TieSettings``)."""

    use: str
    trial: TrialOutcome
    rivals: tuple[Rival, ...]
    reason: str
    tie_cost: TieCost | None = None
    versus: Versus | None = None  # None: the study has no feasible baseline
    smallest_difference: float = SMALLEST_DIFFERENCE  # the margin its verdicts were judged at
    searched: Searched | None = None  # how much the study measured behind it

    def of(self, verdict: Verdict) -> tuple[Rival, ...]:
        return tuple(r for r in self.rivals if r.verdict is verdict)

    @property
    def tied(self) -> tuple[TrialOutcome, ...]:
        """The undecided rivals: those that more deployments could still put ahead."""
        return tuple(r.trial for r in self.of(Verdict.UNDECIDED))

    @property
    def keep(self) -> bool:
        """True when the answer is the baseline: keep what you run."""
        return self.versus is not None and self.versus.same


def counted(n: int, word: str) -> str:
    """'1 configuration', '3 configurations': a count with its noun in the right number."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Searched:
    """How much a study measured: distinct configurations served (``measured``), those of them
    other than the baseline (``searched``: none means the answer is no search result), and
    the trials that failed before they were measured (``failed``)."""

    measured: int
    searched: int
    failed: int
    baseline: bool  # a baseline was measured: "searched" counts what is not it

    @property
    def text(self) -> str:
        """'1 configuration measured, nothing searched: no configuration beyond the baseline
        was measured' or '4 configurations measured, 3 searched beyond the baseline'."""
        said = counted(self.measured, "configuration") + " measured"
        if self.searched == 0:
            why = (f"{counted(self.failed, 'other proposal')} failed before being measured"
                   if self.failed else "no configuration beyond the baseline was measured"
                   if self.baseline else "no configuration was measured")
            return f"{said}, nothing searched: {why}"
        beyond = " beyond the baseline" if self.baseline else ""
        failed = f"; {counted(self.failed, 'trial')} failed" if self.failed else ""
        return f"{said}, {self.searched:,} searched{beyond}{failed}"


def searched(data: StudyData) -> Searched:
    """What ``data`` measured: distinct parameter sets among its served trials (a configuration
    deployed again counts once), and how many of them are not the baseline's."""
    def key(t: TrialOutcome) -> tuple:
        return tuple(sorted((k, repr(v)) for k, v in t.params.items()))

    served = {key(t) for t in data.outcomes if t.served}
    base = data.baseline
    has_base = base is not None and base.served
    failed = sum(1 for t in data.outcomes if not t.served and not t.skipped)
    return Searched(len(served), len(served - ({key(base)} if has_base and base else set())),
                    failed, has_base)


class NoFeasibleTrial(Exception):
    """No trial of the study can be recommended yet."""


def _rivals(data: StudyData, pick: TrialOutcome, pool: Sequence[TrialOutcome],
            objectives: Sequence[Objective]) -> tuple[Rival, ...]:
    return tuple(Rival(t, tuple(data.judge(t, pick, o) for o in objectives))
                 for t in pool if t.number != pick.number)


def tie_cost(data: StudyData, pick: TrialOutcome, rivals: Sequence[TrialOutcome],
             objectives: Sequence[Objective], settings: TieSettings) -> TieCost:
    """The confirmation rounds after which every rival would be separated from ``pick`` with
    chance ``POWER`` were it ``settings.smallest_difference`` apart on any of ``objectives``:
    the most that any pair and objective needs. At that many rounds a pair whose true
    difference is zero comes out equivalent about as often, so the price decides the pair
    either way."""
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
    observed = tuple(Observed(t.number, o.label, compare(data.objective_estimate(pick, o),
                                                         data.objective_estimate(t, o)))
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


def use_objectives(data: StudyData, use: str) -> tuple[Objective, ...]:
    """The objectives a use is judged on: both for balanced, its own for the others."""
    return tuple(data.objectives) if use == "balanced" else (data.objective_for(use),)


def _best(data: StudyData, use: str, pool: Sequence[TrialOutcome]) -> tuple[TrialOutcome, str]:
    """The best estimate for a use, and what 'best' means there."""
    if use == "balanced":
        front = data.front()
        return knee(front, data.costs), (
            f"the knee of the front ({counted(len(front), 'trial')}): closest to the ideal of "
            f"{' and '.join(o.label for o in data.objectives)} once each is scaled to the front")
    o = data.objective_for(use)
    return (min(pool, key=lambda t: o.cost(t.value(o.profile, o.metric))),
            f"the {'lowest' if o.minimize else 'highest'} {o.label}")


def recommend(data: StudyData, use: str, settings: TieSettings | None = None) -> Recommendation:
    """interactive: best on the objective of the lowest-concurrency profile (default: mean
    E2EL); throughput: best on the objective of the highest-concurrency profile (default:
    output throughput); balanced: the knee of the front. A configuration equivalent to that
    best estimate that changes fewer flags from the baseline (vLLM's defaults without one)
    replaces it, unless a rival is better than it; undecided rivals never do. With
    ``settings`` (whose smallest difference then rules), undecided comparisons are priced."""
    if settings is not None:
        data = dataclasses.replace(data, smallest_difference=settings.smallest_difference)
    pool = data.feasible
    if not pool:
        raise NoFeasibleTrial("no feasible trial in the study yet: run more trials first")
    objectives = use_objectives(data, use)
    best, why = _best(data, use, pool)
    best_rivals = _rivals(data, best, pool, objectives)
    simpler = sorted((r.trial for r in best_rivals if r.verdict is Verdict.EQUIVALENT),
                     key=lambda t: (len(data.differences(t)), data.costs(t)))
    pick, rivals = best, best_rivals
    for t in simpler:
        if len(data.differences(t)) >= len(data.differences(best)):
            break
        against = _rivals(data, t, pool, objectives)
        if not any(r.verdict is Verdict.BETTER for r in against):
            pick, rivals = t, against
            break
    values = "; ".join(f"{o.label}: {data.objective_estimate(pick, o).text}" for o in data.objectives)
    text = f"Trial {pick.label} for {use} use: {values} (mean [95% interval])."
    if pick.number != best.number:
        text += (f" {best.label} has {why}, but is equivalent to it within "
                 f"{100 * data.smallest_difference:g}%, and {pick.label} changes fewer flags "
                 f"({len(data.differences(pick))} against {len(data.differences(best))}).")
    elif len(pool) == 1:
        text += (" It is the only feasible trial: with no rival to compare it with, nothing is "
                 "claimed beyond the noise.")
    else:
        text += f" It has {why}."
    undecided = [r for r in rivals if r.verdict is Verdict.UNDECIDED]
    equivalent = [r for r in rivals if r.verdict is Verdict.EQUIVALENT]
    worse = [r for r in rivals if r.verdict is Verdict.WORSE]
    if equivalent:
        text += f" Equivalent to it: {', '.join(r.trial.label for r in equivalent)}."
    if worse:
        text += f" Worse beyond the noise: {', '.join(r.trial.label for r in worse)}."
    cost = None
    if undecided:
        text += (" Undecided against it (more deployments could put one ahead; the pick's "
                 "change against each): "
                 + ", ".join(f"{r.trial.label} {r.signed}" for r in undecided) + ".")
        if settings is not None:
            cost = tie_cost(data, pick, [r.trial for r in undecided], objectives, settings)
            text += cost.text
    changes = data.changes_from_defaults(pick)
    text += f" Changes from vLLM's defaults: {format_params(changes) or 'none'}."
    versus = _versus(data, pick, objectives, settings)
    if versus is not None:
        text += " " + versus.text
    found = searched(data)
    text += f" Behind this answer: {found.text}."
    return Recommendation(use, pick, rivals, text, cost, versus, data.smallest_difference, found)


def _versus(data: StudyData, pick: TrialOutcome, objectives: Sequence[Objective],
            settings: TieSettings | None) -> Versus | None:
    base = data.baseline
    if base is None or base not in data.feasible:
        return None
    labels = tuple(o.label for o in objectives)
    if base.number == pick.number:
        return Versus(base, (), labels)
    comparisons = tuple(data.judge(pick, base, o) for o in objectives)
    cost = None
    if settings is not None and combined([c.verdict for c in comparisons]) is Verdict.UNDECIDED:
        cost = tie_cost(data, pick, [base], objectives, settings)
    return Versus(base, comparisons, labels, cost)


def _cell(e) -> str:
    """An estimate in few characters: 'mean [low, high]', written as in every table."""
    return e.text


def _wrap(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, TABLE_WIDTH, subsequent_indent=indent, break_on_hyphens=False)


def legend(smallest_difference: float) -> str:
    """The four verdicts as every table defines them, at the smallest difference in force."""
    return ("better/worse: the 95% interval of the difference excludes 0; equivalent: its 90% "
            f"interval lies within +/-{100 * smallest_difference:g}% (the smallest difference); "
            "undecided: neither")


def export_lines(study: str, uses: Sequence[str]) -> list[str]:
    """The command that exports each use's pick, each line at most 80 columns: a command too
    long for one line is continued on the next with a backslash (it still pastes)."""
    lines = ["export a pick:"]
    for use in uses:
        words = ["autotune", "export", "--for", use, "--study", study]
        one = "  " + shlex.join(words)
        if len(one) <= TABLE_WIDTH:
            lines.append(one)
        else:
            lines += ["  " + shlex.join(words[:4]) + " \\", "    " + shlex.join(words[4:])]
    return lines


def table(data: StudyData, recs: Sequence[Recommendation | str], study: str) -> list[str]:
    """Every use's answer in at most 80 columns (``TABLE_WIDTH``): a row per use with the pick,
    each objective's mean [95% interval] and its verdict against the baseline; under it, how
    many configurations the study measured (``Searched``), per use the equivalent and
    undecided rivals (each with the pick's signed difference against it, the undecided ones
    with the device time that would decide them), the noise the intervals rest on, and the
    export command of each use. A use without a recommendation is given as a string."""
    objectives = data.objectives
    base = data.baseline
    heads = ["use", "pick", *(o.metric for o in objectives),
             f"vs {base.label.split()[0]}" if base is not None else "vs baseline"]
    picks = [r for r in recs if not isinstance(r, str)]
    margin = picks[0].smallest_difference if picks else data.smallest_difference
    rows = [[r.use, f"#{r.trial.number}", *(_cell(data.objective_estimate(r.trial, o))
                                             for o in objectives),
             r.versus.cell if r.versus is not None else "-"] for r in picks]
    if sum(max(len(row[i]) for row in [heads, *rows]) + 2 for i in range(len(heads))) - 2 \
            > TABLE_WIDTH:  # the verdict column gives way first: its word, without the changes
        for row in rows:
            row[-1] = row[-1].split()[0]
    widths = [max(len(row[i]) for row in [heads, *rows]) for i in range(len(heads))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip()
             for row in [heads, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += [f"{o.metric}: {o.label}, {o.direction}" for o in objectives]
    lines += _wrap("values: mean [95% interval]; a difference is the pick's change against the "
                   "baseline (or the rival), in the metric's own direction; " + legend(margin))
    if base is None:
        lines.append("vs baseline: no baseline was measured in this study")
    found = picks[0].searched if picks else searched(data)
    keep = "keep what you run ({})"
    if picks and all(r.keep for r in picks):
        lines += _wrap(keep.format(picks[0].trial.label) + ": " + (
            found.text if found and found.searched == 0 else
            "nothing measured is better by the smallest difference for any use"))
    if found is not None and not (picks and all(r.keep for r in picks) and found.searched == 0):
        lines += _wrap(f"searched: {found.text}")
    for r in picks:
        if r.keep and not all(p.keep for p in picks):
            lines += _wrap(f"{r.use}: " + keep.format(r.trial.label))
        equivalent, undecided = r.of(Verdict.EQUIVALENT), r.of(Verdict.UNDECIDED)
        if equivalent:
            lines += _wrap(f"{r.use}: #{r.trial.number} is equivalent to "
                           + ", ".join(f"#{x.trial.number} ({x.signed})" for x in equivalent))
        if undecided:
            cost = r.tie_cost
            price = "" if cost is None else f"; deciding them: {cost.price}" + (
                " (beyond any sensible budget: --explain)" if cost.beyond_budget else "")
            lines += _wrap(f"{r.use}: #{r.trial.number} is undecided against "
                           + ", ".join(f"#{x.trial.number} ({x.signed})" for x in undecided) + price)
        v = r.versus
        if v is not None and v.cost is not None:
            lines += _wrap(f"{r.use}: #{r.trial.number} against the baseline is undecided; "
                           f"deciding it: {v.cost.price}")
    lines += _wrap(noise_line(data))
    lines += [rec for rec in recs if isinstance(rec, str)]
    for t in {r.trial.number: r.trial for r in picks}.values():  # a load its runs never had
        for o in objectives:
            if t.reached(o.profile):
                lines += _wrap(f"#{t.number} {o.profile}: {t.reached(o.profile)}: not measured at "
                               "the profile's load")
    if picks:
        lines += export_lines(study, [r.use for r in picks])
    return lines
