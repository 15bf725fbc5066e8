"""Replaying a recorded table: a trial function that looks a configuration up instead of
deploying it, so that whole studies run in seconds on real measurements. Deploys nothing.
Only benchmarks and tests use it; it stays beside the runner as a second implementation of the
trial-function seam, so that a change to the seam breaks it in the fast tests. What it draws,
and the device time a ``DeviceClock`` charges: docs/samplers.md#the-replay."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from autotune.core.analysis.table import NOT_REACHED, RecordedTable, TableRow
from autotune.core.deployment import failures
from autotune.core.deployment.flags import to_argv
from autotune.core.space.search_space import ModelContext, SearchSpace, complete, fixed
from autotune.core.trial.outcome import Measurement, ProfileResult
from autotune.core.trial.racing import beaten, run_order
from autotune.core.workload.profiles import WorkloadProfile
from autotune.errors import ConfigError
from autotune.study.run.trial_function import BenchSpec, TrialSetup

VALIDATION_S = 1.0  # a configuration vLLM's parser rejects: validation only (measured < 1 s)
TEARDOWN_S = 5.0  # killing the process group and checking it is gone (measured 2-6 s on CPU)


@dataclass
class DeviceClock:
    """Seconds of device time spent so far (a wall clock for the runner's time budget)."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def run_seconds_of(run: Mapping[str, float], profile: WorkloadProfile) -> float:
    """How long one recorded run took: its measured requests' output over its throughput,
    and the warm-up requests before it at the same pace."""
    measured = profile.num_prompts * profile.output_len / float(run["output_throughput"])
    return measured * (1 + profile.warmups / profile.num_prompts)


def drawable(table: RecordedTable, space: SearchSpace, ctx: ModelContext) -> RecordedTable:
    """The rows a study of ``space`` on this model can draw, in the parameters it draws: a
    row whose parameter the study leaves out (its condition does not hold, or it does not
    apply) stands for that configuration only at the parameter's default; one with a fixed
    parameter (``fixed``: YaRN beyond the native context) at another value is never drawn."""
    pinned = fixed(space, ctx)
    rows = []
    for row in table.rows:
        if any(row.params.get(k, v) != v for k, v in pinned.items()):
            continue
        params = complete(space, ctx, row.params)
        left_out = [k for k in row.params if k in space.names and k not in params]
        if all(row.params[k] == space.parameter(k).default for k in left_out):
            rows.append(dataclasses.replace(row, params=params))
    return dataclasses.replace(table, rows=tuple(rows))


class Replay:
    """A trial function over ``table`` for studies of ``space`` on the model of ``ctx``. The
    trial function sees only the flags, so the table is looked up by them."""

    def __init__(self, table: RecordedTable, space: SearchSpace, ctx: ModelContext,
                 seed: int = 0, clock: DeviceClock | None = None) -> None:
        self.table = drawable(table, space, ctx)
        self.rng = random.Random(seed)
        self.rows = {tuple(to_argv(space, ctx, row.params)): row for row in self.table.rows}
        self.replayed: list[TableRow] = []  # in the order the study asked for them
        self.clock = clock or DeviceClock()

    def __call__(self, argv: Sequence[str], bench: BenchSpec, setup: TrialSetup,
                 on_phase: Callable[[str], None]) -> Measurement:
        row = self.rows.get(tuple(argv))
        if row is None or row.status == NOT_REACHED:
            raise ConfigError(f"{' '.join(argv)}: not measured in the recorded table "
                              f"({self.table.header.get('study', 'no study named')})")
        on_phase("replaying the recorded table")
        self.replayed.append(row)
        startup = row.startup_s or 0.0
        if not row.served:
            self.clock.now += (VALIDATION_S if row.status == failures.CONFIG_REJECTED.name
                               else startup + TEARDOWN_S)
            return Measurement(failure=failures.failure_class(row.status), failure_message=row.message,
                               startup_s=startup)
        missing = [p.name for p in bench.profiles if p.name not in row.runs]
        if missing:
            raise ConfigError(f"the recorded table has no runs of profile(s) {missing}; "
                              f"it has {list(self.table.profiles)}")
        profiles = {p.name: p for p in bench.profiles}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in profiles}
        results: dict[str, ProfileResult] = {}
        bench_s, raced = 0.0, ""
        for name, _ in run_order(list(profiles), bench.repeats, bench.run_seconds):
            run = dict(self.rng.choice(row.runs[name]))
            run["duration"] = run_seconds_of(run, profiles[name])
            bench_s += run["duration"]
            runs[name].append(run)
            results = {n: ProfileResult(n, tuple(v)) for n, v in runs.items() if v}
            raced = beaten(bench.race, results) if bench.race is not None else ""
            if raced:
                break
        self.clock.now += startup + bench_s + TEARDOWN_S
        return Measurement(results=results, startup_s=startup, bench_s=bench_s, raced=raced,
                           vllm_version=self.table.header.get("vllm", ""),
                           hardware=self.table.header.get("machine", ""))
