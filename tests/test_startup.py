"""Where start-up time goes, read from vLLM's log (core.startup). The CPU lines are a real
vLLM 0.32 CPU-build log (TP=2); the GPU lines are the messages vLLM's GPU runner logs."""

from __future__ import annotations

import pytest

from autotune.core.deployment.startup import startup_phases

CPU_LOG = """\
(EngineCore pid=18998) INFO 12-04 14:25:30 [core.py:133] Initializing a V1 LLM engine (v0.32.0)
(Worker_TP0 pid=19009) INFO 12-04 14:25:37 [base_loader.py:82] Initializing model took 0.109812 seconds
(Worker_TP0 pid=19009) INFO 12-04 14:25:37 [default_loader.py:501] Loading weights took 0.01 seconds
(Worker_TP1 pid=19010) INFO 12-04 14:26:00 [decorators.py:743] [backbone] saved AOT compiled function to /c
(Worker_TP0 pid=19009) INFO 12-04 14:26:00 [monitor.py:91] [backbone] Initial profiling/warmup run took 0.04 s
(Worker_TP1 pid=19010) INFO 12-04 14:26:00 [monitor.py:91] [backbone] Initial profiling/warmup run took 0.06 s
(EngineCore) INFO 12-04 14:26:03 [core.py:402] init engine (profile, create kv cache, warmup model) took 25.33 s
"""


def test_a_cpu_start_up_compiles_ahead_of_time_and_the_rest_is_process_and_api_server():
    p = startup_phases(CPU_LOG, ready_s=38.0)
    assert (p.weights_s, p.compile_s, p.warmup_s, p.engine_init_s) == (0.01, 23.0, 0.06, 25.33)
    assert p.compile_cache == "miss"
    assert p.other_s == pytest.approx(38.0 - 25.33 - 0.119812)


def test_a_warm_compile_cache_is_seen_and_gpu_phases_are_read():
    log = CPU_LOG.replace("saved AOT compiled function to", "Directly load AOT compilation from path")
    assert startup_phases(log, 30.0).compile_cache == "hit"
    gpu = ("INFO 12-04 10:00:01 [backends.py] Compiling a graph for compile range (1, 8192) takes 31.50 s\n"
           "INFO 12-04 10:00:40 [monitor.py] torch.compile took 40.20 s in total\n"
           "INFO 12-04 10:01:10 [gpu_model_runner.py] Graph capturing finished in 12 secs, took 0.50 GiB\n")
    p = startup_phases(gpu, 120.0)
    assert (p.compile_s, p.cuda_graphs_s, p.compile_cache) == (40.2, 12.0, "miss")


def test_a_log_without_phases_says_nothing_rather_than_guessing():
    p = startup_phases("INFO:     Started server process [1]\n", 50.0)
    assert p.as_dict() == {}
