"""Where start-up time goes (core.deployment.startup). tests/data/startup-cpu-tp2.log is a real
start of vLLM 0.32's CPU build (the generated dense model, TP=2 on 2 cores, an empty compile
cache), each line stamped with the second autotune read it; its first completion was
answered at 75.439 s. The GPU lines are the messages vLLM's GPU worker logs, in its order."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.core.deployment.startup import (
    PHASES,
    LogLine,
    StartupPhases,
    parse_stamped,
    phase_spans,
    stamped_text,
    startup_phases,
)

CPU = parse_stamped((Path(__file__).parents[1] / "data" / "startup-cpu-tp2.log").read_text())
CPU_READY_S = 75.439


def test_every_phase_of_a_cpu_start_runs_between_the_lines_that_bound_it():
    spans = phase_spans(CPU, CPU_READY_S)
    assert spans == {
        "imports_s": (0.0, 10.506),  # launch to the API server's banner
        "config_s": (10.506, 10.564),  # to its last line before the engine's first
        "engine_s": (10.564, 19.594),  # to the engine's first line
        "workers_s": (19.594, 40.086),  # to the first rank starting to load the model
        "weights_s": (40.086, 40.338),
        "compile_s": (41.19, 70.18),  # to the slower rank's compiled function saved
        "warmup_s": (70.18, 70.871),
        "kv_cache_s": (70.871, 73.964),  # to the engine's "init engine ... took"
        "api_server_s": (73.964, 75.203),  # to "Application startup complete"
        "first_completion_s": (75.203, CPU_READY_S),
    }


def test_on_cpu_less_than_a_tenth_of_the_ready_time_is_unnamed_and_the_parts_add_up():
    p = startup_phases(CPU, CPU_READY_S)
    named = sum(v for k, v in p.as_dict().items() if k.endswith("_s") and k != "unnamed_s")
    assert p.unnamed_s == pytest.approx(40.338 - 40.086 + 41.19 - 40.338 - 0.252, abs=1e-9)
    assert p.unnamed_s < 0.1 * CPU_READY_S
    assert named + p.unnamed_s == pytest.approx(CPU_READY_S)
    assert p.compile_cache == "miss"


def test_a_loaded_compile_cache_is_a_hit():
    warm = [LogLine(x.arrival_s, x.text.replace("saved AOT compiled function to",
                                                "Directly load AOT compilation from path"))
            for x in CPU]
    p = startup_phases(warm, CPU_READY_S)
    assert p.compile_cache == "hit" and p.compile_s == pytest.approx(70.18 - 41.19)


def test_a_compiled_function_vllm_cannot_load_is_told_apart_from_a_miss():
    # vLLM 0.32's CPU build on a repeat of one configuration (benchmarks/startup.py): it finds
    # its saved function, fails to load it and compiles again.
    failed = [*CPU[:100], LogLine(45.0, "(Worker_TP1 pid=3305) WARNING 12-04 20:39:43 [decorators.py:333] "
                                  "[backbone] Compiling model again due to a load failure from /c/rank_1_0/model, "
                                  "reason: 'function' object has no attribute 'finalize_loading'"), *CPU[100:]]
    assert startup_phases(failed, CPU_READY_S).compile_cache == "unloadable"


CPU_INDUCTOR = parse_stamped((Path(__file__).parents[1] / "data" / "startup-cpu-tp2-inductor.log").read_text())


def test_a_cpu_start_without_aot_compilation_compiles_inside_its_warm_up_run():
    # vLLM 0.32's CPU build with VLLM_USE_AOT_COMPILE=0 (a user's choice; measured and not made
    # autotune's default, docs/startup.md), an empty
    # cache (benchmarks/startup.py --fresh-caches): no line says "compiled"; torch.compile runs
    # between "Warming up model for the compilation" and the slower rank's "Warming up done".
    spans = phase_spans(CPU_INDUCTOR, 67.6)
    assert spans["compile_s"] == (38.467, 62.409)
    assert "warmup_s" not in spans
    p = startup_phases(CPU_INDUCTOR, 67.6)
    assert p.unnamed_s < 0.1 * 67.6 and p.compile_cache == ""  # the log does not say; the cache growth does


def test_a_phase_whose_lines_are_missing_leaves_its_seconds_unnamed_not_to_a_neighbour():
    without_load = [x for x in CPU if "Starting to load model" not in x.text]
    p = startup_phases(without_load, CPU_READY_S)
    full = startup_phases(CPU, CPU_READY_S)
    assert (p.workers_s, p.weights_s) == (0.0, 0.0)
    assert p.unnamed_s == pytest.approx(full.unnamed_s + full.workers_s + full.weights_s)


def test_lines_after_ready_do_not_move_a_phase():
    late = [*CPU, LogLine(80.0, "(EngineCore pid=1) INFO 12-04 20:26:09 [core.py:402] init engine "
                                "(profile, create kv cache, warmup model) took 99.00 s")]
    assert startup_phases(late, CPU_READY_S) == startup_phases(CPU, CPU_READY_S)


GPU = [LogLine(t, text) for t, text in [
    (20.0, "(APIServer pid=1) INFO 12-04 10:00:01 [api_utils.py:347] version 0.32.0"),
    (41.0, "(APIServer pid=1) INFO 12-04 10:00:22 [model.py:733] Resolved architecture: X"),
    (61.0, "(EngineCore pid=2) INFO 12-04 10:00:42 [core.py:133] Initializing a V1 LLM engine"),
    (63.0, "(EngineCore pid=2) INFO 12-04 10:00:44 [gpu_model_runner.py] Starting to load model m..."),
    (70.0, "(EngineCore pid=2) INFO 12-04 10:00:51 [gpu_model_runner.py] Model loading took 1 GiB"),
    (70.5, "(EngineCore pid=2) INFO 12-04 10:00:51 [monitor.py:40] Starting torch.compile"),
    (82.0, "(EngineCore pid=2) INFO 12-04 10:01:03 [monitor.py] torch.compile took 11.40 s in total"),
    (83.0, "(EngineCore pid=2) INFO 12-04 10:01:04 [monitor.py] Initial profiling/warmup run took 1 s"),
    (84.0, "(EngineCore pid=2) INFO 12-04 10:01:05 [gpu_worker.py] Available KV cache memory: 100 GiB"),
    (86.0, "(EngineCore pid=2) INFO 12-04 10:01:07 [gpu_worker.py] Compile and warming up model for size 8"),
    (88.0, "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):   0%|"),
    (89.0, "(EngineCore pid=2) INFO 12-04 10:01:10 [gpu_model_runner.py] Graph capturing finished in 1 secs"),
    (187.0, "(EngineCore pid=2) INFO 12-04 10:02:48 [jit_monitor.py:84] Kernel JIT monitor activated"),
    (187.5, "(EngineCore pid=2) INFO 12-04 10:02:48 [core.py] init engine (profile, create kv cache, "
            "warmup model) took 120 s"),
    (196.0, "INFO:     Application startup complete."),
]]


def test_a_gpu_start_names_kernel_jit_graph_capture_and_the_sampler_jit_after_it():
    p = startup_phases(GPU, 197.0)
    assert p == StartupPhases(
        imports_s=20.0, config_s=21.0, engine_s=20.0, workers_s=2.0, weights_s=7.0,
        compile_s=11.5, warmup_s=1.0, kv_cache_s=2.0, jit_s=2.0, cuda_graphs_s=1.0,
        after_graphs_s=98.0, api_server_s=8.5, first_completion_s=1.0,
        unnamed_s=2.0, compile_cache="")  # 70-70.5, 83-84, 187-187.5


# The wording of a first start on a fresh H100 (2026-12-05, vLLM 0.26.0, moe-25g; the log was
# lost with the machine, so the stamps here are made up): FlashInfer builds the sampler's
# kernels with ninja after the profiling run, and says nothing more until vLLM's next record.
FIRST_GPU_START = [LogLine(t, text) for t, text in [
    (80.0, "(EngineCore pid=2) INFO 12-05 15:18:00 [gpu_worker.py] Initial profiling/warmup run took 5.87 s"),
    (81.0, "ninja: Entering directory `/root/.cache/autotune/flashinfer/.cache/flashinfer/0.6.14/90a/"
           "cached_ops/sampling'"),
    (82.0, "[1/4] /usr/local/cuda/bin/nvcc ... -c csrc/sampling.cu -o sampling.cuda.o"),
    (300.0, "[4/4] c++ sampling.cuda.o renorm.cuda.o -shared -o sampling.so"),
    (301.0, "(EngineCore pid=2) INFO 12-05 15:21:41 [gpu_worker.py] Profiling CUDA graph memory: ..."),
    (302.0, "(EngineCore pid=2) INFO 12-05 15:21:42 [gpu_worker.py] Available KV cache memory: 40 GiB"),
]]


def test_a_first_gpu_start_names_flashinfers_kernel_build_from_ninja_to_vllms_next_line():
    p = startup_phases(FIRST_GPU_START, 302.0)
    assert p.flashinfer_jit_s == 220.0  # 81-301: ninja's first line to the next record of vLLM's
    assert p.unnamed_s < 82.0  # the gap before it, not the build, is what stays unnamed


def test_flashinfers_own_log_lines_bound_its_kernel_build_where_it_writes_them():
    logged = [LogLine(81.0, "2026-12-05 15:18:01,000 - INFO - flashinfer.jit: Loading JIT ops: sampling"),
              LogLine(250.0, "2026-12-05 15:20:50,000 - INFO - flashinfer.jit: Finished loading JIT ops: "
                             "sampling")]
    p = startup_phases([FIRST_GPU_START[0], *logged, *FIRST_GPU_START[4:]], 302.0)
    assert p.flashinfer_jit_s == 169.0


def test_an_older_vllm_that_announces_no_compile_and_no_warm_up_run_is_named_alike():
    # vLLM 0.26 (the H200's) says "takes" and logs neither "Starting torch.compile" nor the
    # warm-up run's time: compile starts when the weights are loaded, the profiling run ends
    # when the KV cache's memory is known.
    old = [LogLine(x.arrival_s, x.text.replace("took 11.40 s", "takes 11.40 s")) for x in GPU
           if "Starting torch.compile" not in x.text and "Initial profiling" not in x.text]
    p = startup_phases(old, 197.0)
    assert (p.compile_s, p.warmup_s) == (12.0, 2.0)
    assert p.unnamed_s == 0.5  # 187-187.5: the gaps the newer lines left are phases' now


def test_a_log_without_named_lines_leaves_all_but_the_launch_unnamed():
    p = startup_phases([LogLine(3.0, "INFO:     Started server process [1]")], 50.0)
    assert p.as_dict() == {"unnamed_s": 50.0}


def test_the_registry_names_each_phase_once_and_the_record_holds_each():
    keys = [p.key for p in PHASES]
    assert len(keys) == len(set(keys))
    assert set(keys) | {"unnamed_s", "compile_cache", "cache_added_mib", "launch"} == set(
        StartupPhases.__dataclass_fields__)


def test_stamped_lines_read_back_as_written():
    lines = [LogLine(0.5, "  indented text"), LogLine(12.25, "INFO 12-04 10:00:00 x")]
    assert parse_stamped(stamped_text(lines)) == lines


RECORDED = startup_phases(CPU, CPU_READY_S).as_dict()


def test_the_trial_table_shows_the_phases_that_took_most_of_the_start_and_the_line_every_one():
    from autotune.core.trial.outcome import TrialOutcome

    t = TrialOutcome(3, startup_s=CPU_READY_S, startup_phases=RECORDED)
    assert t.startup_text == "75 s: compile 29 miss, workers 20, imports 11"
    assert t.startup_detail == ("75 s: imports 11, engine 9, workers 20, compile 29 miss, warm-up 1, "
                                "KV cache 3, API server 1, unnamed 1")
    assert TrialOutcome(4).startup_text == "-"


def test_the_trial_table_with_phases_fits_80_columns_without_cutting_a_word(monkeypatch):
    import io

    from rich.console import Console

    import autotune.cli.common as common
    from autotune.cli.results import print_trials
    from autotune.core.analysis.study_data import StudyData, noise_of
    from autotune.core.trial.objectives import default_objectives
    from autotune.core.trial.outcome import ProfileResult, TrialOutcome
    from autotune.core.workload.profiles import get_profile

    screen = io.StringIO()
    monkeypatch.setattr(common, "out", Console(width=80, file=screen))
    run = {"mean_e2el_ms": 1234.5, "output_throughput": 1700.0}
    results = {p: ProfileResult(p, (run,)) for p in ("low-concurrency", "high-concurrency")}
    trials = [TrialOutcome(n, params={"max_num_seqs": 64 * (n + 1)}, results=results,
                           startup_s=CPU_READY_S, startup_phases=RECORDED) for n in range(2)]
    objectives = default_objectives((get_profile("low-concurrency"), get_profile("high-concurrency")))
    print_trials(StudyData(tuple(trials), objectives, noise_of(trials),
                                   defaults={"max_num_seqs": 256}))
    shown = screen.getvalue()
    assert max(len(line) for line in shown.splitlines()) <= 80
    words = set(shown.replace("│", " ").replace(",", " ").split())
    assert {"compile", "29", "miss", "workers", "imports"} <= words, shown


def test_the_report_gives_each_phases_median_over_the_deployments():
    from autotune.core.trial.outcome import TrialOutcome, startup_summary

    halved = {k: v / 2 if isinstance(v, float) else v for k, v in RECORDED.items()}
    trials = [TrialOutcome(n, startup_s=s, startup_phases=p)
              for n, (s, p) in enumerate([(CPU_READY_S, RECORDED), (CPU_READY_S / 2, halved),
                                          (CPU_READY_S, RECORDED)])] + [TrialOutcome(3)]
    assert startup_summary(trials) == ("the median of 3 deployments: " + trials[0].startup_detail.replace(
        "compile 29 miss", "compile 29") + " (compile cache: 3 miss)")
    assert startup_summary(trials[3:]) == "no deployment recorded its start-up phases"
