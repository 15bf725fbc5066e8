"""run_trial's contract, branch by branch: whatever happens short of an interrupt it returns a
Measurement with a failure class, and the deployment is torn down.

These tests pass STAND-INS through run_trial's seams (``TrialSetup.deploy`` and
``TrialSetup.run_profile``): a fake deployment and a fake benchmark that inject faults a real vLLM
server cannot be made to produce on demand. They test the trial's logic, not deployment;
real deployments are tested in test_deploy.py and test_study.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from autotune.core.deployment import failures
from autotune.core.workload.profiles import WorkloadProfile
from autotune.core.workload.requests import RandomPrompts
from autotune.errors import BenchmarkError, DeploymentError, ValidationError, ValidationUnavailable
from autotune.study.run.trial_function import BenchSpec, TrialSetup, Validated, run_trial
from tests.helpers import StandInBench, StandInDeployment

PROFILES = (WorkloadProfile(name="low", num_prompts=4), WorkloadProfile(name="high", num_prompts=4))


def trial(tmp_path, *, run_profile=None, validator=None, validated=None, **deployment):
    made: list[StandInDeployment] = []

    def deploy(spec, on_phase):
        made.append(StandInDeployment(spec, on_phase, **deployment))
        return made[-1]

    setup = TrialSetup(model="m", workdir=tmp_path / "trial", validator=validator, validated=validated,
                       deploy=deploy, run_profile=run_profile or StandInBench())
    plan = BenchSpec(profiles=PROFILES, sources={p.name: RandomPrompts(512) for p in PROFILES}, repeats=2)
    measured = run_trial(["--max-num-seqs", "8"], plan, setup)
    return measured, made


class Rejecting:
    def check(self, model: str, options) -> None:
        raise ValidationError("--max-num-seqs: must be positive")


def test_a_configuration_vllm_rejects_is_config_rejected_and_nothing_is_deployed(tmp_path):
    measured, made = trial(tmp_path, validator=Rejecting())
    assert measured.failure is failures.CONFIG_REJECTED and "must be positive" in measured.failure_message
    assert made == []


@dataclass
class Counting:
    """A stand-in for shell.server.validation.VllmValidator that rejects what it is told to and counts
    how often it is asked."""

    rejects: str = ""
    asked: int = 0

    def check(self, model: str, options) -> None:
        self.asked += 1
        if self.rejects:
            raise ValidationError(self.rejects)


FLAGS = ("--max-num-seqs", "8")  # what trial() runs


@pytest.mark.parametrize("rejects", ["", "--max-num-seqs: must be positive"], ids=["accepted", "rejected"])
def test_a_verdict_on_the_same_flags_reached_before_the_trial_is_taken_without_asking_vllm_again(
        tmp_path, rejects):
    alone, asked_alone = Counting(rejects), Counting()
    validated_here, _ = trial(tmp_path / "alone", validator=alone)
    verdict = Validated("m", FLAGS, rejected=rejects)
    measured, made = trial(tmp_path / "reused", validator=asked_alone, validated=verdict)
    assert (alone.asked, asked_alone.asked) == (1, 0)
    assert (measured.failure, measured.failure_message) == (validated_here.failure,
                                                            validated_here.failure_message)
    assert bool(made) is not bool(rejects)  # a rejected configuration is never deployed


@pytest.mark.parametrize("verdict", [Validated("m", ("--max-num-seqs", "16")), Validated("other", FLAGS)],
                         ids=["other-flags", "other-model"])
def test_a_verdict_on_other_flags_or_another_model_is_not_taken(tmp_path, verdict):
    validator = Counting("--max-num-seqs: must be positive")
    measured, made = trial(tmp_path, validator=validator, validated=verdict)
    assert validator.asked == 1 and measured.failure is failures.CONFIG_REJECTED and made == []


def test_a_served_configuration_has_every_profiles_repeats_and_the_server_is_gone(tmp_path):
    bench = StandInBench()
    measured, made = trial(tmp_path, run_profile=bench)
    assert measured.failure is None and measured.startup_s == 12.5
    assert {p: len(r.runs) for p, r in measured.results.items()} == {"low": 2, "high": 2}
    assert bench.calls == ["low", "high", "low", "high"]  # one run of each before any repeat
    assert sorted(f.name for f in measured.files) == [
        "bench-high-1.json", "bench-high-2.json", "bench-low-1.json", "bench-low-2.json",
        "requests-high-1.jsonl", "requests-high-2.jsonl", "requests-low-1.jsonl",
        "requests-low-2.jsonl"]
    assert made[0].teardown is not None and measured.teardown_clean


def test_a_deployment_that_does_not_come_up_keeps_its_class_and_log_tail(tmp_path):
    error = DeploymentError(failures.STARTUP_CRASH, "exited with 1: bad flag", log_tail="Traceback")
    measured, made = trial(tmp_path, start_error=error)
    assert (measured.failure, measured.failure_message, measured.log_tail) == (
        failures.STARTUP_CRASH, "exited with 1: bad flag", "Traceback")
    assert measured.results == {}
    assert measured.startup_s is None  # never ready: no ready time, rather than "0 s"


def test_failed_requests_on_a_live_server_make_the_benchmark_invalid(tmp_path):
    measured, made = trial(tmp_path, run_profile=StandInBench(failed_requests=1))
    assert measured.failure is failures.BENCHMARK_INVALID
    assert measured.failure_message == "low: 1 of 4 requests failed: HTTP 500: engine dead"
    assert measured.results == {} and made[0].teardown is not None


def test_failed_requests_on_a_dead_engine_are_diagnosed_from_its_log(tmp_path):
    measured, made = trial(tmp_path, run_profile=StandInBench(failed_requests=4), serving=False)
    assert measured.failure is failures.ENGINE_DIED
    assert "worker died" in measured.failure_message and "EngineDeadError" in measured.log_tail
    assert made[0].teardown is not None


@pytest.mark.parametrize(("error", "failure", "words"), [
    (BenchmarkError("--endpoint 'x': valid: completions, chat"), failures.INTERNAL_ERROR,
     "the benchmark could not run: --endpoint 'x'"),
    (OSError(28, "No space left on device"), failures.HOST_FAULT, "OSError: [Errno 28]"),
    (ValueError("duration_s must be > 0, got 0"), failures.INTERNAL_ERROR, "ValueError: duration_s"),
], ids=["benchmark-cannot-run", "disk-full", "our-bug"])
def test_an_exception_in_the_benchmark_becomes_a_failure_class_and_the_server_is_torn_down(
        tmp_path, error, failure, words):
    measured, made = trial(tmp_path, run_profile=StandInBench(error=error))
    assert measured.failure is failure and words in measured.failure_message
    assert made[0].teardown is not None and measured.results == {}


def test_a_trial_beaten_beyond_the_noise_stops_measuring_and_keeps_the_runs_it_has(tmp_path):
    from autotune.core.maths.stats import Noise, NoiseModel, estimate
    from autotune.core.trial.objectives import Objective
    from autotune.core.trial.racing import Member, Race

    objectives = (Objective("low", "mean_e2el_ms", "minimize"),
                  Objective("high", "output_throughput", "maximize"))
    noise = NoiseModel({o.name: Noise(0.05, 20, "pooled") for o in objectives})
    # A front member 10x better than anything StandInBench measures (E2EL 50 ms, 48 tok/s).
    race = Race(objectives, (Member("#0", (estimate([5.0], noise.of("low:mean_e2el_ms")),
                                           estimate([480.0], noise.of("high:output_throughput")))),),
                noise)
    bench = StandInBench()
    setup = TrialSetup(model="m", workdir=tmp_path / "trial", deploy=lambda spec, on_phase:
                       StandInDeployment(spec, on_phase), run_profile=bench)
    plan = BenchSpec(profiles=PROFILES, sources={p.name: RandomPrompts(512) for p in PROFILES},
                     repeats=2, race=race)
    measured = run_trial(["--max-num-seqs", "8"], plan, setup)
    assert measured.failure is None and measured.raced.startswith("beaten by #0")
    assert bench.calls == ["low", "high"]  # one run of each, then no more
    assert {p: len(r.runs) for p, r in measured.results.items()} == {"low": 1, "high": 1}


def test_a_capacity_search_leaves_its_probes_and_record_and_draws_nothing(tmp_path):
    from autotune.core.metrics.slo import parse_limit
    from autotune.core.workload.capacity_spec import CapacitySpec

    capacity = WorkloadProfile(name="cap", num_prompts=4, capacity=CapacitySpec(
        low=1, high=16, max_probes=3, limits=(parse_limit("p99_ttft_ms<=100", "test"),)))
    setup = TrialSetup(model="m", workdir=tmp_path / "trial", deploy=lambda spec, on_phase:
                       StandInDeployment(spec, on_phase), run_profile=StandInBench())
    plan = BenchSpec(profiles=(capacity,), sources={"cap": RandomPrompts(512)})
    measured = run_trial(["--max-num-seqs", "8"], plan, setup)
    assert measured.failure is None and measured.capacity["cap"].probes
    names = sorted(p.name for p in (tmp_path / "trial").iterdir())
    assert "capacity-cap.json" in names and "bench-cap-probe-1.json" in names
    assert not [n for n in names if n.endswith(".png")]  # the report draws the curve


def test_a_capacity_probe_clearly_past_its_limit_stops_once_its_fail_is_settled(tmp_path):
    import json

    from autotune.core.metrics.slo import parse_limit
    from autotune.core.workload.capacity_spec import CapacitySpec

    capacity = WorkloadProfile(name="cap", num_prompts=4, capacity=CapacitySpec(
        low=1, high=16, limits=(parse_limit("p99_ttft_ms<=100", "test"),)))
    setup = TrialSetup(model="m", workdir=tmp_path / "trial", deploy=lambda spec, on_phase:
                       StandInDeployment(spec, on_phase), run_profile=StandInBench(ttft_s=1.0))
    plan = BenchSpec(profiles=(capacity,), sources={"cap": RandomPrompts(512)})
    found = run_trial(["--max-num-seqs", "8"], plan, setup).capacity["cap"]
    first = found.probes[0]  # at 4 concurrent, 8 requests: the p99 of 8 is past once 2 are
    assert (first.load, first.measured_requests, first.planned_requests) == (4, 2, 8)
    # the bar: 100 ms x exp(1.96 x 15%), one run past the limit beyond the judge's noise band
    assert first.settled == "p99_ttft_ms<=100: 2 of 8 requests past 134.2 ms after 2"
    stored = json.loads((tmp_path / "trial" / "bench-cap-probe-1.json").read_text())
    assert (stored["completed"], stored["planned_requests"]) == (2, 8)
    assert not found.boundary.found  # the same verdict as the whole run: no load meets 100 ms


# ---- every escape path of run_trial: each fault is injected through a seam and comes back as a
# measurement with a failure class, never as an exception.

def test_a_trial_folder_that_cannot_be_made_is_the_machines_fault(tmp_path):
    (tmp_path / "file").write_text("")
    setup = TrialSetup(model="m", workdir=tmp_path / "file" / "trial",
                       deploy=lambda spec, on_phase: pytest.fail("deployed"))
    plan = BenchSpec(profiles=PROFILES, sources={p.name: RandomPrompts(512) for p in PROFILES})
    measured = run_trial(["--max-num-seqs", "8"], plan, setup)
    assert measured.failure is failures.HOST_FAULT and "NotADirectoryError" in measured.failure_message


class Unavailable:
    def check(self, model: str, options) -> None:
        raise ValidationUnavailable("vllm 0.99: no make_arg_parser in vllm.entrypoints.cli_args")


class Broken:
    def check(self, model: str, options) -> None:
        raise KeyError("max_num_seqs")  # a bug of ours in the validator


def test_flags_that_cannot_be_validated_here_are_deployed_and_vllm_checks_them(tmp_path):
    measured, made = trial(tmp_path, validator=Unavailable())
    assert measured.failure is None and made[0].entered


def test_flags_the_runner_could_not_validate_are_deployed_and_the_reason_said(tmp_path):
    phases: list[str] = []
    setup = TrialSetup(model="m", workdir=tmp_path / "trial", validator=Counting("not asked"),
                       validated=Validated("m", FLAGS, unavailable="vllm 0.99: no make_arg_parser"),
                       deploy=lambda spec, on_phase: StandInDeployment(spec, on_phase),
                       run_profile=StandInBench())
    plan = BenchSpec(profiles=PROFILES, sources={p.name: RandomPrompts(512) for p in PROFILES})
    assert run_trial(list(FLAGS), plan, setup, phases.append).failure is None
    assert "not validated before launch: vllm 0.99: no make_arg_parser" in phases


def test_a_bug_in_validation_is_ours_and_nothing_is_deployed(tmp_path):
    measured, made = trial(tmp_path, validator=Broken())
    assert (measured.failure, measured.failure_message) == (failures.INTERNAL_ERROR, "KeyError: 'max_num_seqs'")
    assert made == []


def test_a_deployment_that_cannot_be_made_is_a_failure_and_nothing_is_left(tmp_path):
    def port_taken(spec, on_phase):
        raise OSError(98, "Address already in use")

    setup = TrialSetup(model="m", workdir=tmp_path / "trial", deploy=port_taken)
    plan = BenchSpec(profiles=PROFILES, sources={p.name: RandomPrompts(512) for p in PROFILES})
    measured = run_trial(["--max-num-seqs", "8"], plan, setup)
    assert measured.failure is failures.HOST_FAULT and measured.teardown_clean


def test_a_deployment_that_failed_without_tearing_down_is_not_reported_clean(tmp_path):
    measured, made = trial(tmp_path, start_error=RuntimeError("launcher bug"), torn_down_on_error=False)
    assert measured.failure is failures.INTERNAL_ERROR and not measured.teardown_clean


def test_start_up_phases_that_cannot_be_read_fail_the_trial_as_ours_after_teardown(tmp_path):
    measured, made = trial(tmp_path, phases_error=ValueError("no 'Starting vLLM' line"))
    assert (measured.failure, measured.failure_message) == (failures.INTERNAL_ERROR,
                                                   "ValueError: no 'Starting vLLM' line")
    assert made[0].teardown is not None and measured.results == {}


def test_a_launch_that_fails_after_the_process_started_tears_it_down(tmp_path):
    """The real ServerProcess, with a stand-in server (a sleeping Python) whose log cannot be
    written (its path is a folder): the process is killed and the trial is the machine's fault."""
    import sys

    from autotune.shell.server.install import Entrypoint
    from autotune.shell.server.processes import session_pids

    (tmp_path / "trial" / "server.log").mkdir(parents=True)
    started = []

    def deploy(spec, on_phase):
        from autotune.shell.server.server import ServerProcess

        started.append(ServerProcess(dataclasses.replace(spec, grace_s=2.0), on_phase))
        return started[-1]

    sleeper = Entrypoint((sys.executable, "-c", "import time; time.sleep(60)"), model_positional=True)
    setup = TrialSetup(model="m", workdir=tmp_path / "trial", entrypoint=sleeper, deploy=deploy)
    plan = BenchSpec(profiles=PROFILES, sources={p.name: RandomPrompts(512) for p in PROFILES})
    measured = run_trial(["--max-num-seqs", "8"], plan, setup)
    assert measured.failure is failures.HOST_FAULT and "IsADirectoryError" in measured.failure_message
    (dep,) = started
    assert dep.teardown is not None and measured.teardown_clean
    assert dep._proc is not None and dep._proc.poll() is not None and not session_pids(dep.pid)
