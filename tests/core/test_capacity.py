"""The capacity search (``core.trial.capacity_search``): on synthetic latency curves whose
boundary is known, it brackets and bisects to the boundary in few probes, repeats probes near
the limit, and an incumbent's load ends a hopeless search after one probe. Pure: no server."""

import math

import numpy as np
import pytest

from autotune.core.metrics.slo import Slo
from autotune.core.trial.capacity_search import (
    Boundary,
    CapacitySearch,
    Incumbent,
    Probe,
    boundary_text,
    choose_incumbent,
)
from autotune.core.trial.capacity_search import search as capacity_search
from autotune.core.workload.capacity_spec import CapacitySpec
from autotune.core.workload.profiles import parse_profiles
from autotune.errors import ConfigError

TTFT = Slo("p99_ttft_ms", "<=", 2000.0)


def smooth(knee: float):
    """p99 TTFT rising smoothly with load: 2000 ms exactly at ``knee`` x 3**(1/2)."""
    return lambda load: {"p99_ttft_ms": 500.0 * (1 + (load / knee) ** 2),
                         "output_throughput": 40.0 * load}


def search(spec: CapacitySpec, curve, noise: float = 0.0, seed: int = 0,
           incumbent: Incumbent | None = None, around: Boundary | None = None
           ) -> tuple[Boundary, list[float]]:
    """The real search over ``curve``, its p99 TTFT with log-normal noise of sd ``noise``;
    returns where it ended and the loads it probed, in order."""
    rng = np.random.default_rng(seed)

    def measure(load: float, why: str, settle) -> Probe:
        m = dict(curve(load))
        m["p99_ttft_ms"] *= math.exp(rng.normal(0, noise)) if noise else 1.0
        return Probe(load, m)

    found = capacity_search("capacity", spec, measure, incumbent, around)
    return found.boundary, [p.load for p in found.probes]


def test_a_step_curve_is_bracketed_within_the_resolution():
    spec = CapacitySpec(low=1, high=256, limits=(TTFT,))
    boundary, loads = search(spec, lambda c: {"p99_ttft_ms": 100.0 if c <= 37 else 9000.0})
    assert boundary.load <= 37 < boundary.fail_load <= 1.25 * boundary.load
    assert len(loads) <= 7 and len(set(loads)) == len(loads)  # clear verdicts: no repeats
    fine = CapacitySpec(low=1, high=256, resolution=1.01, limits=(TTFT,))
    boundary, loads = search(fine, lambda c: {"p99_ttft_ms": 100.0 if c <= 37 else 9000.0})
    assert (boundary.load, boundary.fail_load) == (37, 38) and len(loads) <= 10


def test_a_smooth_rise_is_found_within_the_resolution_in_few_probes():
    truth = 30 * math.sqrt(3)  # 51.96: where the curve crosses 2000 ms
    spec = CapacitySpec(load="rate", low=0.25, high=256, noise=0.02, limits=(TTFT,))
    boundary, loads = search(spec, smooth(30))
    assert boundary.load <= truth < boundary.fail_load
    assert boundary.fail_load / boundary.load <= spec.resolution
    assert boundary.load <= boundary.estimate <= boundary.fail_load
    assert abs(boundary.estimate / truth - 1) < 0.05
    assert len(loads) <= 7  # a linear descent from 256 in steps of 1 would take ~200


def test_with_noise_the_boundary_is_found_near_the_truth_and_unsure_loads_are_repeated():
    truth = 30 * math.sqrt(3)
    spec = CapacitySpec(load="rate", low=0.25, high=256, noise=0.15, limits=(TTFT,))
    hits, repeated = 0, 0
    for seed in range(60):
        boundary, loads = search(spec, smooth(30), noise=0.15, seed=seed)
        assert boundary.found and len(loads) <= spec.max_probes
        hits += boundary.load / 1.5 <= truth <= (boundary.fail_load or math.inf) * 1.5
        repeated += len(set(loads)) < len(loads)
    assert hits >= 54  # the bracket widened by 1.5x holds the truth in >= 90% of seeds
    assert repeated >= 30  # loads near the limit are measured again


def test_every_load_passing_or_none_passing_ends_at_the_ends_of_the_range():
    spec = CapacitySpec(low=1, high=64, limits=(TTFT,))
    boundary, _ = search(spec, lambda c: {"p99_ttft_ms": 10.0})
    assert (boundary.load, boundary.fail_load) == (64, None)
    boundary, _ = search(spec, lambda c: {"p99_ttft_ms": 1e6})
    assert not boundary.found and "lowest load" in boundary.reason


