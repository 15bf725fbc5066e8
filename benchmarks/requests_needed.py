"""How many requests does a run need to pin each metric? Replays stored per-request records.

Reads every ``requests-<profile>-<repeat>.jsonl`` artifact (one line per request, written by
each trial's runs: ``study/run/trial_function.py``) under the given paths (default: ``benchmarks/data``),
and for each metric and workload prints how many requests, sent in order, bring the metric's
95% interval within each precision: the same intervals the stop rule uses
(``core/trial/precision.py``: Student's t for a per-request mean, the ratio estimator for a
throughput and mean ITL, order statistics for a percentile). A count is the median over the
files of a workload; ``>N`` where the longest file never got there. The rule itself also waits
for a floor and for whole waves, so a run stops at or after the count shown.

A file's workload is its profile's name, or what ``--workload PROFILE=NAME`` calls it (e.g.
``--workload low-concurrency=fixed-lengths``). ``--synthetic`` replays generated records
instead (no vLLM needed): fixed lengths, ShareGPT-like lengths and a shared-prefix workload
(cache hits and misses), with spreads chosen for illustration, not measured.

    .venv/bin/python benchmarks/requests_needed.py --synthetic
    .venv/bin/python benchmarks/requests_needed.py WORKDIR/trials --workload low-concurrency=fixed
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.core.metrics.summary import RequestResult  # noqa: E402
from autotune.core.trial.precision import StopRule, half_width, request_from_line  # noqa: E402

METRICS = ("mean_e2el_ms", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "output_throughput",
           "median_ttft_ms", "p90_ttft_ms", "p99_e2el_ms")
PRECISIONS = (0.05, 0.025, 0.0125, 0.01)
FLOOR = StopRule(0.01).min_requests  # the rule's own floor: two lucky requests prove nothing


def needed(records: Sequence[RequestResult], metric: str, targets: Sequence[float]) -> list[int | None]:
    """Per target, the fewest requests (a prefix in send order, successes counted, at least
    the rule's floor) whose interval of ``metric`` is within it; None where all of them are
    not enough."""
    ok = [r for r in records if r.success]
    out: list[int | None] = [None] * len(targets)
    for n in range(FLOOR, len(ok) + 1):
        half = half_width(ok[:n], metric)
        for i, target in enumerate(targets):
            if out[i] is None and half <= target:
                out[i] = n
        if all(v is not None for v in out):
            break
    return out


def read_records(paths: Sequence[Path], names: dict[str, str]) -> dict[str, list[list[RequestResult]]]:
    """Every requests-*.jsonl under ``paths``, by workload (its profile's name or its alias)."""
    found: dict[str, list[list[RequestResult]]] = {}
    for root in paths:
        files = [root] if root.is_file() else sorted(root.rglob("requests-*.jsonl"))
        for path in files:
            profile = path.stem.removeprefix("requests-").rsplit("-", 1)[0]
            records = [request_from_line(json.loads(line))
                       for line in path.read_text().splitlines() if line.strip()]
            found.setdefault(names.get(profile, profile), []).append(records)
    return found


def _closed_loop(e2el_s: np.ndarray, ttft_s: np.ndarray, tokens: np.ndarray,
                 concurrency: int) -> list[RequestResult]:
    free = [0.0] * concurrency
    out = []
    for e2el, ttft, n in zip(e2el_s, ttft_s, tokens, strict=True):
        slot = int(np.argmin(free))
        start = free[slot] + 1e-6
        gap = (e2el - ttft) / max(int(n) - 1, 1)
        out.append(RequestResult(prompt_len=512, start_s=start, success=True,
                                 output_tokens=int(n), ttft_s=float(ttft), latency_s=float(e2el),
                                 itl_s=(float(gap),) * (int(n) - 1), done_s=start + e2el))
        free[slot] = start + e2el
    return out


def synthetic(seed: int, count: int, concurrency: int) -> dict[str, list[list[RequestResult]]]:
    """Three illustrative workloads, 3 runs each: fixed lengths (every request alike: E2EL
    spread 2%), ShareGPT-like (output lengths lognormal, sd 0.8 on the log scale: E2EL follows
    them), shared prefix (TTFT 20 ms on a cache hit, 120 ms on a miss, 80% hits)."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[list[RequestResult]]] = {}
    for _ in range(3):
        tokens = np.full(count, 128)
        tpot = rng.lognormal(math.log(0.010), 0.02, count)
        ttft = rng.lognormal(math.log(0.050), 0.10, count)
        out.setdefault("fixed lengths", []).append(
            _closed_loop(ttft + tpot * (tokens - 1), ttft, tokens, concurrency))
        tokens = np.clip(rng.lognormal(math.log(200), 0.8, count), 2, 2048).astype(int)
        out.setdefault("ShareGPT-like", []).append(
            _closed_loop(ttft + tpot * (tokens - 1), ttft, tokens, concurrency))
        tokens = np.full(count, 128)
        hit_ttft = np.where(rng.random(count) < 0.8, 0.020, 0.120) * rng.lognormal(0, 0.05, count)
        out.setdefault("shared prefix", []).append(
            _closed_loop(hit_ttft + tpot * (tokens - 1), hit_ttft, tokens, concurrency))
    return out


def table(workloads: dict[str, list[list[RequestResult]]], targets: Sequence[float]) -> str:
    head = ["workload", "metric", *(f"{t * 100:g}%" for t in targets)]
    rows = [head]
    for name, runs in workloads.items():
        longest = max(len(r) for r in runs)
        for metric in METRICS:
            per_run = [needed(r, metric, targets) for r in runs]
            cells = []
            for i in range(len(targets)):
                got = [n[i] for n in per_run]
                cells.append(f">{longest}" if any(g is None for g in got)
                             else str(int(statistics.median(g for g in got if g is not None))))
            rows.append([name, metric, *cells])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths, strict=True)))
                     for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", type=Path, help="files or folders of requests-*.jsonl "
                    "(default: benchmarks/data)")
    ap.add_argument("--workload", action="append", default=[], metavar="PROFILE=NAME",
                    help="call a profile's records NAME in the table (repeatable)")
    ap.add_argument("--precision", default=",".join(f"{p * 100:g}" for p in PRECISIONS),
                    help="targets in percent, comma separated (default 5,2.5,1.25,1)")
    ap.add_argument("--synthetic", action="store_true", help="replay generated records instead")
    ap.add_argument("--requests", type=int, default=1000, help="per synthetic run (default 1000)")
    ap.add_argument("--concurrency", type=int, default=4, help="of the synthetic runs (default 4)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    targets = [float(t) / 100 for t in args.precision.split(",")]
    if args.synthetic:
        workloads = synthetic(args.seed, args.requests, args.concurrency)
        print(f"synthetic records (illustrative spreads, not measured): {args.requests} requests "
              f"per run at concurrency {args.concurrency}, 3 runs per workload")
    else:
        names = dict(w.split("=", 1) for w in args.workload)
        workloads = read_records(args.paths or [ROOT / "benchmarks" / "data"], names)
        if not workloads:
            sys.exit("no requests-*.jsonl found; run a study (each trial writes them) or pass "
                     "--synthetic")
        print(f"stored records: {sum(len(r) for r in workloads.values())} runs")
    print("requests needed for the 95% interval to be within each precision (median of runs):")
    print(table(workloads, targets))


if __name__ == "__main__":
    main()
