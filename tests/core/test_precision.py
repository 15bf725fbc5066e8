"""The precision stop rule on synthetic runs whose truth is known: a closed loop of C slots,
each request's latency drawn from a known distribution, the rule replayed as the client asks
it (``recheck``)."""

from __future__ import annotations

import heapq
import json
import math

import numpy as np
import pytest

from autotune.core.maths.platforms import PLATFORMS
from autotune.core.maths.stats import compare, estimate, pooled_noise
from autotune.core.metrics.summary import RequestResult, summarize
from autotune.core.trial.outcome import ProfileResult, TrialOutcome, from_attrs, to_attrs
from autotune.core.trial.precision import (
    BALANCED,
    CEILING,
    PRECISE,
    TIME_LIMIT,
    Balance,
    Pinned,
    RunStop,
    StopRule,
    balanced_pins,
    half_width,
    precision,
    recheck,
    request_from_line,
    request_line,
)
from autotune.core.workload.profiles import WorkloadProfile
from autotune.core.workload.requests import RandomPrompts
from autotune.shell.bench.client import BenchmarkRun
from autotune.study.run.trial_function import BenchSpec, TrialSetup, read_requests, run_trial


def closed_loop(latencies_s, concurrency: int, tokens: int = 16) -> list[RequestResult]:
    """Requests sent through ``concurrency`` slots, each the moment one frees (1 us later),
    in send order, with the client's completion times."""
    # A heap of (free at, slot): the earliest-free slot, the lowest-numbered on a tie, as
    # np.argmin over the slots picks it (the same records, without numpy's per-call cost).
    free = [(0.0, slot) for slot in range(concurrency)]
    out = []
    for latency in map(float, latencies_s):
        at, slot = free[0]
        start = at + 1e-6
        gap = latency / tokens
        done = start + latency + 1e-7
        out.append(RequestResult(prompt_len=8, start_s=start, success=True, output_tokens=tokens,
                                 ttft_s=gap, latency_s=latency, itl_s=(gap,) * (tokens - 1),
                                 done_s=done))
        heapq.heapreplace(free, (done, slot))  # that slot, free again once this one is done
    return out


def stop_of(latencies_s, rule, *, concurrency=2, metrics=("mean_e2el_ms",)):
    records = closed_loop(latencies_s, concurrency)
    return recheck(records, rule, metrics=metrics, concurrency=concurrency, ceiling=len(records))


@pytest.mark.parametrize("concurrency, floor", [(1, 10), (2, 10), (4, 12), (8, 16)],
                         ids=["c1", "c2", "c4-first-whole-wave-past-10", "c8-two-waves"])
def test_a_constant_latency_stream_stops_at_the_floor(concurrency, floor):
    stop = stop_of([0.5] * 200, StopRule(0.0125), concurrency=concurrency,
                   metrics=("mean_e2el_ms", "output_throughput", "mean_ttft_ms"))
    assert (stop.requests, stop.reason) == (floor, PRECISE)


def test_a_noisy_stream_needs_about_t_sd_over_target_squared_requests():
    cv, target = 0.2, 0.025  # lognormal latencies: sd/mean = cv
    sigma = math.sqrt(math.log1p(cv**2))
    expected = (1.96 * cv / target) ** 2  # 246
    used = [stop_of(np.random.default_rng(seed).lognormal(0, sigma, 2000), StopRule(target)).requests
            for seed in range(20)]
    assert 0.8 * expected <= np.median(used) <= 1.2 * expected


def test_the_rule_stops_only_at_whole_waves():
    for seed in range(20):
        latencies = np.random.default_rng(seed).lognormal(0, 0.3, 3000)
        stop = stop_of(latencies, StopRule(0.03), concurrency=6)
        assert stop.reason == PRECISE and stop.requests % 6 == 0 and stop.requests >= 12


def test_a_run_the_target_cannot_be_reached_in_ends_at_the_ceiling():
    stop = stop_of(np.random.default_rng(0).lognormal(0, 0.5, 100), StopRule(0.001))
    assert (stop.requests, stop.reason) == (100, CEILING)


def test_a_request_cut_by_the_time_limit_makes_the_reason_time_limit():
    records = closed_loop([0.5] * 9, 2) + [RequestResult(
        8, 5.0, False, latency_s=1.0, error="run time limit of 5 s reached", done_s=6.0)]
    stop = recheck(records, StopRule(0.5), metrics=("mean_e2el_ms",), concurrency=2, ceiling=20)
    assert (stop.requests, stop.reason) == (10, TIME_LIMIT)


def test_a_p99_cannot_be_pinned_by_few_requests_but_a_median_can():
    values = np.random.default_rng(1).lognormal(0, 0.2, 60)
    ok = closed_loop(values, 1)
    assert math.isinf(half_width(ok, "p99_e2el_ms")) and half_width(ok, "median_e2el_ms") < 0.1


def test_the_median_interval_covers_the_true_median_about_95_percent_of_the_time():
    covered = 0
    for seed in range(400):
        values = np.random.default_rng(seed).exponential(1.0, 200)
        half = half_width(closed_loop(values, 1), "median_e2el_ms") * np.median(values)
        covered += abs(np.median(values) - math.log(2)) <= half
    assert 0.90 <= covered / 400 <= 0.99


def test_throughput_precision_follows_the_e2el_ratio_and_matches_the_spread_of_runs():
    """Little's law at C: throughput = C x tokens / E2EL. With constant tokens its relative
    interval is mean E2EL's; over many runs, the spread of C x tokens / mean E2EL matches it."""
    rng = np.random.default_rng(2)
    halves, throughputs = [], []
    for _ in range(300):
        ok = closed_loop(rng.lognormal(0, 0.3, 100), 4)
        halves.append(half_width(ok, "output_throughput"))
        assert half_width(ok, "output_throughput") == pytest.approx(half_width(ok, "mean_e2el_ms"),
                                                                    rel=0.02)
        throughputs.append(4 * 16 / np.mean([r.latency_s for r in ok]))
    spread = np.std(throughputs) / np.mean(throughputs)
    assert np.median(halves) / 1.98 == pytest.approx(spread, rel=0.15)


def test_a_failed_request_makes_nothing_precise_and_unknown_metrics_are_left_out():
    ok = closed_loop([0.5] * 20, 2)
    assert precision(ok, ("mean_e2el_ms", "server_kv_cache_usage"), 0.01).half_widths.keys() == {
        "mean_e2el_ms"}
    failed = [*ok, RequestResult(8, 9.0, False, error="HTTP 500")]
    assert not precision(failed, ("mean_e2el_ms",), 0.5).precise


def test_a_parameter_that_does_nothing_comes_out_as_no_effect():
    """Two configurations with one latency distribution, each measured by 3 runs that stop by
    the rule; the study's comparison of their means (each with the noise of its own repeats)
    finds a difference in about 5% of seeds, as with runs of a fixed count, not more.

    Each run may send 400 requests; only its first 200 are simulated (the draws are the
    same), as every run stops, precise, before its 200th send: in a closed loop the requests
    after the stop are sent after it, so the rule never sees them and the stop is the one the
    whole 400 give (the simulation in half the time). With 300 seeds, a rule that doubled the
    false-positive rate to 10% would pass ``<= 7%`` with probability 5% (binomial)."""
    rule, seeds = StopRule(0.05), 300
    found = {"rule": 0, "fixed": 0}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        means: dict[str, dict[str, list[float]]] = {"rule": {}, "fixed": {}}
        for config in ("a", "b"):
            for how in means:
                means[how][config] = []
            for _ in range(3):
                records = closed_loop(rng.lognormal(0, 0.25, 400)[:200], 4)
                stop = recheck(records, rule, metrics=("mean_e2el_ms",), concurrency=4, ceiling=400)
                assert stop.reason == PRECISE and stop.requests < 200
                means["rule"][config].append(np.mean([r.latency_s for r in records[:stop.requests]]))
                means["fixed"][config].append(np.mean([r.latency_s for r in records[:100]]))
        for how, by_config in means.items():
            a, b = (estimate(v, pooled_noise({"m": [v]}).of("m")) for v in by_config.values())
            found[how] += compare(a, b).significant
    assert found["rule"] / seeds <= 0.07 and found["rule"] <= found["fixed"] + 0.02 * seeds


def test_recheck_from_a_stored_jsonl_reproduces_the_stop(tmp_path):
    records = closed_loop(np.random.default_rng(3).lognormal(0, 0.3, 400), 3)
    rule = StopRule(0.05)
    stop = recheck(records, rule, metrics=("mean_e2el_ms",), concurrency=3, ceiling=400)
    sent = records[:stop.requests]
    path = tmp_path / "requests-p-1.jsonl"
    path.write_text("".join(json.dumps(request_line(r, sent[0].start_s)) + "\n" for r in sent))
    stored = [request_from_line(json.loads(line)) for line in path.read_text().splitlines()]
    again = recheck(stored, rule, metrics=("mean_e2el_ms",), concurrency=3, ceiling=400)
    assert stop.reason == PRECISE and again == stop


def test_the_rule_refuses_a_target_it_cannot_mean():
    with pytest.raises(ValueError, match="target_rel"):
        StopRule(0.0)
    with pytest.raises(ValueError, match="between_log_sd"):
        Balance(0.0, 100.0)


class PrecisionBench:
    """A stand-in for shell.bench.client.run_profile: a closed loop of noisy latencies, stopped by
    ``until`` exactly as the client asks it (the stop is the replayed one)."""

    def __call__(self, target, profile, *, seed, source, slo=None, stop=None, until=None):
        records = closed_loop(np.random.default_rng(seed).lognormal(-1, 0.3, profile.num_prompts),
                              profile.max_concurrency)
        ended = recheck(records, until.rule, metrics=until.metrics,
                        concurrency=profile.max_concurrency, ceiling=profile.num_prompts)
        sent = records[:ended.requests]
        return BenchmarkRun(profile, seed, summarize(sent, max(r.done_s for r in sent)),
                            tuple(sent), ended)


def test_a_trial_stores_each_runs_stop_and_its_requests_from_which_recheck_recomputes_it(tmp_path):
    from tests.helpers import StandInDeployment  # the stand-in server of the trial's tests

    profile = WorkloadProfile(name="low", num_prompts=600, max_concurrency=3)
    pinned = Pinned(StopRule(0.04), ("mean_e2el_ms", "output_throughput"))
    plan = BenchSpec(profiles=(profile,), sources={"low": RandomPrompts(512)}, repeats=2,
                     pinned={"low": pinned})
    setup = TrialSetup(model="m", workdir=tmp_path, deploy=lambda spec, on_phase:
                       StandInDeployment(spec, on_phase), run_profile=PrecisionBench())
    measured = run_trial(["--max-num-seqs", "8"], plan, setup)
    stops = measured.results["low"].stops
    assert [s.reason for s in stops] == [PRECISE, PRECISE] and all(s.requests < 600 for s in stops)
    for repeat, stop in enumerate(stops, 1):
        stored = read_requests(tmp_path / f"requests-low-{repeat}.jsonl")
        assert len(stored) == stop.requests
        assert recheck(stored, pinned.rule, metrics=pinned.metrics, concurrency=3,
                       ceiling=600) == stop
        bench = json.loads((tmp_path / f"bench-low-{repeat}.json").read_text())
        assert (bench["requests"], bench["stop"]) == (stop.requests, PRECISE)
    outcome = TrialOutcome(number=0).with_measurement(measured)
    again = from_attrs(0, "complete", {}, json.loads(json.dumps(to_attrs(outcome))))
    assert again.results["low"].stops == stops
    assert again.results["low"].requests_text == f"{stops[0].requests}+{stops[1].requests} precise"


def test_a_trial_stored_before_stops_were_recorded_reads_with_none():
    old = from_attrs(0, "complete", {}, {"repeats": {"low": [{"mean_e2el_ms": 1.0}]}})
    assert old.results["low"].stops == () and old.results["low"].requests_text == ""


def test_a_run_short_of_its_profiles_concurrency_says_what_it_reached():
    result = ProfileResult("high", ({"output_throughput": 1.0},),
                           (RunStop(8, CEILING, reached_concurrency=8, concurrency=100),))
    assert result.requests_text == "8 ceiling, reached 8 of 100"


def test_each_fixed_profile_pins_the_metrics_its_objectives_and_slos_use():
    from autotune.core.metrics.slo import parse_slo
    from autotune.core.trial.objectives import Objective
    from autotune.study.run.study_plan import SHOWN, pinned_metrics

    low, high = WorkloadProfile(name="low"), WorkloadProfile(name="high", max_concurrency=64)
    idle = WorkloadProfile(name="idle")
    objectives = (Objective("low", "mean_e2el_ms", "minimize"),
                  Objective("high", "output_throughput", "maximize"))
    slos = (parse_slo("high:p90_ttft_ms<=500", ["low", "high", "idle"]),)
    sources = dict.fromkeys(("low", "high", "idle"), RandomPrompts(512))
    pinned = pinned_metrics((low, high, idle), objectives, slos, StopRule(0.0125), sources)
    assert {p: v.metrics for p, v in pinned.items()} == {
        "low": ("mean_e2el_ms",), "high": ("output_throughput", "p90_ttft_ms"), "idle": SHOWN}
    assert {v.rule for v in pinned.values()} == {StopRule(0.0125)}
    assert pinned_metrics((low,), objectives, (), None, sources) == {}  # --precision 0: num_prompts


def test_the_default_is_the_balanced_length_and_a_given_precision_is_stored():
    from autotune.core.plan.study_request import StudyRequest

    request = StudyRequest(profiles=(WorkloadProfile(name="low"),), model="m", space_yaml="x")
    assert request.precision is None and request.balanced
    assert StudyRequest.from_dict(request.to_dict(), "t").balanced  # stored as None: balanced
    stored = StudyRequest.from_dict(StudyRequest(**{**request.__dict__, "precision": 0.02}).to_dict(), "t")
    assert stored.precision == 0.02 and not stored.balanced
    older = {k: v for k, v in request.to_dict().items() if k != "precision"}
    # a study stored before runs stopped early goes on sending every request, as its trials did
    assert StudyRequest.from_dict(older, "t").precision == 0.0
    # a run that joins with another explicit precision is refused
    assert stored.differences(StudyRequest(**{**request.__dict__, "precision": 0.0125})) == ["precision"]


@pytest.mark.parametrize("text, value", [("1.25%", 0.0125), ("2", 0.02), ("0", 0.0), (None, None)],
                         ids=["percent", "bare", "off", "derived"])
def test_the_precision_flag_reads_percentages_and_zero_as_off(text, value):
    from autotune.core.trial.precision import parse_precision

    assert parse_precision(text) == (pytest.approx(value) if value else value)


def _counted_study():
    from autotune.core.analysis.study_data import StudyData, noise_of
    from autotune.core.trial.objectives import Objective

    objectives = (Objective("low", "mean_e2el_ms", "minimize"),
                  Objective("high", "output_throughput", "maximize"))

    def results(e2el: float) -> dict:
        return {"low": ProfileResult("low", ({"mean_e2el_ms": e2el},), (RunStop(40, PRECISE, 2, 2),)),
                "high": ProfileResult("high", ({"output_throughput": 900.0},),
                                      (RunStop(8, CEILING, 8, 100),))}

    trials = (TrialOutcome(0, results=results(100.0), reference="base"),
              TrialOutcome(1, params={"x": 1}, results=results(90.0)))
    return StudyData(trials, objectives, noise_of(trials), trials[0], {"x": None})


def test_the_trial_table_shows_requests_used_and_a_load_not_reached(monkeypatch):
    import io

    from rich.console import Console

    import autotune.cli.common as common
    from autotune.cli.results import print_trials

    data = _counted_study()
    screen = io.StringIO()
    monkeypatch.setattr(common, "out", Console(width=100, file=screen, soft_wrap=True))
    print_trials(data)
    shown = screen.getvalue()
    assert "requests" in shown and "40 / 8" in shown and "reached 8 of 100" in shown
    assert max(map(len, shown.splitlines())) <= 100


def test_the_front_and_the_recommendations_say_a_load_not_reached():
    from autotune.core.analysis.recommendation import TieSettings, recommend, table
    from autotune.study.output.tables import front_table

    data = _counted_study()
    rec = recommend(data, "throughput", TieSettings("s"))
    lines = table(data, [rec], "s")
    assert f"#{rec.trial.number} high: reached 8 of 100: not measured at the profile's load" in lines
    assert max(map(len, lines)) <= 80
    import io

    from rich.console import Console

    screen = io.StringIO()
    Console(width=160, file=screen).print(front_table(data, "s"))
    assert "(reached 8 of 100)" in screen.getvalue()


def test_the_trial_note_and_the_report_say_the_requests_and_the_load_reached():
    from autotune.study.output.notes import trial_note

    data = _counted_study()
    note = trial_note(data.outcomes[1], data)
    assert "Requests per run: low 40 precise; high 8 ceiling, reached 8 of 100." in note
    assert "(reached 8 of 100)" in note
    from autotune.study.output.report_data import Report
    from autotune.study.output.report_render import report_sections, to_markdown

    report = Report("s", "m", "space.yaml", data, (), {}, (), (), (), {}, {})
    text = to_markdown(report_sections(report))
    assert "requests" in text and "40 / 8" in text
    assert "(reached 8 of 100)" in text


def test_the_requests_needed_script_counts_from_the_rules_floor_and_runs_on_synthetic_records(
        tmp_path):
    from benchmarks.requests_needed import needed, read_records, synthetic, table

    assert needed(closed_loop([0.5] * 50, 2), "mean_e2el_ms", [0.05, 0.01]) == [10, 10]
    noisy = closed_loop(np.random.default_rng(4).lognormal(0, 0.5, 60), 2)
    assert needed(noisy, "mean_e2el_ms", [0.001]) == [None]
    path = tmp_path / "t" / "requests-low-concurrency-1.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(request_line(r, 0.0)) + "\n" for r in noisy))
    assert list(read_records([tmp_path], {"low-concurrency": "fixed"})) == ["fixed"]
    shown = table(synthetic(0, 60, 2), [0.05])
    assert all(name in shown for name in ("fixed lengths", "ShareGPT-like", "shared prefix"))


@pytest.mark.parametrize("flag, said", [
    ([], "runs stop at the balanced length n* = sigma_w/sigma_b x sqrt(C_d/c_r), where more "
         "requests buy less than another deployment (sigma_b 20.00%, C_d 90 s until the study "
         "measures them), or sooner once their 95% intervals are within 2.50% of their value "
         "(0.5 x the smallest difference, 5%); --precision X for a target instead: "
         "low-concurrency mean_e2el_ms; high-concurrency output_throughput"),
    (["--precision", "2%"], "within 2% of their value (--precision)"),
    (["--precision", "0"], "runs send every profile's num_prompts (--precision 0)"),
], ids=["default-balanced", "given", "off"])
@pytest.mark.vllm
def test_run_states_where_its_runs_stop(monkeypatch, capsys, tmp_path, flag, said):
    from autotune.cli import main

    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--dry-run", "--profile", "low-concurrency", "--profile",
                 "high-concurrency", *flag])
    captured = capsys.readouterr()
    shown = " ".join((captured.out + captured.err).split())
    assert code == 0 and said in shown


# The balanced length (docs/precision.md): n* = sigma_w / sigma_b x sqrt(C_d / c_r).

def alternating(spread: float, count: int) -> list[float]:
    """Latencies of mean 1 s whose per-request relative spread is ``spread`` (1 -+ spread in
    turn): a run of known sigma_w."""
    return [1 - spread if i % 2 == 0 else 1 + spread for i in range(count)]


def balanced_stop(latencies, concurrency, balance, ceiling):
    return recheck(closed_loop(latencies, concurrency), StopRule(balance=balance),
                   metrics=("mean_e2el_ms", "output_throughput"), concurrency=concurrency,
                   ceiling=ceiling)


@pytest.mark.parametrize("concurrency, floor", [(1, 10), (2, 10), (4, 12), (8, 16)],
                         ids=["c1", "c2", "c4", "c8"])
def test_a_run_whose_requests_agree_stops_at_the_floor_under_the_balance(concurrency, floor):
    stop = balanced_stop([0.5] * 200, concurrency, Balance(0.03, 100.0), 200)
    assert (stop.requests, stop.reason) == (floor, BALANCED)


@pytest.mark.parametrize("concurrency, expected, stop_at", [(4, 77.97, 80), (2, 55.14, 56)],
                         ids=["c4", "c2"])
def test_an_mtp_like_run_stops_at_the_first_whole_wave_past_the_balanced_length(
        concurrency, expected, stop_at):
    """sigma_w 12% (MTP acceptance), sigma_b 3%, C_d 95 s; at concurrency C a request of 1 s
    costs c_r = 1/C s, so n* = 0.12 / 0.03 x sqrt(95 x C): far below the 400-request ceiling."""
    n_star = 0.12 / 0.03 * math.sqrt(95.0 / (1.0 / concurrency))
    assert n_star == pytest.approx(expected, abs=0.01)
    stop = balanced_stop(alternating(0.12, 400), concurrency, Balance(0.03, 95.0), 400)
    assert (stop.requests, stop.reason) == (stop_at, BALANCED)
    assert stop.requests == math.ceil(n_star / concurrency) * concurrency


def test_with_a_small_spread_between_deployments_an_mtp_like_run_uses_its_whole_ceiling():
    """At the GPU's measured 0.7% between deployments, n* = 0.12 / 0.007 x sqrt(100 x 4) = 343
    requests: the run's own spread is what limits the trial, so it goes to its 100."""
    stop = balanced_stop(alternating(0.12, 100), 4, Balance(0.007, 100.0), 100)
    assert (stop.requests, stop.reason) == (100, CEILING)


def test_the_balanced_length_minimises_variance_times_cost():
    """Variance of a configuration's mean from k deployments of n requests: (sb^2 + sw^2/n)/k,
    at a cost of k (C_d + n c_r); their product does not depend on k and is least at n*."""
    sb, sw, cd, cr = 0.01, 0.12, 100.0, 0.8
    n = np.arange(1, 5000)
    best = int(n[np.argmin((sb**2 + sw**2 / n) * (cd + n * cr))])
    assert Balance(sb, cd).requests(sw, cr) == pytest.approx(best, abs=1)
    assert Balance(sb, cd).requests(math.inf, cr) == math.inf  # spread not known yet: go on


def test_the_stop_rule_takes_one_rule_a_target_or_a_balance():
    with pytest.raises(ValueError, match="one of target_rel"):
        StopRule()
    with pytest.raises(ValueError, match="one of target_rel"):
        StopRule(0.01, balance=Balance(0.03, 100.0))
    assert StopRule(0.01).reason == PRECISE and StopRule(balance=Balance(0.03, 1.0)).reason == BALANCED


