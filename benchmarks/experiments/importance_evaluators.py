"""fANOVA against PED-ANOVA on synthetic two-objective studies with a known strong and a null
parameter (the reference space's kinds: categorical and bool), at 8..40 trials; prints per
evaluator how often the strong parameter ranks first / the null one gets under 0.1
(docs/startup.md, "Ours in it"). Each cell pools both objectives of each seed's study.

    .venv/bin/python benchmarks/experiments/importance_evaluators.py tpe 40    # sampler, seeds
"""
import collections
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import optuna

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from autotune.study.run.samplers import make_sampler  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.simplefilter("ignore")

SPACE = {"optimization_level": [0, 1, 2, 3],
         "performance_mode": ["throughput", "balanced", "interactivity"],
         "expert_parallel": [False, True], "yarn": [False, True], "mtp": [False, True]}

def truth(scn, p):
    """(latency factor, throughput factor) of a configuration."""
    lat = thr = 1.0
    # small real effects of the others
    lat *= {0: 1.08, 1: 1.02, 2: 1.0, 3: 1.0}[p["optimization_level"]] if scn != "B" else 1.0
    lat *= 1.03 if p["yarn"] else 1.0
    thr *= 0.97 if p["yarn"] else 1.0
    if scn == "A":  # strong bool mtp, null expert_parallel
        lat *= 0.7 if p["mtp"] else 1.0
        thr *= 1.3 if p["mtp"] else 1.0
        lat *= {"throughput": 1.04, "balanced": 1.0, "interactivity": 0.97}[p["performance_mode"]]
    else:  # B: strong categorical optimization_level, null performance_mode
        lat *= 1.5 if p["optimization_level"] == 0 else 1.0
        thr *= 0.67 if p["optimization_level"] == 0 else 1.0
        lat *= 0.95 if p["mtp"] else 1.0
        lat *= 1.02 if p["expert_parallel"] else 1.0
    return lat, thr

STRONG = {"A": "mtp", "B": "optimization_level"}
NULL = {"A": "expert_parallel", "B": "performance_mode"}

def study_of(scn, n, seed, sampler):
    rng = np.random.default_rng(seed + 1000)
    st = optuna.create_study(directions=["minimize", "maximize"],
                             sampler=make_sampler(seed, sampler))
    def obj(t):
        p = {k: t.suggest_categorical(k, v) for k, v in SPACE.items()}
        lat, thr = truth(scn, p)
        latency = 100 * lat * math.exp(rng.normal(0, 0.03))
        return latency, 1000 * thr * math.exp(rng.normal(0, 0.03))
    st.optimize(obj, n_trials=n)
    return st

def evaluators(n):
    yield "fanova", optuna.importance.FanovaImportanceEvaluator(seed=0)
    for q in (0.1, 0.25, 0.5):
        yield f"ped q={q}", optuna.importance.PedAnovaImportanceEvaluator(target_quantile=q)

def main(sampler, seeds):
    rows = []
    for scn in "AB":
        for n in (8, 12, 16, 24, 40):
            for seed in range(seeds):
                st = study_of(scn, n, seed, sampler)
                for i, sign in ((0, 1), (1, -1)):
                    for name, ev in evaluators(n):
                        t0 = time.perf_counter()
                        imp = optuna.importance.get_param_importances(
                            st, evaluator=ev, target=lambda t, i=i, sign=sign: sign * t.values[i])
                        dt = time.perf_counter() - t0
                        top = max(imp, key=imp.get)
                        rows.append(dict(scn=scn, n=n, seed=seed, obj=i, ev=name,
                                         first=top == STRONG[scn], strong=imp[STRONG[scn]],
                                         null=imp[NULL[scn]], s=dt))
    cells = collections.defaultdict(list)
    for r in rows:
        cells[(r["scn"], r["ev"], r["n"])].append(r)
    print("| strong effect | evaluator | trials | strong first % | null under 0.1 % |")
    print("|---|---|---|---|---|")
    for (scn, name, n), rs in sorted(cells.items()):
        print(f"| {STRONG[scn]} | {name} | {n} | {100 * np.mean([r['first'] for r in rs]):.0f} | "
              f"{100 * np.mean([r['null'] < 0.1 for r in rs]):.0f} |")

if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
