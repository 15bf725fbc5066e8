"""How many bootstrap resamples the importance test needs: for seeds 0-19, whether the
strong-effect test's assertions (tests/study/test_importance.py: MTP ranks first, its low band
above the null parameter's high band, the null one under 0.1) hold with each number of
resamples, and the CPU it costs (docs/testing.md, the fast suite after #48, the lead's round).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/experiments/importance_resamples.py 20 8 4
"""
import sys
import time
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "study")]
from test_importance import LATENCY, THROUGHPUT, study_and_data  # noqa: E402

from autotune.study.output.report_data import importances  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)


def holds(rounds: int, seed: int) -> bool:
    study, data = study_and_data(12, seed)
    found = importances(study.get_trials(), study.directions, data, rounds)
    ok = set(found) == {LATENCY.name, THROUGHPUT.name}
    for per in found.values():
        (_, low, _), (null, _, null_high) = per["mtp"], per["expert_parallel"]
        ok &= max(per, key=lambda p: per[p][0]) == "mtp" and low > null_high and null < 0.1
    return ok


print(f"{'resamples':>9}  {'holds (seeds 0-19)':>18}  {'CPU s':>6}")
for rounds in (int(a) for a in sys.argv[1:] or ("20", "8")):
    t0 = time.process_time()
    count = sum(holds(rounds, seed) for seed in range(20))
    print(f"{rounds:>9}  {count:>15}/20  {time.process_time() - t0:>6.1f}")
