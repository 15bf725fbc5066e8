"""vLLM's own benchmark client (``vllm bench serve``), driven in-process, to cross-check ours.

Used by the client tests and ``benchmarks/experiments/client_overhead.py``: same server, same lengths,
request count and concurrency, and the numbers under the same keys.
"""

from __future__ import annotations

import contextlib
import io
import os
from typing import Any

from autotune.core.metrics.summary import RequestResult
from autotune.core.workload.profiles import WorkloadProfile


def run_vllm_bench(
    url: str, model: str, api_key: str, profile: WorkloadProfile, *, seed: int, quiet: bool = True,
    dataset_path: str | None = None, tokenizer: str | None = None,
) -> dict[str, Any]:
    """One ``vllm bench serve`` run with the random dataset, or with a JSONL file as its
    ``custom`` dataset (prompts as they are: no chat template); returns its result dict."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    argv = [
        "--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", model,
        *(["--dataset-name", "custom", "--dataset-path", dataset_path, "--skip-chat-template",
           "--custom-output-len", "-1"]  # -1: each line's output_tokens (default: 256 for all)
          if dataset_path else
          ["--dataset-name", "random", "--random-input-len", str(profile.input_len),
           "--random-output-len", str(profile.output_len), "--random-range-ratio", "0"]),
        *(["--tokenizer", tokenizer] if tokenizer else []),
        "--num-prompts", str(profile.num_prompts), "--max-concurrency",
        str(profile.max_concurrency), "--request-rate", str(profile.request_rate),
        "--ignore-eos", "--seed", str(seed), "--temperature", str(profile.temperature),
        "--num-warmups", str(profile.warmups), "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-detailed",  # per-request ttfts and itls in the returned dict (no file written)
    ]
    args = parser.parse_args(argv)
    previous = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = api_key  # how vllm bench serve authenticates
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink) if quiet else contextlib.nullcontext():
            return main(args)
    finally:
        if previous is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = previous


def requests_of(result: dict[str, Any]) -> list[RequestResult]:
    """The per-request records of a ``run_vllm_bench`` result (``--save-detailed``) as ours,
    so that our summary can be computed from vLLM's own requests."""
    return [
        RequestResult(prompt_len=n_in, start_s=start, success=not err, output_tokens=n_out,
                      ttft_s=ttft, latency_s=lat, itl_s=tuple(itl), error=err)
        for n_in, n_out, ttft, itl, lat, start, err in zip(
            result["input_lens"], result["output_lens"], result["ttfts"], result["itls"],
            result["latencies"], result["start_times"], result["errors"], strict=True)
    ]
