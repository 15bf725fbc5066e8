"""Which trial a worker runs next when several workers share one study. Pure.

Workers coordinate only through the storage: the budget counts finished trials study-wide, and
the trial numbers the storage hands out decide which of two simultaneous askers backs out.
Rejected configurations stay out of the budget (``Counts.rejected``) up to ``REJECTED_CAP`` times
it, so that a space of rejections alone still ends (docs/scale-out.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Step(StrEnum):
    ASK = "ask"  # room in the budget: claim a trial
    WAIT = "wait"  # the budget is claimed by running trials; one may still fail and be retried
    STOP = "stop"  # enough finished trials


@dataclass(frozen=True)
class Counts:
    """The study's trials as a worker sees them."""

    finished: int  # COMPLETE: measured, or infeasible with a failure class, rejections aside
    running: Sequence[int]  # numbers of RUNNING trials, this worker's included
    rejected: int = 0  # COMPLETE, rejected by vLLM (config_rejected): outside the budget


REJECTED_CAP = 3  # trials in all (rejected ones included), as a multiple of the budget


def next_step(counts: Counts, budget: int) -> Step:
    ended = counts.finished + counts.rejected
    if counts.finished >= budget or ended >= REJECTED_CAP * budget:
        return Step.STOP
    if counts.finished + len(counts.running) >= budget or \
            ended + len(counts.running) >= REJECTED_CAP * budget:
        return Step.WAIT
    return Step.ASK


def stop_text(counts: Counts, budget: int) -> str:
    """Why ``next_step`` says STOP, in one line."""
    rejected = (f", and {counts.rejected} rejected by vLLM (not counted)" if counts.rejected
                else "")
    if counts.finished >= budget:
        return f"the budget is met: {counts.finished} of {budget} trial(s) finished{rejected}"
    return (f"{counts.finished + counts.rejected} trials ended, {counts.rejected} of them rejected "
            f"by vLLM: the cap of {REJECTED_CAP} x --trials ({REJECTED_CAP * budget}) is reached "
            f"with {counts.finished} of {budget} counted")


def position(number: int, counts: Counts) -> int:
    """1-based place of a running trial in the budget: finished trials first, then running
    trials by number (the order the storage created them)."""
    return counts.finished + sorted(counts.running).index(number) + 1


def over_budget(number: int, counts: Counts, budget: int) -> bool:
    """True for a just-claimed trial that lies past the budget: of simultaneous claims the
    ones with the highest numbers back out, which every worker computes alike."""
    return position(number, counts) > budget


@dataclass(frozen=True)
class Claim:
    """A trial that holds a parameter set: running, or finished."""

    number: int
    key: str  # canonical JSON of the parameters
    running: bool
    failed: bool  # finished with a failure class (infeasible)


def duplicate_of(number: int, key: str, claims: Iterable[Claim]) -> Claim | None:
    """The earliest other trial holding the same parameters, if any."""
    same = [c for c in claims if c.key == key and c.number != number]
    return min(same, key=lambda c: c.number) if same else None


def worker_seed(seed: int | None, worker: str) -> int | None:
    """A sampler seed per worker: reproducible for a given seed and worker label, and
    different between workers, so that their random start-up trials do not coincide."""
    if seed is None:
        return None
    digest = hashlib.sha256(f"{seed}:{worker}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF
