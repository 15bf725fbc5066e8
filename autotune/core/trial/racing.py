"""Racing inside a trial: stop measuring a configuration that is already beaten. Pure.
After each run, with the study's pooled noise: when even the trial's optimistic 95% bound on
every objective is beaten by some front member's pessimistic bound, more runs cannot put it on
the front, and the rest are skipped. A trial lacking a run of some objective's profile is never
judged; confirmation is never raced (it gets no ``Race``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autotune.core.maths.stats import Estimate, NoiseModel, estimate
from autotune.core.trial.objectives import Objective
from autotune.core.trial.outcome import ProfileResult


@dataclass(frozen=True)
class Member:
    """One front member: its label and its estimate on each objective (in the race's order)."""

    label: str
    estimates: tuple[Estimate, ...]


@dataclass(frozen=True)
class Race:
    """What a trial races against: the front when it started, and the study's noise."""

    objectives: tuple[Objective, ...]
    front: tuple[Member, ...]
    noise: NoiseModel


def _optimistic(o: Objective, e: Estimate) -> float:
    return e.low if o.minimize else e.high


def _pessimistic(o: Objective, e: Estimate) -> float:
    return e.high if o.minimize else e.low


def _better(o: Objective, a: float, b: float) -> bool:
    return a < b if o.minimize else a > b


def beaten(race: Race, results: Mapping[str, ProfileResult]) -> str:
    """Why the trial with ``results`` (the runs so far) cannot reach the front, or "" while it
    still can (or has no run of some objective's profile yet)."""
    mine: list[Estimate] = []
    for o in race.objectives:
        values = results[o.profile].values(o.metric) if o.profile in results else []
        if not values:
            return ""
        # One deployment so far: its mean, with the noise of one deployment's mean.
        mine.append(estimate([sum(values) / len(values)], race.noise.of(o.name)))
    for member in race.front:
        if all(_better(o, _pessimistic(o, theirs), _optimistic(o, own))
               for o, own, theirs in zip(race.objectives, mine, member.estimates, strict=True)):
            runs = min(len(results[o.profile].runs) for o in race.objectives)
            return (f"beaten by {member.label} beyond the noise after {runs} run(s) per profile: "
                    + "; ".join(f"{o.label} {own.text} vs {theirs.text}" for o, own, theirs
                                in zip(race.objectives, mine, member.estimates, strict=True)))
    return ""


def run_order(profiles: Sequence[str], repeats: int, seconds: Mapping[str, float]) -> list[tuple[str, int]]:
    """The order of a trial's runs: one run of every profile before any repeat, the cheapest
    profile first (by ``seconds``, a run's expected duration), so that the first runs that can
    decide a race cost least."""
    ordered = sorted(profiles, key=lambda p: (seconds.get(p, 0.0), profiles.index(p)))
    return [(p, r) for r in range(repeats) for p in ordered]