def test_the_precision_flag_gives_the_target_rule_and_no_flag_the_balance_from_the_priors():
    import autotune.study.run.study_plan as planning
    from autotune.core.plan.study_request import StudyRequest

    request = StudyRequest(profiles=(WorkloadProfile(name="low"),))
    gpu = Balance(PLATFORMS["gpu"].between_log_sd, 100.0)
    assert planning.stop_rule(request, platform="gpu") == StopRule(balance=gpu, enough_rel=0.025)  # half of 5%
    assert planning.stop_rule(StudyRequest(profiles=(), precision=0.02)) == StopRule(0.02)
    assert planning.stop_rule(StudyRequest(profiles=(), precision=0.0)) is None


def test_a_studys_measured_spread_and_deployment_cost_replace_the_balances_priors():
    from autotune.core.maths.stats import Noise, NoiseModel

    prior = Balance(0.03, 100.0)
    pinned = {"low": Pinned(StopRule(balance=prior), ("mean_e2el_ms", "output_throughput")),
              "high": Pinned(StopRule(balance=prior), ("output_throughput",)),
              "fixed": Pinned(StopRule(0.02), ("mean_e2el_ms",))}
    noise = NoiseModel({"low:mean_e2el_ms": Noise(0.009, 4, "between deployments", 0.009),
                        # the repeats' floor is larger: sigma_b is still the measured 0.6%
                        "low:output_throughput": Noise(0.012, 6, "repeats: ...", 0.006),
                        "high:output_throughput": Noise(0.05, math.inf, "assumed")}, "gpu")
    known = balanced_pins(pinned, noise, 120.0)
    assert known["low"].rule.balance == Balance(0.006, 120.0)  # the smallest: the longer run
    assert known["high"].rule.balance == Balance(0.03, 120.0)  # assumed noise: the prior's
    # Repeats on one deployment without a redeployment measure the runs' own spread (sigma_w),
    # not sigma_b: the prior stays.
    repeats_only = NoiseModel({"high:output_throughput": Noise(0.022, 3, "repeats: ...")}, "gpu")
    assert balanced_pins(pinned, repeats_only, None)["high"].rule.balance == prior
    assert known["fixed"] == pinned["fixed"]  # --precision: the target rule, untouched
    assert balanced_pins(pinned, NoiseModel({}), None) == pinned  # nothing measured yet


@pytest.mark.vllm
def test_a_trace_profile_is_announced_as_sending_every_request(monkeypatch, capsys, tmp_path):
    """One decision (``stops_early``) for the plan and the client: a profile whose requests
    carry send times is not listed among the profiles whose runs stop early."""
    from autotune.cli import main

    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    monkeypatch.chdir(tmp_path)
    rows = [json.dumps({"prompt_token_ids": [5, 6, 7, 8], "output_len": 4, "timestamp_ms": 10 * i})
            for i in range(40)]
    (tmp_path / "trace.jsonl").write_text("\n".join(rows) + "\n")
    (tmp_path / "p.yaml").write_text(
        "trace:\n  num_prompts: 20\n  warmup_requests: 1\n"
        f"  dataset: {json.dumps({'format': 'jsonl', 'path': str(tmp_path / 'trace.jsonl')})}\n")
    code = main(["run", "--dry-run", "--profile", "low-concurrency", "--profile", "trace",
                 "--profile-file", str(tmp_path / "p.yaml")])
    captured = capsys.readouterr()
    shown = " ".join((captured.out + captured.err).split())
    assert code == 0 and "low-concurrency mean_e2el_ms; trace: every request" in shown
    assert "trace mean" not in shown and "trace output" not in shown


def test_the_balanced_length_script_prints_before_and_after_for_each_case():
    from benchmarks.balanced_length import old_requests, table, whole

    assert old_requests(0.005) == 10 and old_requests(0.13) == 100  # the 10 and 100
    assert (whole(9.2), whole(51.0), whole(math.inf)) == (10, 52, 100)
    shown = "\n".join(table())
    assert all(case in shown for case in ("GPU, no MTP", "GPU, MTP", "CPU, 2 cores"))
