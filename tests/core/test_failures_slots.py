"""Failure classification, device slots and GPU memory release: the small pure pieces."""

from __future__ import annotations

import pytest

from autotune.core.deployment import failures
from autotune.core.deployment.failures import classify_startup_exit, engine_died, vllm_message
from autotune.core.deployment.slots import Slot, make_slots, parse_device_list
from autotune.errors import ConfigError

ARGPARSE_LOG = "usage: api_server.py [-h]\napi_server.py: error: argument --max-num-seqs: invalid int value: 'x'\n"
PYDANTIC_LOG = (
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig\n"
    "  Value error, Total number of attention heads (4) must be divisible by tensor parallel size (3).\n"
)
WORKER_LOG = (
    "(Worker_TP0 pid=2955) ERROR 12-02 15:06:52 [multiproc_executor.py:953] AttributeError: "
    "'Glm4MoeConfig' object has no attribute 'head_dim'\n"
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
)


@pytest.mark.parametrize(
    ("code", "log", "expected"),
    [
        (2, ARGPARSE_LOG, failures.CONFIG_REJECTED),
        (1, PYDANTIC_LOG, failures.CONFIG_REJECTED),
        (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB", failures.OUT_OF_MEMORY),
        (-9, "Loading weights", failures.OUT_OF_MEMORY),
        (1, WORKER_LOG, failures.STARTUP_CRASH),
        (1, "OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): "
            "address already in use", failures.HOST_FAULT),
        (1, "OSError: [Errno 28] No space left on device: '/root/.cache/vllm'", failures.HOST_FAULT),
    ],
    ids=["argparse", "pydantic", "cuda-oom", "sigkill", "worker-crash", "port-taken", "disk-full"],
)
def test_startup_exits_are_classified(code, log, expected):
    assert classify_startup_exit(code, log).failure == expected


def test_every_failure_class_is_one_record_stored_by_its_name_and_the_table_is_derived_from_them():
    table = failures.failure_table().splitlines()
    assert len(table) == 2 + len(failures.FAILURE_CLASSES)
    for name, record in failures.FAILURE_CLASSES.items():
        assert failures.failure_class(name) is record and record.name == name
        (row,) = [r for r in table if r.startswith(f"| `{name}` |")]
        assert record.seen_as in row and record.remedy in row
        assert ("infeasible" in row) is record.blames_configuration
    with pytest.raises(ValueError, match="failure class 'gone': valid: config_rejected, "):
        failures.failure_class("gone")


def test_the_documented_failure_table_is_the_one_the_registry_renders():
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "deployments.md"
    assert failures.failure_table() in page.read_text()


def test_only_failures_the_configuration_causes_are_held_against_it():
    ours = {f.name for f in failures.FAILURE_CLASSES.values() if not f.blames_configuration}
    assert ours == {"interrupted", "internal_error", "host_fault"}


def test_the_message_is_vllms_root_cause_not_the_generic_wrapper():
    assert vllm_message(WORKER_LOG) == "AttributeError: 'Glm4MoeConfig' object has no attribute 'head_dim'"
    assert "must be divisible by tensor parallel size (3)" in vllm_message(PYDANTIC_LOG)


def test_engine_death_is_recognised():
    assert engine_died("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.")
    assert engine_died("Worker proc VllmWorker-1 died unexpectedly, shutting down executor.")
    assert not engine_died("INFO Avg prompt throughput: 10 tokens/s")


def test_gpu_pairs_from_eight_gpus_and_odd_counts():
    slots = make_slots("gpu", list(range(8)), 2)
    assert [s.env()["CUDA_VISIBLE_DEVICES"] for s in slots] == ["0,1", "2,3", "4,5", "6,7"]
    assert [s.devices for s in make_slots("gpu", [0, 1, 2], 2)] == [(0, 1)]
    assert [s.devices for s in make_slots("gpu", list(range(8)), 4)] == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_cpu_slots_bind_one_core_range_per_rank():
    assert Slot("cpu", (0, 1), 2).env()["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    assert Slot("cpu", (0, 1, 2, 3), 2).env()["VLLM_CPU_OMP_THREADS_BIND"] == "0-1|2-3"
    assert [s.env()["VLLM_CPU_OMP_THREADS_BIND"] for s in make_slots("cpu", [0, 1], 1)] == ["0", "1"]


def test_too_few_devices_and_bad_lists_are_config_errors():
    with pytest.raises(ConfigError, match="tensor parallel 2 needs 2 devices per deployment, got 1"):
        make_slots("gpu", [0], 2)
    assert parse_device_list("0-3,6", "--gpus") == [0, 1, 2, 3, 6]
    with pytest.raises(ConfigError, match="--gpus 'a,b'"):
        parse_device_list("a,b", "--gpus")


def test_gpu_memory_counts_as_released_within_the_tolerance_and_waits_for_it():
    from autotune.shell.server.gpu import released, wait_released

    baseline = {0: 1000, 1: 1000}
    assert released(baseline, {0: 1200, 1: 1000}, tolerance_mib=512)
    assert not released(baseline, {0: 40_000, 1: 1000}, tolerance_mib=512)
    readings = iter([{0: 40_000, 1: 1000}, {0: 9_000, 1: 1000}, {0: 1100, 1: 1000}])
    ok, last = wait_released(baseline, read=lambda ids: next(readings), poll_s=0.0)
    assert ok and last == {0: 1100, 1: 1000}
