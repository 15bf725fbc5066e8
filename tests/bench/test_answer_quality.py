"""The GPU replay of issue #40 (benchmarks/answer_quality.py): its truth table is the stated
derivation, its runs stop where the study's own rule stops them, and a whole study replayed on
it measures and scores what the docs say (docs/answers.md)."""

from __future__ import annotations

import json
import math

import pytest

from autotune.core.trial.precision import Balance, Pinned, StopRule
from autotune.core.workload.profiles import ProfileOverrides, get_profile
from autotune.study.run.trial_function import BenchSpec
from benchmarks import answer_quality as aq


def test_the_stored_truth_table_is_the_stated_derivation():
    stored = aq.read_table(aq.TABLE)
    fresh = aq.truth_rows()
    assert len(stored) == len(fresh) == 4 * 3 * 2 * 2 * 2
    for got, want in zip(stored, fresh, strict=True):
        assert got["status"] == want["status"]
        if want["status"] == "served":
            assert got["low_e2el_ms"] == pytest.approx(want["low_e2el_ms"], abs=0.01)
            assert got["high_output_throughput"] == pytest.approx(want["high_output_throughput"],
                                                                  abs=0.1)


def test_the_truth_is_anchored_at_opt3_baseline_with_the_reference_effects():
    rows = {aq.key(r): r for r in aq.truth_rows()}
    base = rows[aq.key(aq.BASELINE_PARAMS)]
    no_mtp = rows[aq.key({**aq.BASELINE_PARAMS, "mtp": False})]
    assert (base["low_e2el_ms"], base["high_output_throughput"]) == (1548.0, 6555.0)
    assert no_mtp["low_e2el_ms"] / base["low_e2el_ms"] == pytest.approx(2505.243 / 1930.785, rel=1e-4)
    assert no_mtp["high_output_throughput"] / base["high_output_throughput"] == pytest.approx(
        1785.471 / 1663.330, rel=1e-4)
    assert rows[aq.key({**aq.BASELINE_PARAMS, "yarn": False})]["status"] == "config_rejected"


def test_runs_stop_where_the_study_rule_stops_them():
    low = get_profile("low-concurrency", ProfileOverrides(token_ids=True))
    bench = BenchSpec(profiles=(low,), sources={},
                      pinned={low.name: Pinned(StopRule(0.0125), ("mean_e2el_ms",))})
    request_s = 0.774  # 256 tokens at concurrency 2 and 1,548 ms a request
    assert aq.requests_of(bench, low, aq.CV[False], request_s) == (10, "precise")  # as the H100 measured
    assert aq.requests_of(bench, low, aq.CV[True], request_s) == (low.num_prompts, "ceiling")  # MTP
    unpinned = BenchSpec(profiles=(low,), sources={})
    assert aq.requests_of(unpinned, low, aq.CV[False], request_s) == (low.num_prompts, "ceiling")
    # The balanced rule (the default): n* = cv / sigma_b x sqrt(C_d / c_r) = 11.4 cv at C_d 100 s
    def balanced(sigma_b: float) -> BenchSpec:
        rule = StopRule(balance=Balance(sigma_b, 100.0))
        return BenchSpec(profiles=(low,), sources={}, pinned={low.name: Pinned(rule, ("mean_e2el_ms",))})
    assert aq.requests_of(balanced(0.01), low, aq.CV[False], request_s) == (10, "balanced")  # n* 8: floor
    assert aq.requests_of(balanced(0.01), low, aq.CV[True], request_s) == (low.num_prompts, "ceiling")  # 131
    assert aq.requests_of(balanced(0.03), low, aq.CV[True], request_s) == (44, "balanced")  # n* 43.6


@pytest.mark.vllm  # the user's baseline is read by vLLM's parser (build_plan)
def test_a_nine_minute_study_with_references_keeps_its_baseline_for_latency_and_finds_throughput(tmp_path):
    """opt3-baseline is the user's baseline: 0.5% short of the table's best latency, 8.5% short
    of its best throughput. Since #46 the exploration order measures first the single change the
    reference study expects to help most under load (MTP off), so nine minutes find it."""
    import autotune.shell.server.install as install

    real = install.detect_platform
    (tmp_path / "config.json").write_text(aq.MODEL_CONFIG.read_text())
    got = aq.one("test", "refs", 0, 540.0, str(tmp_path), str(aq.TABLE))
    assert install.detect_platform is real  # the GPU stand-in does not outlive the replay
    assert got["baseline_measured"] and got["served"] >= 2
    assert got["device_s"] <= 540.0
    interactive, throughput = got["uses"]["interactive"], got["uses"]["throughput"]
    assert interactive["pick"] == aq.key(aq.BASELINE_PARAMS) and interactive["vs_baseline"] == "keep"
    assert throughput["pick"] == aq.key({**aq.BASELINE_PARAMS, "mtp": False})
    assert throughput["vs_baseline"] == "better"
    for use in aq.USES:
        assert got["uses"][use]["within_5"] and not got["uses"][use]["worse_than_baseline"]
    assert json.loads(json.dumps(got)) == got  # a JSON line as saved


def test_summary_gives_wilson_intervals_per_budget_and_use():
    runs = [{"code": "c", "variant": "refs", "seed": s, "budget_s": 540.0, "served": 1,
             "device_s": 300.0, "uses": {u: {"within_5": s < 15, "worse_than_baseline": False,
                                              "decided": True} for u in aq.USES}}
            for s in range(30)]
    text = aq.summarize(runs)
    assert "| 9 min | refs | c | 30 | interactive | 15/30 50% [33%, 67%] | 0/30 0% [0%, 11%] | " \
           "30/30 100% [89%, 100%] | 1 | 5.0 |" in text
    assert math.isclose(aq.parse_budget("1h"), 3600) and aq.parse_budget("9m") == 540