def test_failed_requests_miss_every_slo():
    spec = CapacitySpec(low=1, high=64, resolution=1.01, limits=(TTFT,))
    boundary, _ = search(spec, lambda c: {"p99_ttft_ms": 10.0, "failed": float(c > 20)})
    assert (boundary.load, boundary.fail_load) == (20, 21)


def test_an_incumbent_load_failed_beyond_noise_ends_the_search_after_one_probe():
    spec = CapacitySpec(low=1, high=256, limits=(TTFT,))
    best = Incumbent(trial=3, load=100, throughput=5000.0)
    boundary, loads = search(spec, smooth(30), incumbent=best)
    assert loads == [100] and boundary.below_incumbent == 3 and not boundary.found


def test_an_incumbent_load_that_is_met_starts_the_bracket_there():
    spec = CapacitySpec(low=1, high=256, noise=0.02, resolution=1.01, limits=(TTFT,))
    boundary, loads = search(spec, smooth(30), incumbent=Incumbent(3, load=20, throughput=800.0))
    assert loads[0] == 20 and boundary.load == 51 and boundary.below_incumbent is None


def test_a_failure_at_the_incumbent_load_within_the_noise_does_not_end_the_search():
    spec = CapacitySpec(low=1, high=256, resolution=1.01, limits=(TTFT,))
    # 2100 ms at the incumbent's load: 5% past the limit, inside one probe's noise.
    curve = lambda c: {"p99_ttft_ms": 2100.0 if c >= 40 else 1000.0, "output_throughput": 40.0 * c}  # noqa: E731
    boundary, loads = search(spec, curve, incumbent=Incumbent(3, load=40, throughput=5000.0))
    assert loads[:3] == [40, 40, 40] and boundary.below_incumbent is None
    assert (boundary.load, boundary.fail_load) == (39, 40)


@pytest.mark.parametrize("knee", [3, 10, 30, 90])
def test_a_reprobe_of_the_found_boundary_confirms_it_measuring_only_its_two_loads(knee):
    spec = CapacitySpec(low=1, high=256, limits=(TTFT,))
    found, full = search(spec, smooth(knee))
    again, loads = search(spec, smooth(knee), around=found)
    assert (again.load, again.fail_load) == (found.load, found.fail_load)
    assert set(loads) == {found.load, found.fail_load}  # each repeated while near the limit
    assert len(loads) < len(full)


@pytest.mark.parametrize("shift", [0.5, 0.75, 0.9, 1.1, 1.25, 2.0])
@pytest.mark.parametrize("load", ["concurrency", "rate"])
def test_a_reprobe_follows_a_moved_boundary_to_where_a_full_search_finds_it(shift, load):
    spec = CapacitySpec(load=load, low=1, high=256, limits=(TTFT,))
    before, _ = search(spec, smooth(20))
    full, _ = search(spec, smooth(20 * shift))
    again, _ = search(spec, smooth(20 * shift), around=before)
    truth = 20 * shift * 3 ** 0.5
    assert again.load <= truth < again.fail_load  # the noiseless curve's crossing
    assert full.load <= truth < full.fail_load
    assert again.fail_load / again.load <= spec.resolution or again.fail_load - again.load == 1


@pytest.mark.parametrize("load", ["concurrency", "rate"])
def test_a_reprobe_costs_fewer_probes_than_a_new_search_where_a_redeployment_moves_the_boundary(
        load):
    spec = CapacitySpec(load=load, low=1, high=256, limits=(TTFT,))
    full = again = 0
    for knee in (5, 20, 60):
        before, _ = search(spec, smooth(knee))
        for seed, shift in enumerate((0.75, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25)):
            full += len(search(spec, smooth(knee * shift), noise=0.1, seed=seed)[1])
            again += len(search(spec, smooth(knee * shift), noise=0.1, seed=seed, around=before)[1])
    assert again < 0.85 * full


def test_only_a_loads_first_run_may_stop_early_and_never_at_the_incumbents_load():
    spec = CapacitySpec(low=1, high=256, limits=(TTFT,))
    asked: list[tuple[float, bool]] = []
    rng = np.random.default_rng(3)

    def measure(load: float, why: str, settle) -> Probe:
        asked.append((load, settle is not None))
        m = smooth(30)(load)
        return Probe(load, dict(m, p99_ttft_ms=m["p99_ttft_ms"] * math.exp(rng.normal(0, 0.15))))

    capacity_search("capacity", spec, measure, Incumbent(3, load=20, throughput=5000.0))
    first = {}
    for load, may_stop in asked:
        assert may_stop == (load not in first and load != 20)
        first.setdefault(load, may_stop)
    assert len(asked) > len(first)  # repeats were asked for, and none could stop


