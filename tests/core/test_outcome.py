"""A trial's record (core.trial.outcome): what a deployment measured reaches the stored
outcome field for field, and the attribute form reads back, an older autotune's too."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from autotune.core.deployment import failures
from autotune.core.trial.outcome import Measurement, ProfileResult, TrialOutcome, from_attrs, to_attrs

RUNS = ({"output_throughput": 100.0, "mean_e2el_ms": 900.0}, {"output_throughput": 110.0, "mean_e2el_ms": 800.0})
MEASURED = Measurement(
    results={"low": ProfileResult("low", RUNS)}, raced="beaten by #0", startup_s=58.12345,
    startup_phases={"compile_s": 23.456, "compile_cache": "miss"}, bench_s=30.0004, wall_s=95.5,
    teardown_clean=True, teardown_s=2.25, gpu_memory_mib=1200, vllm_version="vllm 0.26.0",
    hardware="1 x H200", files=(Path("server.log"),))


def test_every_field_of_a_measurement_reaches_the_trials_outcome_as_stored():
    outcome = TrialOutcome(7, params={"mtp": True}).with_measurement(MEASURED)
    assert isinstance(outcome, Measurement)
    stored = {f.name: getattr(MEASURED, f.name) for f in dataclasses.fields(Measurement)} | {
        "startup_s": 58.123, "startup_phases": {"compile_s": 23.46, "compile_cache": "miss"}, "bench_s": 30.0}
    assert outcome == TrialOutcome(7, params={"mtp": True}, **stored)


def test_a_failed_deployment_keeps_its_class_message_and_log_but_no_metrics():
    failed = dataclasses.replace(MEASURED, failure=failures.ENGINE_DIED,
                                 failure_message="x" * 3000, log_tail="y" * 5000)
    outcome = TrialOutcome(7).with_measurement(failed)
    assert outcome.failure is failures.ENGINE_DIED and outcome.results == {} and not outcome.feasible
    assert (len(outcome.failure_message), len(outcome.log_tail)) == (2000, 4000)


def test_an_outcome_reads_back_from_its_attributes_without_its_local_files():
    outcome = TrialOutcome(7, params={"mtp": True}, argv=("--x",)).with_measurement(MEASURED)
    attrs = to_attrs(outcome)
    assert "files" not in attrs and attrs["repeats"] == {"low": list(RUNS)}
    assert from_attrs(7, "complete", {"mtp": True}, attrs) == dataclasses.replace(outcome, files=())


def test_a_failure_stored_by_an_older_autotune_reads_as_its_registered_class():
    attrs = {"failure_class": "internal_error", "failure_message": "OSError: [Errno 28] No space left",
             "log_tail": "", "startup_s": 0.0, "teardown_clean": True, "argv": ["--x"]}
    old = from_attrs(3, "complete", {"mtp": False}, attrs)
    assert old.failure is failures.INTERNAL_ERROR and not old.failure.blames_configuration
    assert (old.failure_message, old.argv, old.startup_s) == ("OSError: [Errno 28] No space left", ("--x",), 0.0)
