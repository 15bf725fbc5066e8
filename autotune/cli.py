"""The command line: parses flags, calls the layers below, prints, and owns exit codes.

Exit codes: 0 success; 1 a deployment, benchmark or study failed; 2 bad input (flag, file,
field), reported in one line before anything runs; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from autotune.core.flags import to_argv
from autotune.core.metrics import SloLimits, to_vllm_json
from autotune.core.model_info import ModelInfo, load_model_info
from autotune.core.profiles import PROFILES, ProfileOverrides, get_profile
from autotune.core.slots import Slot, make_slots, parse_device_list
from autotune.core.space import (
    ModelContext,
    inapplicable,
    load_references,
    load_space,
    resolve_references,
    space_size,
)
from autotune.errors import AutotuneError, ConfigError

console = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)

DEFAULT_SPACE = "search_spaces/reference.yaml"
DEFAULT_REFERENCES = "search_spaces/references.yaml"
DEFAULT_WORKDIR = "studies"
GENERATED_MODEL = "models/tiny-moe-mtp-trained-seed0"  # under the workdir


def _package_file(relative: str) -> str:
    """A shipped search-space file: from the working directory, else from the source tree."""
    if Path(relative).exists():
        return relative
    shipped = Path(__file__).resolve().parent.parent / relative
    return str(shipped) if shipped.exists() else relative


# ----------------------------------------------------------------------------- helpers


def _model_or_generate(model: str | None, workdir: Path, platform: str) -> ModelInfo:
    if model:
        return load_model_info(model)
    if platform != "cpu":
        raise ConfigError("--model is required on a GPU machine (a local folder or a cached hub id)")
    from autotune.shell.modelgen import make_model

    path = workdir / GENERATED_MODEL
    if (path / "config.json").exists():
        console.print(f"using the generated tiny model {path}")
        return load_model_info(str(path))
    console.print(f"no --model given and no GPU: generating a tiny MoE+MTP model in {path}, "
                  "trained so that its MTP head predicts (about a minute)")
    return make_model(path, kind="moe", mtp=True, seed=0, trained=True)


def _cpu_slot(tp: int, kv_cache_gib: float) -> Slot:
    cores = sorted(os.sched_getaffinity(0))
    per_rank = max(1, len(cores) // tp)
    return make_slots("cpu", cores, tp, per_rank=per_rank, kv_cache_gib=kv_cache_gib)[0]


def _slots(args: argparse.Namespace, tp: int, platform: str) -> list[Slot]:
    """The deployment slots the flags ask for: GPU sets of ``tp`` GPUs from --gpus (default the
    first ``tp``), or CPU core sets from --cores (default one slot over every core)."""
    gpus, cores = getattr(args, "gpus", None), getattr(args, "cores", None)
    if platform == "cuda":
        if cores:
            raise ConfigError("--cores is for vLLM's CPU build; on GPUs use --gpus 0,1,...")
        return make_slots("cuda", parse_device_list(gpus, "--gpus") if gpus else list(range(tp)), tp)
    if gpus:
        raise ConfigError(f"--gpus {gpus}: this is vLLM's CPU build (no GPU); use --cores 0,1,...")
    if not cores:
        return [_cpu_slot(tp, args.kv_cache_gib)]
    ids = parse_device_list(cores, "--cores")
    allowed = sorted(os.sched_getaffinity(0))
    if not set(ids) <= set(allowed):
        raise ConfigError(f"--cores {cores}: this process may use cores {','.join(map(str, allowed))}")
    return make_slots("cpu", ids, tp, per_rank=args.cores_per_rank, kv_cache_gib=args.kv_cache_gib)


def _slot(args: argparse.Namespace, tp: int, platform: str) -> Slot:
    return _slots(args, tp, platform)[0]


def _overrides(args: argparse.Namespace) -> ProfileOverrides:
    return ProfileOverrides(
        num_prompts=args.num_prompts, input_len=args.input_len, output_len=args.output_len,
        max_concurrency=getattr(args, "max_concurrency", None),
        request_rate=getattr(args, "request_rate", None),
        burstiness=getattr(args, "burstiness", None),
        timeout_s=getattr(args, "time_limit", None),
    )


def _add_profile_overrides(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("profile overrides (shrink a run for a quick look)")
    g.add_argument("--num-prompts", type=int, help="measured requests per run")
    g.add_argument("--input-len", type=int, help="prompt tokens")
    g.add_argument("--output-len", type=int, help="output tokens")


def _add_deploy_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("deployment")
    g.add_argument("--gpus", help="GPU build: GPU ids, e.g. 0,1; `run` with more GPUs than one "
                   "deployment needs runs one trial per slot of --tp GPUs at once (0-7: 4 slots)")
    g.add_argument("--cores", help="CPU build: core ids, split into slots of --tp ranks x "
                   "--cores-per-rank cores, one trial per slot at once (default: one slot, all cores)")
    g.add_argument("--cores-per-rank", type=int, default=1, help="CPU build, with --cores (default 1)")
    g.add_argument("--kv-cache-gib", type=float, default=1.0,
                   help="CPU build only: VLLM_CPU_KVCACHE_SPACE (default 1)")
    g.add_argument("--startup-timeout", type=float, default=600.0, help="seconds (default 600)")
    g.add_argument("--entrypoint", help="command that starts vLLM, e.g. 'vllm serve' "
                   "(default: vllm serve for the GPU build, the module entry point for the CPU build)")


def _entrypoint(args: argparse.Namespace):
    from autotune.shell.server import resolve_entrypoint

    return resolve_entrypoint(args.entrypoint.split() if args.entrypoint else None)


def _fmt(value: float, digits: int = 1) -> str:
    return "inf" if math.isinf(value) else f"{value:,.{digits}f}"


# ----------------------------------------------------------------------------- commands


def cmd_make_model(args: argparse.Namespace) -> int:
    from autotune.shell.modelgen import make_model

    t0 = time.monotonic()
    info = make_model(args.out, kind=args.kind, mtp=args.mtp, seed=args.seed, trained=args.trained)
    out.print(f"wrote {info.architecture} ({'MoE, ' + str(info.num_experts) + ' experts' if info.is_moe else 'dense'}"
              f"{', MTP layers: ' + str(info.mtp_layers) if info.has_mtp else ''}) to {args.out} "
              f"in {time.monotonic() - t0:.1f} s")
    report = Path(args.out) / "training.json"
    if args.trained and report.exists():
        out.print(f"training: {report.read_text().strip()}", soft_wrap=True)
    return 0


def cmd_check_deploy(args: argparse.Namespace, vllm_flags: Sequence[str]) -> int:
    from autotune.shell.server import Deployment, DeploymentSpec, detect_platform, session_pids

    platform = detect_platform()
    model = _model_or_generate(args.model, Path(args.workdir), platform)
    options = ["--tensor-parallel-size", str(args.tp)]
    if args.max_model_len:
        options += ["--max-model-len", str(args.max_model_len)]
    options += list(vllm_flags)
    log = Path(args.workdir) / "check-deploy" / f"server-{int(time.time())}.log"
    spec = DeploymentSpec(
        model=model.name, options=tuple(options), slot=_slot(args, args.tp, platform),
        entrypoint=_entrypoint(args), startup_timeout_s=args.startup_timeout, log_path=log,
    )
    t0 = time.monotonic()
    dep = Deployment(spec, on_phase=lambda ph: console.print(
        f"[{time.monotonic() - t0:6.1f} s] {ph}"))
    with dep:
        import httpx

        resp = httpx.post(
            f"{dep.url}/v1/completions",
            json={"model": dep.model_name, "prompt": args.prompt, "max_tokens": 16,
                  "temperature": 0.0},
            headers={"Authorization": f"Bearer {dep.api_key}"}, timeout=120,
        )
        resp.raise_for_status()
        text = resp.json()["choices"][0]["text"]
        out.print(f"ready in {dep.startup_s:.1f} s on {spec.slot.describe() if spec.slot else '?'}; "
                  f"memory: {dep.rss_bytes() / 2**30:.2f} GiB RSS over "
                  f"{len(session_pids(dep.pid))} processes")
        out.print(f"completion: {text!r}")
    report = dep.teardown
    assert report is not None
    out.print(f"torn down in {report.seconds:.1f} s; processes left: {len(report.leftover_pids)}; "
              f"port free: {report.port_free}; log: {log}")
    return 0 if report.clean else 1


def _summary_table(title: str, rows: dict[str, dict]) -> Table:
    table = Table(title=title)
    table.add_column("metric")
    for name in rows:
        table.add_column(name, justify="right")
    keys = ["completed", "failed", "duration", "request_throughput", "output_throughput",
            "total_token_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
            "p99_tpot_ms", "mean_itl_ms", "mean_e2el_ms", "p99_e2el_ms",
            "max_concurrent_requests", "spec_decode_acceptance_rate"]
    for key in keys:
        if any(key in r for r in rows.values()):
            table.add_row(key, *[_fmt(float(r[key]), 2) if isinstance(r.get(key), int | float)
                                 else "-" for r in rows.values()])
    return table


def cmd_bench(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from autotune.shell.client import Target, run_profile

    vocab = args.vocab_size
    if vocab is None:
        vocab = load_model_info(args.model).vocab_size
    api_key = os.environ.get("VLLM_API_KEY") or os.environ.get("OPENAI_API_KEY", "")
    target = Target(url=args.url, model=args.model, api_key=api_key, endpoint=args.endpoint,
                    request_timeout_s=args.request_timeout)
    text_prompt = None
    if args.endpoint == "chat":  # chat takes text: decode the random ids with the tokenizer
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model)
        text_prompt = tokenizer.decode
    slo = SloLimits(args.goodput_ttft_ms, args.goodput_tpot_ms, args.goodput_e2el_ms)
    rows = {}
    for name in args.profile:
        profile = get_profile(name, _overrides(args))
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task(f"{name}", total=profile.num_prompts)
            run = run_profile(target, profile, seed=args.seed, vocab_size=vocab, slo=slo,
                              text_prompt=text_prompt,
                              on_progress=lambda done, total, t=task: bar.update(t, completed=done))
        rows[name] = to_vllm_json(run.summary)
        if not run.summary.valid:
            console.print(f"[red]{name}: invalid run: {run.summary.invalid_reason}[/red]")
    out.print(_summary_table("benchmark", rows))
    if args.output:
        Path(args.output).write_text(json.dumps(rows if len(rows) > 1 else
                                                next(iter(rows.values())), indent=2) + "\n")
        out.print(f"wrote {args.output}")
    return 0 if all(r["valid"] for r in rows.values()) else 1


def cmd_validate(args: argparse.Namespace) -> int:
    from autotune.shell.validation import VllmValidator, vllm_importable

    space = load_space(args.space)
    model = load_model_info(args.model)
    max_len = args.max_model_len or space.deployment.max_model_len or model.native_context
    ctx = ModelContext(model, max_len)
    skip = inapplicable(space, ctx)
    table = Table(title=f"{space.name}: {space.path}")
    for col in ("parameter", "domain", "default", "vLLM", "applies"):
        table.add_column(col)
    for p in space.parameters:
        domain = (str(list(p.choices)) if p.type == "categorical" else
                  "[false, true]" if p.type == "bool" else
                  f"{p.type} {p.low:g}..{p.high:g}{' log' if p.log else ''}")
        where = p.flag or f"{p.json.flag} JSON" if p.json else p.flag
        table.add_row(p.name, domain, str(p.default), where, skip.get(p.name, "yes"))
    out.print(table)
    out.print(f"configurations (upper bound over applicable parameters): "
              f"{space_size(space, ctx):g}")
    if not vllm_importable():
        out.print("vLLM is not importable here: flags were not checked by vLLM's parser")
        return 0
    validator = VllmValidator()
    bad = 0
    if args.references:
        refs = load_references(args.references, space)
        for ref in resolve_references(space, ctx, refs.configs):
            if ref.skipped:
                out.print(f"reference {ref.name}: skipped, {ref.skipped}")
                continue
            try:
                validator.check(model.name, to_argv(space, ctx, ref.params))
                out.print(f"reference {ref.name}: accepted by vLLM")
            except AutotuneError as exc:
                bad += 1
                out.print(f"reference {ref.name}: rejected by vLLM: {exc}")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=args.seed))
    from autotune.core.space import sample

    rejected: dict[str, int] = {}
    for _ in range(args.samples):
        trial = study.ask()
        params = sample(space, ctx, trial)
        try:
            validator.check(model.name, to_argv(space, ctx, params))
        except AutotuneError as exc:
            rejected[str(exc)] = rejected.get(str(exc), 0) + 1
        study.tell(trial, 0.0)
    out.print(f"{args.samples} random samples: {args.samples - sum(rejected.values())} accepted "
              f"by vLLM, {sum(rejected.values())} rejected")
    for message, count in sorted(rejected.items(), key=lambda kv: -kv[1]):
        out.print(f"  {count} x {message}")
    return 1 if bad else 0


# ----------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autotune", description="Find the best vLLM deployment for a workload.")
    parser.add_argument("--workdir", default=DEFAULT_WORKDIR,
                        help="home of study storage, artifacts and generated models (default studies)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("make-model", help="write a tiny random-weight model (no downloads)")
    p.add_argument("out")
    p.add_argument("--kind", choices=("dense", "moe"), default="dense")
    p.add_argument("--mtp", action="store_true", help="add one MTP layer (needs --kind moe)")
    p.add_argument("--trained", action="store_true",
                   help="train base model and MTP head on a predictable synthetic language "
                        "(needs --kind moe --mtp; about a minute on CPU)")
    p.add_argument("--seed", type=int, default=0)

    p = sub.add_parser("check-deploy", help="deploy once, print readiness and one completion, tear down; "
                       "unknown flags are passed to vLLM")
    p.add_argument("--model", help="model folder or cached hub id (default on CPU: a generated tiny model)")
    p.add_argument("--tp", type=int, default=2, help="tensor parallel size (default 2)")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--prompt", default="t3 t4 t5 t6")
    _add_deploy_args(p)

    p = sub.add_parser("bench", help="benchmark an already running server "
                       "(API key from VLLM_API_KEY or OPENAI_API_KEY)")
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True, help="served model name (and config source)")
    p.add_argument("--profile", action="append", choices=sorted(PROFILES), required=True)
    p.add_argument("--vocab-size", type=int, help="default: from the model's config.json")
    p.add_argument("--max-concurrency", type=int)
    p.add_argument("--request-rate", type=float, help="requests/s (default: inf)")
    p.add_argument("--burstiness", type=float, help="gamma shape of arrivals (1.0: Poisson)")
    p.add_argument("--time-limit", type=float, help="seconds for the whole measured run")
    p.add_argument("--request-timeout", type=float, default=300.0, help="seconds per request")
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions",
                   help="chat sends the prompts as text, decoded with the model's tokenizer "
                        "(their token count is then approximate)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", help="write the results as JSON with vllm bench serve's keys")
    for name in ("ttft", "tpot", "e2el"):
        p.add_argument(f"--goodput-{name}-ms", type=float, help=f"goodput limit on {name.upper()}")
    _add_profile_overrides(p)

    p = sub.add_parser("validate", help="check a search space against vLLM's own parser")
    p.add_argument("space")
    p.add_argument("--model", required=True)
    p.add_argument("--references", help="reference configs file to check too")
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--samples", type=int, default=50, help="random samples to check (default 50)")
    p.add_argument("--seed", type=int, default=0)

    from autotune.cli_results import add_results_parsers
    from autotune.cli_run import add_run_parser

    add_run_parser(sub)
    add_results_parsers(sub)
    return parser


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    # Ctrl-C must reach a running trial even when autotune was started with SIGINT ignored
    # (as background jobs are); SIGTERM is handled alike. The trial tears its server down.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "check-deploy":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.command == "make-model":
            return cmd_make_model(args)
        if args.command == "check-deploy":
            return cmd_check_deploy(args, extra)
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "validate":
            return cmd_validate(args)
        if args.command in ("run", "worker"):
            from autotune.cli_run import cmd_run, cmd_worker

            return cmd_run(args) if args.command == "run" else cmd_worker(args)
        from autotune.cli_results import COMMANDS

        return COMMANDS[args.command](args)
    except ConfigError as exc:
        print(f"autotune: error: {exc}", file=sys.stderr)  # one line, never wrapped or styled
        return 2
    except AutotuneError as exc:
        console.print(f"autotune: {type(exc).__name__}: {exc}")
        log_tail = getattr(exc, "log_tail", "")
        if log_tail:
            console.print("--- server log tail ---\n" + "\n".join(log_tail.splitlines()[-15:]))
        return 1
    except KeyboardInterrupt:
        console.print("autotune: interrupted")
        return 130



