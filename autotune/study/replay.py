"""Replaying a recorded table: a trial function that looks a configuration up instead of
deploying it, so that whole studies run in seconds on real measurements.

A served configuration returns, for every profile, ``repeats`` runs drawn with replacement from
its recorded runs (the noise is part of the replay: the same configuration does not give the
same means twice); a configuration that failed returns its recorded failure class. It plugs
into the runner's seam (``StudyRunner(trial_fn=Replay(...))``): `benchmarks/sampler_efficiency.py`
compares samplers with it, and tests check study-level behaviour on realistic data.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from autotune.core.flags import to_argv
from autotune.core.outcome import Measurement, ProfileResult
from autotune.core.space import ModelContext, SearchSpace
from autotune.core.table import NOT_REACHED, RecordedTable, TableRow
from autotune.errors import ConfigError, FailureClass
from autotune.study.trial import BenchPlan, TrialSetup


class Replay:
    """A trial function over ``table`` for studies of ``space`` on the model of ``ctx``."""

    def __init__(self, table: RecordedTable, space: SearchSpace, ctx: ModelContext,
                 seed: int = 0) -> None:
        self.table = table
        self.rng = random.Random(seed)
        self.rows = {tuple(to_argv(space, ctx, row.params)): row for row in table.rows}
        self.replayed: list[TableRow] = []  # in the order the study asked for them

    def __call__(self, argv: Sequence[str], bench: BenchPlan, setup: TrialSetup,
                 on_phase: Callable[[str], None]) -> Measurement:
        row = self.rows.get(tuple(argv))
        if row is None or row.status == NOT_REACHED:
            raise ConfigError(f"{' '.join(argv)}: not measured in the recorded table "
                              f"({self.table.header.get('study', 'no study named')})")
        on_phase("replaying the recorded table")
        self.replayed.append(row)
        if not row.served:
            return Measurement(FailureClass(row.status), row.message,
                               startup_s=row.startup_s or 0.0)
        missing = [p.name for p in bench.profiles if p.name not in row.runs]
        if missing:
            raise ConfigError(f"the recorded table has no runs of profile(s) {missing}; "
                              f"it has {list(self.table.profiles)}")
        results = {p.name: ProfileResult(p.name, tuple(
            self.rng.choice(row.runs[p.name]) for _ in range(bench.repeats)))
            for p in bench.profiles}
        return Measurement(results=results, startup_s=row.startup_s or 0.0,
                           vllm_version=self.table.header.get("vllm", ""),
                           hardware=self.table.header.get("machine", ""))