def test_an_incumbent_is_chosen_only_among_trials_as_good_on_the_other_objectives():
    worse_latency = Incumbent(1, 64, 3000.0, {"low:mean_e2el_ms": 900.0})
    better_latency = Incumbent(2, 32, 2000.0, {"low:mean_e2el_ms": 400.0})
    assert choose_incumbent([worse_latency, better_latency], {"low:mean_e2el_ms": 500.0}) is better_latency
    assert choose_incumbent([worse_latency], {"low:mean_e2el_ms": 500.0}) is None
    assert choose_incumbent([worse_latency, better_latency], {}) is None


def test_a_search_round_trips_through_its_stored_form():
    spec = CapacitySpec(low=1, high=64, limits=(TTFT,))
    boundary, _ = search(spec, smooth(10))
    record = CapacitySearch("capacity", "concurrency", (TTFT.text,), boundary,
                            (Probe(17.0, {"p99_ttft_ms": 1900.0}),))
    assert CapacitySearch.from_dict(record.to_dict()) == record


def test_profile_files_define_workloads_and_capacity_searches():
    profiles = parse_profiles("""
profiles:
  chat: {input_len: 1024, output_len: 128, range_ratio: 0.5, max_concurrency: 8}
  peak:
    num_prompts: 50
    capacity: {load: rate, low: 0.5, high: 32, slo: ['p99_ttft_ms<=2000', 'p99_tpot_ms<=50']}
""", "my.yaml")
    assert profiles["chat"].range_ratio == 0.5 and profiles["chat"].capacity is None
    spec = profiles["peak"].capacity
    assert spec.load == "rate" and [lim.text for lim in spec.limits] == ["p99_ttft_ms<=2000", "p99_tpot_ms<=50"]
    assert profiles["peak"].at_load(4.0).request_rate == 4.0


@pytest.mark.parametrize("text, message", [
    ("x: {input_lenn: 3}", "my.yaml: profile 'x': unknown field"),
    ("x: {capacity: {load: qps}}", "my.yaml: profile 'x': capacity load 'qps'"),
    ("x: {capacity: {slo: ['p99_ttft<=2']}}", "unknown metric 'p99_ttft'"),
    ("x: {capacity: {low: 8, high: 2}}", "need 0 < low < high"),
    ("x: {range_ratio: 1.5}", "range_ratio must be in"),
])
def test_bad_profile_files_are_one_line_errors_naming_file_and_field(text, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as err:
        parse_profiles(text, "my.yaml")
    assert "\n" not in str(err.value)


def test_the_noise_of_a_capacity_objective_pools_every_load_measured_more_than_once():
    from autotune.core.analysis.study_data import noise_of
    from autotune.core.trial.outcome import ProfileResult, TrialOutcome

    probes = (Probe(8, {"output_throughput": 100.0}), Probe(8, {"output_throughput": 110.0}),
              Probe(16, {"output_throughput": 200.0}), Probe(16, {"output_throughput": 180.0}),
              Probe(32, {"output_throughput": 300.0}))  # met at 16, missed at 32 (one run)
    found = CapacitySearch("cap", "concurrency", (TTFT.text,), Boundary(16, 32, 20, "", 5), probes)
    t = TrialOutcome(0, params={}, capacity={"cap": found},
                     results={"cap": ProfileResult("cap", tuple(found.runs_at_boundary()))})
    noise = noise_of([t], "gpu").of("cap:output_throughput")
    assert noise.df == 2  # two loads measured twice; the single run at 32 adds nothing
    expected = math.sqrt(((math.log(100 / 110) / 2) ** 2 * 2 + (math.log(200 / 180) / 2) ** 2 * 2) / 2)
    # One deployment's mean of two such runs, above the GPU's assumed 3% between deployments.
    assert noise.log_sd == pytest.approx(expected / math.sqrt(2))


@pytest.mark.parametrize("boundary, text", [
    (Boundary(16, 32, 20, "", 5), "16 concurrent (fails at 32; 5 probes)"),
    (Boundary(64, None, 64, "", 4), "64 concurrent (highest load searched; 4 probes)"),
    (Boundary(None, 1, None, "past the SLOs at the lowest load, 1", 2),
     "no load meets the SLOs (past the SLOs at the lowest load, 1)"),
    (Boundary(None, 8, None, "", 1, below_incumbent=3), "below #3 (past the SLOs at its load 8)"),
], ids=["bracketed", "top-of-range", "none", "below-incumbent"])
def test_where_a_search_ended_reads_as_one_line(boundary, text):
    assert boundary_text(CapacitySearch("cap", "concurrency", (TTFT.text,), boundary)) == text
