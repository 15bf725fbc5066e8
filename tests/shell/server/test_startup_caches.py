"""What every deployment of a study shares at start-up (shell.server.server): one folder of kernel
caches, and an environment whose part that enters vLLM's compile-cache key does not vary from
trial to trial. vLLM's key is read from the installed vLLM's source (its ``compile_factors``
hashes every VLLM_* variable but those it lists as ignored), without importing it."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from autotune.core.deployment.slots import Slot, make_slots
from autotune.shell.server.server import DeploymentSpec, ServerProcess, kernel_cache_env


def ignored_by_vllm_compile_key() -> set[str]:
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    tree = ast.parse((Path(spec.submodule_search_locations[0]) / "envs.py").read_text())
    factors = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "compile_factors")
    ignored = next(n for n in ast.walk(factors) if isinstance(n, ast.AnnAssign)
                   and getattr(n.target, "id", "") == "ignored_factors")
    return set(ast.literal_eval(ignored.value))


def environment(slot: Slot, trial: int) -> dict[str, str]:
    spec = DeploymentSpec("m", slot=slot, extra_env=(("AUTOTUNE_TRIAL", f"study:{trial}"),))
    server = ServerProcess(spec, api_key=f"at-key-{trial}")
    return server.environment()


def vllm_differences(a: dict[str, str], b: dict[str, str]) -> set[str]:
    return {k for k in a.keys() | b.keys() if k.startswith("VLLM_") and a.get(k) != b.get(k)}


def test_two_trials_on_one_slot_differ_in_no_variable_of_vllms_compile_key():
    slot = Slot("cpu", (0, 1), 2)
    one, two = environment(slot, 1), environment(slot, 2)
    assert vllm_differences(one, two) == set()
    # The fresh key per deployment goes in a private --config file: vLLM 0.32 leaves
    # VLLM_API_KEY out of its key, but 0.26 hashed it, and every start missed the cache.
    assert "VLLM_API_KEY" not in one


def test_gpu_slots_differ_only_outside_the_key_but_cpu_slots_in_their_core_binding():
    gpu = make_slots("gpu", [0, 1], 1)
    assert vllm_differences(environment(gpu[0], 1), environment(gpu[1], 1)) == set()
    cpu = make_slots("cpu", [0, 1, 2, 3], 2)
    differ = vllm_differences(environment(cpu[0], 1), environment(cpu[1], 1))
    # Measured fact, not a wish: each CPU slot compiles a configuration once for itself.
    assert differ == {"VLLM_CPU_OMP_THREADS_BIND"} and not differ & ignored_by_vllm_compile_key()


def test_kernel_caches_share_one_folder_whatever_the_environment_inherited(monkeypatch):
    assert kernel_cache_env({"AUTOTUNE_CACHE_DIR": "/c"}) == {
        "TRITON_CACHE_DIR": "/c/triton", "TORCHINDUCTOR_CACHE_DIR": "/c/inductor",
        "FLASHINFER_WORKSPACE_BASE": "/c/flashinfer"}
    # Importing torch in-process (the validator imports vLLM) writes this; no server inherits it.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_root")
    monkeypatch.setenv("XDG_CACHE_HOME", "/x")
    one, two = environment(Slot("cpu", (0, 1), 2), 1), environment(Slot("cpu", (2, 3), 2), 2)
    folders = {var: one[var] for var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                                         "FLASHINFER_WORKSPACE_BASE")}
    assert folders == {var: two[var] for var in folders} == {
        "TRITON_CACHE_DIR": "/x/autotune/triton", "TORCHINDUCTOR_CACHE_DIR": "/x/autotune/inductor",
        "FLASHINFER_WORKSPACE_BASE": "/x/autotune/flashinfer"}


def test_every_deployment_forks_its_engine_core_unless_the_user_chose_otherwise(monkeypatch):
    # Forked, the engine core inherits the API server's imports: -27% of a GPU start (issue #41).
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    assert environment(Slot("cpu", (0, 1), 2), 1)["VLLM_WORKER_MULTIPROC_METHOD"] == "fork"
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    assert environment(Slot("cpu", (0, 1), 2), 1)["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"


def test_vllms_cpu_build_spawns_its_engine_core_whatever_the_variable_says():
    # A fact of the installed vLLM, read from its source: the CPU platform's config check (run
    # in the API server before the engine core starts) sets spawn unconditionally, so FORK_ENV
    # changes nothing on CPU (measured: docs/startup.md, "Forking the engine core").
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    source = (Path(spec.submodule_search_locations[0]) / "platforms" / "cpu.py").read_text()
    assert 'os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"' in source
