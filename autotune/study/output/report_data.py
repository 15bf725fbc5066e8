"""What `autotune report` finds, computed from a study read once: one ``Report`` record.
Renders no text and draws nothing (``study.output.report_render`` and ``study.output.plots`` do)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core.analysis.effects import Effect, SignFlip, effects, sign_flips
from autotune.core.analysis.recommendation import (
    SMALLEST_DIFFERENCE,
    USES,
    TieSettings,
    recommend_each,
)
from autotune.core.analysis.recommendation import table as recommendation_table
from autotune.core.analysis.study_data import StudyData
from autotune.core.metrics.registry import (
    LATENCY_METRIC,
    METRICS,
    PROMPT_BUCKETS,
    THROUGHPUT_METRIC,
    Source,
    bucket_key,
)
from autotune.core.trial.capacity_search import CapacitySearch
from autotune.errors import ConfigError
from autotune.study.output.plot_data import FrontPlot, LoadCurve, front_plot, load_curves
from autotune.study.store.records import study_data
from autotune.study.store.state import read_plan

MIN_TRIALS_FOR_IMPORTANCE = 8
BOOTSTRAP_ROUNDS = 20
MAX_CAPACITY_CURVES = 6  # curves one capacity plot can show apart


@dataclass(frozen=True)
class Report:
    """Everything the report says, computed from the study read once."""

    study_name: str
    model: str
    space_path: str
    data: StudyData  # every finished trial, confirmed numbers in place of the search's
    recommendations: tuple[tuple[str, str], ...]  # (use, reason or why none), see ``recommendations``
    importance: Mapping[str, Mapping[str, tuple[float, float, float]]]  # see ``importances``
    effects: tuple[Effect, ...]
    flips: tuple[SignFlip, ...]
    unconfirmed_flips: tuple[str, ...]
    ttft_buckets: Mapping[str, tuple[str, ...]]  # profile -> prompt-length bucket metrics shown
    capacity_curves: Mapping[str, Mapping[str, CapacitySearch]]  # profile -> trial label -> search
    table: tuple[str, ...] = ()  # the recommendations' compact table, as `recommend` prints it
    picks: Mapping[str, int] = field(default_factory=dict)  # use -> the trial recommended for it
    front_plot: FrontPlot | None = None  # None: no plane to draw (``has_front_plane``)
    load_curves: tuple[LoadCurve, ...] = ()  # each pick's latency against load

    @property
    def confirmed(self) -> frozenset[int]:
        """The trials whose numbers are confirmed runs."""
        return self.data.confirmed

    @property
    def has_front_plane(self) -> bool:
        """Whether the front has a plane to draw: a feasible trial and two objectives."""
        return bool(self.data.feasible) and len(self.data.objectives) > 1


def picks(data: StudyData, tie: TieSettings) -> dict[str, int]:
    """The trial recommended for each use that has one."""
    return {use: r.trial.number for use, r in zip(USES, recommend_each(data, USES, tie), strict=True)
            if not isinstance(r, str)}


def recommendations(data: StudyData, tie: TieSettings) -> tuple[tuple[str, str], ...]:
    """(use, reason) per use: the recommendation, a tie with what resolving it would take
    (``TieCost``, as `autotune recommend --explain` says it); or why there is none yet."""
    return tuple((use, r if isinstance(r, str) else r.reason)
                 for use, r in zip(USES, recommend_each(data, USES, tie), strict=True))


def recommendations_table(data: StudyData, tie: TieSettings) -> tuple[str, ...]:
    """The compact table of every use, as `autotune recommend` prints it."""
    return tuple(recommendation_table(data, recommend_each(data, USES, tie), tie.study))


def ttft_buckets(data: StudyData) -> dict[str, tuple[str, ...]]:
    """Per profile whose feasible trials' prompts span more than one length bucket: the
    buckets' median-TTFT metric keys (where long prompts wait shows)."""
    keys = [bucket_key(low, high) for low, high in PROMPT_BUCKETS]
    found = {p: tuple(k for k in keys if any(t.has(p, k) for t in data.feasible))
             for p in data.profiles}
    return {p: ks for p, ks in found.items() if len(ks) >= 2}


