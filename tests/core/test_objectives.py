"""Objectives as records, derived from the profiles or given; SLOs as constraints."""

from __future__ import annotations

import math

import pytest

from autotune.core.metrics.slo import parse_slo
from autotune.core.trial.objectives import Objective, default_objectives, objective_values, parse_objective
from autotune.core.workload.profiles import get_profile
from autotune.errors import ConfigError

LOW, HIGH = get_profile("low-concurrency"), get_profile("high-concurrency")


def test_two_profiles_give_interactive_latency_against_throughput_under_load():
    assert default_objectives((HIGH, LOW)) == (
        Objective("low-concurrency", "mean_e2el_ms", "minimize"),
        Objective("high-concurrency", "output_throughput", "maximize"))


def test_one_profile_gives_ttft_against_tpot_a_real_trade_off():
    assert [o.name for o in default_objectives((LOW,))] == [
        "low-concurrency:mean_ttft_ms", "low-concurrency:mean_tpot_ms"]


def test_an_objective_knows_its_unit_direction_cost_and_infeasible_value():
    lat = parse_objective("low-concurrency:p99_ttft_ms", ["low-concurrency"])
    tput = parse_objective("low-concurrency:output_throughput:max", ["low-concurrency"])
    assert (lat.direction, lat.unit, lat.cost(5.0), lat.infeasible_value) == ("minimize", "ms", 5.0, math.inf)
    assert (tput.unit, tput.cost(5.0), tput.infeasible_value) == ("tok/s", -5.0, 0.0)
    assert lat.label == "p99 TTFT at low-concurrency (ms)"


def test_objective_values_come_from_per_profile_means():
    means = {"low-concurrency": {"mean_e2el_ms": 900.0}, "high-concurrency": {"output_throughput": 50.0}}
    assert objective_values(default_objectives((LOW, HIGH)), means) == [900.0, 50.0]


@pytest.mark.parametrize("text, message", [
    ("low-concurrency", "expected PROFILE:METRIC"),
    ("mid:mean_e2el_ms", "profile 'mid' is not run"),
    ("low-concurrency:latency", "unknown metric 'latency'"),
    ("low-concurrency:mean_e2el_ms:up", "direction 'up' is not min or max"),
], ids=["no-metric", "unknown-profile", "unknown-metric", "bad-direction"])
def test_bad_objectives_are_one_line_config_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_objective(text, ["low-concurrency"])


def test_slo_parsing_and_violation():
    slo = parse_slo("high-concurrency:p99_ttft_ms<=5000", ["high-concurrency"])
    assert slo.violation(4000.0) == -1000.0 and slo.violation(5500.0) == 500.0


@pytest.mark.parametrize("text, message", [
    ("p99<5000", "expected PROFILE:METRIC<=LIMIT"),
    ("low-concurrency:p99_ttft_ms<=1", "profile 'low-concurrency' is not run"),
    ("high-concurrency:p99_ttft_ms<=-5", "the limit must be a positive number of ms"),
    ("high-concurrency:p99_ttft_ms<=0", "the limit must be a positive number"),
], ids=["syntax", "profile", "negative", "zero"])
def test_bad_slos_are_one_line_config_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_slo(text, ["high-concurrency"])
