"""How long a run is under the balanced stop, against the old 1.25% target (issue #40 item 4).

For each case (a GPU run without MTP, one with MTP, a CPU run, all at the low-concurrency
profile: concurrency 2, floor 10, ceiling 100) it prints the requests and benchmark seconds of
one run before (the 1.25% target: (t x sigma_w / 0.0125)^2 requests) and after (the balanced
n* = sigma_w / sigma_b x sqrt(C_d / c_r)), both rounded up to whole waves and held between the
floor and the ceiling, at sigma_b 0.6%, 1%, 3% and the platform's assumed spread
(``platforms.Platform.between_log_sd``), with the standard deviation of one deployment's mean,
sqrt(sigma_b^2 + sigma_w^2 / n), that each length leaves.

sigma_w (per-request E2EL spread) and c_r (seconds per request at concurrency 2) of the GPU
cases come from the stored H200 studies (``benchmarks/data/h200-mtp/autotune.db``: each run's
``std_e2el_ms / mean_e2el_ms`` and ``duration / completed``); where that file is missing, the
values it gave are used and said to be assumed. The CPU case's are derived from the main job's
replay in docs/precision.md (14 requests to 5%, 83 to 2.5%: sigma_w about 10%) and its mean
E2EL of about 0.85 s at concurrency 2.

    .venv/bin/python benchmarks/balanced_length.py
"""

from __future__ import annotations

import json
import math
import sqlite3
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.core.maths.platforms import PLATFORMS  # noqa: E402
from autotune.core.maths.stats import t_quantile  # noqa: E402
from autotune.core.trial.precision import Balance, StopRule  # noqa: E402

STORED = ROOT / "benchmarks" / "data" / "h200-mtp" / "autotune.db"
PROFILE = "low-concurrency"
CONCURRENCY, CEILING = 2, 100
FLOOR = StopRule(0.01).floor(CONCURRENCY)
OLD_TARGET = 0.0125
SPREADS = (0.006, 0.01, 0.03)


@dataclass(frozen=True)
class Case:
    name: str
    within_sd: float  # sigma_w: per-request relative spread of E2EL
    request_s: float  # c_r: seconds per request at the profile's concurrency
    platform: str
    source: str


def stored_runs(path: Path) -> list[tuple[bool, float, float]]:
    """(MTP on, sigma_w, c_r) of every low-concurrency run of the stored GPU studies."""
    runs = []
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
        rows = db.execute("select a.trial_id, a.key, a.value_json from trial_user_attributes a "
                          "where a.key in ('argv', 'repeats')").fetchall()
    by_trial: dict[int, dict[str, object]] = {}
    for trial, key, value in rows:
        by_trial.setdefault(trial, {})[key] = json.loads(value)
    for attrs in by_trial.values():
        mtp = "--speculative-config" in attrs.get("argv", [])  # type: ignore[operator]
        for run in attrs.get("repeats", {}).get(PROFILE, []):  # type: ignore[union-attr]
            runs.append((mtp, run["std_e2el_ms"] / run["mean_e2el_ms"],
                         run["duration"] / run["completed"]))
    return runs


def cases() -> list[Case]:
    cpu = Case("CPU, 2 cores (main job)", 0.10, 0.42, "cpu", "assumed: docs/precision.md replay")
    if not STORED.is_file():
        return [Case("GPU, no MTP", 0.005, 0.72, "gpu", "assumed (H200 runs, file missing)"),
                Case("GPU, MTP", 0.13, 0.77, "gpu", "assumed (H200 runs, file missing)"), cpu]
    runs = stored_runs(STORED)
    out = []
    for mtp, name in ((False, "GPU, no MTP"), (True, "GPU, MTP")):
        mine = [r for r in runs if r[0] == mtp]
        sds = sorted(r[1] for r in mine)
        # Without MTP one slow request in a deployment's first run lifts its spread to 11-13%:
        # the balance sees it and runs longer; the table takes the typical (median-low) run.
        sd = min(sds) if not mtp else statistics.median(sds)
        out.append(Case(name, sd, statistics.median(r[2] for r in mine), "gpu",
                        f"H200 runs {', '.join(f'{s:.1%}' for s in sds)}"))
    return [*out, cpu]


def whole(n: float) -> int:
    """Requests a run sends for a count n: whole waves, between the floor and the ceiling."""
    if math.isinf(n):
        return CEILING
    return min(CEILING, max(FLOOR, math.ceil(n / CONCURRENCY) * CONCURRENCY))


def old_requests(within_sd: float) -> int:
    """The 1.25% target's run: the fewest n whose t x sigma_w / sqrt(n) is within it."""
    n = FLOOR
    while n < CEILING and t_quantile(n - 1) * within_sd / math.sqrt(n) > OLD_TARGET:
        n += CONCURRENCY
    return whole(n)


def deployment_sd(between: float, within: float, n: int) -> float:
    return math.sqrt(between**2 + within**2 / n)


def table() -> list[str]:
    lines = [f"concurrency {CONCURRENCY}, floor {FLOOR}, ceiling {CEILING}; C_d "
             f"{PLATFORMS['gpu'].redeploy_s:.0f} s (GPU), {PLATFORMS['cpu'].redeploy_s:.0f} s (CPU)", "",
             "| case | sigma_w | c_r | before (1.25%) | sigma_b | n* | after "
             "| sd of a deployment's mean, before -> after |",
             "|---|---|---|---|---|---|---|---|"]
    for case in cases():
        before = old_requests(case.within_sd)
        prior = PLATFORMS[case.platform].between_log_sd
        for between in dict.fromkeys((*SPREADS, prior)):
            balance = Balance(between, PLATFORMS[case.platform].redeploy_s)
            n_star = balance.requests(case.within_sd, case.request_s)
            after = whole(n_star)
            mark = " (prior)" if between == prior else ""
            lines.append(
                f"| {case.name} | {case.within_sd:.1%} | {case.request_s:.2f} s | {before} req, "
                f"{before * case.request_s:.0f} s | {between:.1%}{mark} | {n_star:.0f} | {after} req, "
                f"{after * case.request_s:.0f} s | {deployment_sd(between, case.within_sd, before):.2%}"
                f" -> {deployment_sd(between, case.within_sd, after):.2%} |")
    lines += ["", "sigma_w sources: " + "; ".join(f"{c.name}: {c.source}" for c in cases())]
    return lines


if __name__ == "__main__":
    print("\n".join(table()))
