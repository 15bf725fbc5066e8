"""Studies replayed against the recorded table (benchmarks/data/cpu-table/): the real runner,
sampler, references, duplicates, failures and front on real measurements of the reference
space, with a trial function that looks configurations up instead of deploying them
(``autotune.study.dev.replay``: a stand-in for vLLM through the runner's seam, said so here; the
deployments themselves are tested in test_study.py and test_deploy.py)."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import optuna
import pytest

from autotune.core.analysis.table import NOT_REACHED, SERVED, RecordedTable
from autotune.core.deployment.flags import to_argv
from autotune.core.plan.study_request import StudyRequest
from autotune.core.space.search_space import params_key, resolve_references
from autotune.core.workload.profiles import ProfileOverrides, get_profile
from autotune.errors import ConfigError
from autotune.study.dev.replay import Replay
from autotune.study.run.runner import StudyRunner
from autotune.study.run.samplers import make_sampler
from autotune.study.run.study_plan import build_plan
from autotune.study.run.study_setup import prepare_study
from autotune.study.run.trial_function import TrialSetup
from autotune.study.store.records import outcomes, study_data
from autotune.study.store.storage import Heartbeat
from tests.helpers import DATA, INFERRED, RECORDED, SPACES, TABLE


def replay_plan(tmp_path: Path, *, trials: int, references: bool, sampler: str = "tpe", seed=1):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((DATA / "model-config.json").read_text())
    return build_plan(StudyRequest(
        # The table was recorded sending random token ids: the replay's profiles say so.
        workdir=tmp_path, profiles=tuple(get_profile(p, ProfileOverrides(token_ids=True))
                                         for p in TABLE.profiles),
        model=str(model), space_path=str(SPACES / "reference.yaml"),
        references_path=str(SPACES / "references.yaml") if references else None,
        trials=trials, repeats=2, seed=seed, sampler=sampler, study_name="replay",
        storage=f"sqlite:///{tmp_path}/replay.db"))


def run_replay(plan, table: RecordedTable = TABLE, seed: int = 1):
    storage = optuna.storages.InMemoryStorage()
    prepare_study(plan, Heartbeat(), storage)
    replay = Replay(table, plan.space, plan.ctx, seed)
    study = StudyRunner(plan, TrialSetup(model="", workdir=plan.workdir), trial_fn=replay,
                        storage=storage, poll_s=0.01).work()
    return study, replay


def test_the_table_holds_every_configuration_of_the_reference_space_with_its_fate():
    assert len(RECORDED.rows) == 192
    assert RECORDED.count(SERVED) == 48  # no expert parallel, YaRN: every one served
    assert RECORDED.count("config_rejected") == 96  # no YaRN: 81920 tokens over 32768 native
    served = [r for r in RECORDED.rows if r.served]
    assert all(len(runs) == 2 for r in served for runs in r.runs.values())
    assert not any(r.params["expert_parallel"] for r in served)  # EP crashes on the CPU build
    assert not TABLE.count(NOT_REACHED)
    assert not RECORDED.count(NOT_REACHED) or INFERRED.startswith(
        "expert_parallel=true and yarn=true: all 20 measured configurations failed")
    for key in ("protocol", "machine", "vllm"):
        assert RECORDED.header[key]


def test_a_replayed_study_runs_the_references_first_and_keeps_the_tables_failures(tmp_path):
    plan = replay_plan(tmp_path, trials=16, references=True)
    study, replay = run_replay(plan)
    found = [t for t in outcomes(study) if t.state == "complete"]
    # A rejection costs a validation, not a trial: 16 counted, the rejected ones beside them.
    assert len(counted(found)) == 16 and len(found) <= 3 * 16
    refs = [r.name for r in resolve_references(plan.space, plan.ctx, plan.references.configs)
            if not r.skipped]  # cp-interleave-16 is the baseline's engine without DCP
    assert [t.reference for t in found[:len(refs)]] == refs
    for t in found:
        row = replay.table.find(t.params)
        assert (t.failure.name if t.failure else SERVED) == row.status
        if row.served:  # every replayed run is one of the recorded runs of that configuration
            for profile, result in t.results.items():
                assert result.runs and all(recorded(run) in row.runs[profile] for run in result.runs)
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    # A failure is copied to a later duplicate, never replayed (deployed) again.
    assert len({params_key(r.params) for r in replay.replayed}) == len(replay.replayed)
    data = study_data(study)
    front = data.front()
    assert front and all(replay.table.find(t.params).served for t in front)


def counted(found: list) -> list:
    """The trials that count toward --trials: all but those vLLM rejected (docs/studies.md)."""
    return [t for t in found if not (t.failure and t.failure.name == "config_rejected")]


def recorded(run: dict) -> dict:
    """A replayed run as the table recorded it (without the duration the replay derives)."""
    return {k: v for k, v in run.items() if k != "duration"}


def test_replaying_draws_recorded_runs_so_the_noise_is_part_of_the_replay(tmp_path):
    plan = replay_plan(tmp_path, trials=1, references=False)
    replay = Replay(TABLE, plan.space, plan.ctx, seed=0)
    row = max((r for r in replay.table.rows if r.served),
              key=lambda r: statistics.pstdev(x["output_throughput"] for x in r.runs["high-concurrency"]))
    argv = to_argv(plan.space, plan.ctx, row.params)
    means = set()
    for _ in range(40):
        m = replay(argv, plan.bench, TrialSetup(model="", workdir=tmp_path), lambda phase: None)
        runs = m.results["high-concurrency"].runs
        assert len(runs) == 2 and all(recorded(run) in row.runs["high-concurrency"] for run in runs)
        assert all(run["duration"] > 0 for run in runs)  # the replay adds what a run cost
        means.add(round(m.results["high-concurrency"].mean("output_throughput"), 6))
    assert len(means) == 3  # (a, a), (a, b) and (b, b): a bootstrap of the two recorded runs


def test_a_configuration_the_table_lacks_stops_the_replay_instead_of_inventing_numbers(tmp_path):
    plan = replay_plan(tmp_path, trials=3, references=True)
    served = next(r for r in TABLE.rows if r.served)
    partial = dataclasses.replace(TABLE, rows=(served,))
    with pytest.raises(ConfigError, match="not measured in the recorded table"):
        run_replay(plan, partial)


@pytest.mark.parametrize("sampler", ["tpe", "random", "nsga2"])
def test_every_sampler_completes_a_replayed_study_within_its_budget(tmp_path, sampler):
    plan = replay_plan(tmp_path, trials=12, references=False, sampler=sampler)
    study, _ = run_replay(plan)
    assert type(study.sampler) is type(make_sampler(1, sampler))
    complete = [t for t in outcomes(study) if t.state == "complete"]
    assert len(counted(complete)) == 12 and len(complete) <= 3 * 12  # rejections beside the budget
    assert study_data(study).front()


def test_an_unknown_sampler_is_a_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match="--sampler 'bayes': valid samplers are tpe, random"):
        replay_plan(tmp_path, trials=1, references=False, sampler="bayes")