def capacity_curves(data: StudyData) -> dict[str, dict[str, CapacitySearch]]:
    """Per capacity profile, the curves its plot shows: the front's members that searched it
    (else the first ones that did), at most ``MAX_CAPACITY_CURVES``."""
    out = {}
    for profile in dict.fromkeys(p for t in data.outcomes for p in t.capacity):
        searched = [t for t in data.outcomes if profile in t.capacity]
        front = [t for t in data.front() if profile in t.capacity] or searched
        out[profile] = {t.label: t.capacity[profile] for t in front[:MAX_CAPACITY_CURVES]}
    return out


def importances(trials: list[FrozenTrial], directions: list[optuna.study.StudyDirection],
                data: StudyData, rounds: int = BOOTSTRAP_ROUNDS
                ) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Optuna's fANOVA importance per objective over the feasible ones of ``trials`` (their
    search values), with the 10th-90th percentile over ``rounds`` bootstrap resamples of the
    trials: objective -> parameter -> (importance, low, high). Empty below
    MIN_TRIALS_FOR_IMPORTANCE feasible trials."""
    numbers = {t.number for t in data.feasible}
    trials = [t for t in trials if t.number in numbers and t.state == TrialState.COMPLETE]
    if len(trials) < MIN_TRIALS_FOR_IMPORTANCE:
        return {}
    rng = np.random.default_rng(0)
    samples = [trials] + [[trials[i] for i in rng.integers(0, len(trials), len(trials))]
                          for _ in range(rounds)]
    out: dict[str, dict[str, tuple[float, float, float]]] = {}
    for i, o in enumerate(data.objectives):
        found: list[dict[str, float]] = []
        for sample in samples:
            sub = optuna.create_study(directions=directions)
            sub.add_trials(sample)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    found.append(optuna.importance.get_param_importances(
                        sub, target=lambda t, i=i: t.values[i],
                        evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0)))
            except (RuntimeError, ValueError):
                continue
        if found:
            params = sorted(found[0])
            out[o.name] = {p: (found[0][p], *np.percentile([f.get(p, 0.0) for f in found[1:] or found],
                                                           [10, 90]).tolist()) for p in params}
    return out


def effect_metrics(data: StudyData) -> list[str]:
    """The metrics whose parameter effects the report estimates: the objectives' metrics, the
    interactive and throughput pair (where a sign flip shows), and the server metrics that the
    study's workloads produce (a prefix-cache hit rate where prefixes are shared; not the
    server's view of the client's latencies, a further statistic)."""
    measured = {m for t in data.feasible for r in t.results.values() for run in r.runs for m in run}
    server = [k for k, m in METRICS.items()
              if m.source is Source.SERVER and not m.detail and k in measured]
    wanted = [o.metric for o in data.objectives] + [LATENCY_METRIC, THROUGHPUT_METRIC] + server
    return [m for m in dict.fromkeys(wanted) if m in measured]


def compute_report(study: optuna.Study) -> Report:
    """Read the study once and compute every finding of the report."""
    data = study_data(study)
    if not data.outcomes:
        raise ConfigError(f"study {study.study_name!r} has no finished trial yet")
    stored = read_plan(study)
    tie = TieSettings(study.study_name,
                      stored.smallest_difference if stored else SMALLEST_DIFFERENCE)
    found = [e for metric in effect_metrics(data) for e in effects(data, metric)]
    flips, unconfirmed = sign_flips(found)
    picked = picks(data, tie)
    plane = bool(data.feasible) and len(data.objectives) > 1
    return Report(
        study_name=study.study_name, model=stored.model if stored else "?",
        space_path=stored.space_path if stored else "?", data=data,
        recommendations=recommendations(data, tie), table=recommendations_table(data, tie),
        importance=importances(study.get_trials(deepcopy=False), study.directions, data),
        effects=tuple(found), flips=tuple(flips), unconfirmed_flips=tuple(unconfirmed),
        ttft_buckets=ttft_buckets(data), capacity_curves=capacity_curves(data), picks=picked,
        front_plot=front_plot(data, picked) if plane else None,
        load_curves=load_curves(data, picked))
