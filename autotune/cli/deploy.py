"""`autotune make-model | make-workload | check-deploy | bench | validate`: one model, one deployment, one
server or one space at a time."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from autotune.cli.common import (
    add_deploy_args,
    add_profile_args,
    add_profile_overrides,
    asked_profiles,
    console,
    entrypoint_of,
    out,
    print_table,
    slots_of,
)
from autotune.core.metrics.summary import SloLimits, to_vllm_json
from autotune.core.space.search_space import inapplicable
from autotune.core.workload.datasets.synthetic import WORKLOAD_KINDS
from autotune.errors import ConfigError
from autotune.modelgen.constructed import SHAPES
from autotune.shell.bench.files import read_model_info, read_space
from autotune.study.output.tables import space_table, summary_table


def cmd_make_model(args: argparse.Namespace) -> int:
    from autotune.modelgen.checkpoints import check_model_flags, made_lines, make_model
    from autotune.modelgen.constructed import made_line, make_constructed

    t0 = time.monotonic()
    check_model_flags(kind=args.kind, mtp=args.mtp, trained=args.trained,
                      constructed=args.constructed, mtp_acceptance=args.mtp_acceptance,
                      reuse_base=args.reuse_base)
    if args.constructed:
        info = make_constructed(args.out, shape=args.constructed, mtp_acceptance=args.mtp_acceptance,
                                seed=args.seed, reuse_base=args.reuse_base)
        out.print(made_line(info, args.out, time.monotonic() - t0, shape=args.constructed,
                            mtp_acceptance=args.mtp_acceptance), soft_wrap=True)
        return 0
    info = make_model(args.out, kind=args.kind, mtp=args.mtp, seed=args.seed, trained=args.trained)
    for line in made_lines(info, args.out, time.monotonic() - t0, trained=args.trained):
        out.print(line, soft_wrap=True)
    return 0


def cmd_check_deploy(args: argparse.Namespace, vllm_flags: Sequence[str]) -> int:
    from autotune.shell.server.install import detect_platform
    from autotune.shell.server.server import DeploymentSpec, serve_once
    from autotune.study.run.study_plan import model_info

    platform = detect_platform()
    model = model_info(args.model, Path(args.workdir), say=console.print)
    options = ["--tensor-parallel-size", str(args.tp)]
    if args.max_model_len:
        options += ["--max-model-len", str(args.max_model_len)]
    spec = DeploymentSpec(
        model=model.name, options=(*options, *vllm_flags), slot=slots_of(args, args.tp, platform)[0],
        entrypoint=entrypoint_of(args), startup_timeout_s=args.startup_timeout,
        log_path=Path(args.workdir) / "check-deploy" / f"server-{int(time.time())}.log")
    return 0 if serve_once(spec, args.prompt, say=out.print, progress=console.print) else 1


def cmd_bench(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from autotune.shell.bench.client import Target, bench_inputs, check_answers, checked_url, run_profile

    url = checked_url(args.url)
    inputs = bench_inputs(asked_profiles(args, args.profile), model=args.model,
                          tokenizer=args.tokenizer, vocab_size=args.vocab_size,
                          endpoint=args.endpoint, max_model_len=args.max_model_len)
    api_key = os.environ.get("VLLM_API_KEY") or os.environ.get("OPENAI_API_KEY", "")
    target = Target(url=url, model=args.model, api_key=api_key, endpoint=args.endpoint,
                    request_timeout_s=args.request_timeout)
    slo = SloLimits(args.goodput_ttft_ms, args.goodput_tpot_ms, args.goodput_e2el_ms)
    rows = {}
    check_answers(target)
    for profile in inputs.profiles:
        name = profile.name
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task(f"{name}", total=profile.num_prompts)
            run = run_profile(target, profile, seed=args.seed, source=inputs.sources[name], slo=slo,
                              text_prompt=inputs.text_prompt,
                              on_progress=lambda done, total, t=task: bar.update(t, completed=done))
        rows[name] = to_vllm_json(run.summary)
        if not run.summary.valid:
            console.print(f"[red]{name}: invalid run: {run.summary.invalid_reason}[/red]")
    measured = {name: r for name, r in rows.items() if r["completed"]}
    if measured:  # a run where nothing succeeded has no metrics to show
        print_table(lambda width: summary_table("benchmark", measured, width))
    if args.output:
        Path(args.output).write_text(json.dumps(rows if len(rows) > 1 else
                                                next(iter(rows.values())), indent=2) + "\n")
        out.print(f"wrote {args.output}")
    return 0 if all(r["valid"] for r in rows.values()) else 1


def cmd_validate(args: argparse.Namespace) -> int:
    from autotune.study.run.session import vllm_validator
    from autotune.study.run.space_check import validate_space
    from autotune.study.run.study_plan import model_context

    space, model = read_space(args.space), read_model_info(args.model)
    validator, space = vllm_validator(space, out.print)
    ctx = model_context(space, model, args.max_model_len)
    print_table(lambda width: space_table(space, inapplicable(space, ctx), width))
    return 1 if validate_space(validator, space, ctx, references=args.references,
                               samples=args.samples, seed=args.seed, say=out.print) else 0


def cmd_make_workload(args: argparse.Namespace) -> int:
    from autotune.core.workload.datasets.synthetic import lines, profile_text

    out = Path(args.out)
    if args.requests < 1 or args.scale <= 0 or (args.rate is not None and args.rate <= 0):
        raise ConfigError("--requests must be >= 1, --scale and --rate > 0")
    if not out.parent.is_dir():
        raise ConfigError(f"{args.out}: folder {out.parent}/ does not exist")
    made = lines(args.kind, args.requests, args.seed, args.scale, args.rate)
    profile = out.with_suffix(".profile.yaml")
    out.write_text("\n".join(made) + "\n")
    profile.write_text(profile_text(args.kind, out.name, requests=args.requests, seed=args.seed,
                                    scale=args.scale))
    console.print(f"wrote {args.requests} {args.kind} requests to {out} and the profile "
                  f"{args.kind!r} to {profile}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("make-workload", help="write a sample workload file (JSONL or Mooncake "
                       "trace) whose lengths follow public traces, and a profile for it")
    p.add_argument("out", help="the file to write (.jsonl); its profile goes beside it")
    p.add_argument("--kind", choices=WORKLOAD_KINDS, required=True,
                   help="chat: ShareGPT lengths, shared system prompts; rag: Azure conversation "
                        "lengths, shared documents; agentic: a Mooncake trace of sessions")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scale", type=float, default=1.0,
                   help="multiply every length (e.g. 0.25 for a tiny model on CPU)")
    p.add_argument("--rate", type=float, help="requests/s: add arrival times (agentic: default 0.5)")
    p.set_defaults(handler=cmd_make_workload)

    p = sub.add_parser("make-model", help="write a tiny random-weight model (no downloads)")
    p.add_argument("out")
    p.add_argument("--kind", choices=("dense", "moe"), default="dense")
    p.add_argument("--mtp", action="store_true", help="add one MTP layer (needs --kind moe)")
    p.add_argument("--trained", action="store_true",
                   help="train base model and MTP head on a predictable synthetic language "
                        "(needs --kind moe --mtp; seconds on 2 cores)")
    p.add_argument("--constructed", metavar="SHAPE", choices=tuple(SHAPES),
                   help="constructed weights instead of random or trained ones: a GLM-4-MoE+MTP "
                        "model that follows the synthetic language exactly and computes at full "
                        "cost; tiny (CPU check) or moe-25g (25 GB, for a GPU)")
    p.add_argument("--mtp-acceptance", type=float,
                   help="with --constructed: share of tokens for which the MTP head is right")
    p.add_argument("--reuse-base", metavar="DIR", help="with --constructed: link the base "
                   "shards of a constructed model of the same shape and seed (only MTP differs)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(handler=cmd_make_model)

    p = sub.add_parser("check-deploy", help="deploy once, print readiness and one completion, tear down; "
                       "unknown flags are passed to vLLM")
    p.add_argument("--model", help="model folder or cached hub id (default on CPU: a generated tiny model)")
    p.add_argument("--tp", type=int, default=2, help="tensor parallel size (default 2)")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--prompt", default="t3 t4 t5 t6")
    add_deploy_args(p)
    p.set_defaults(handler=cmd_check_deploy, passes_vllm_flags=True)

    p = sub.add_parser("bench", help="benchmark an already running server "
                       "(API key from VLLM_API_KEY or OPENAI_API_KEY)")
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True, help="served model name (and config source)")
    add_profile_args(p, required=True)
    p.add_argument("--vocab-size", type=int, help="with --token-ids: the ids drawn are below it "
                   "(default: from the model's config.json)")
    p.add_argument("--tokenizer", help="model folder whose tokenizer makes and counts text prompts "
                   "(default: --model where it is a local folder)")
    p.add_argument("--max-model-len", type=int, default=1 << 20,
                   help="the server's context: requests of a dataset longer than it are refused "
                        "before sending")
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
    add_profile_overrides(p)
    p.set_defaults(handler=cmd_bench)

    p = sub.add_parser("validate", help="check a search space against vLLM's own parser")
    p.add_argument("space")
    p.add_argument("--model", required=True)
    p.add_argument("--references", help="reference configs file to check too")
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--samples", type=int, default=50, help="random samples to check (default 50)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(handler=cmd_validate)
