"""Record every configuration of a search space as a study, then export it as a table.

The table that `benchmarks/sampler_efficiency.py` replays is measured with the study's own
protocol: `autotune run` deploys each configuration (enqueued as a reference config, so every
one is a real trial with validation, health check, warm-up, repeats and teardown) and the study
is then exported to CSV.

    python benchmarks/record_table.py grid benchmarks/data/cpu-table/grid.yaml
    .venv/bin/autotune run --profile low-concurrency --profile high-concurrency \\
        --references benchmarks/data/cpu-table/grid.yaml --seed-references --trials 192 \\
        --confirm 0 --num-prompts 16 --input-len 256 --output-len 64 \\
        --study cpu-table --storage sqlite:///studies/cpu-table.db
    python benchmarks/record_table.py export --study cpu-table \\
        --storage sqlite:///studies/cpu-table.db --out benchmarks/data/cpu-table/table.csv

Order of the grid: the configurations expected to serve first, the ones that only need
validation next, the ones expected to crash last (spread over the other parameters), so that a
session that runs out of time has measured what matters most; `export` says which
configurations were not reached.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.core.space.search_space import grid_points, params_key  # noqa: E402
from autotune.shell.bench.files import read_references, read_space  # noqa: E402

REFERENCES = ROOT / "search_spaces" / "references.yaml"


def grid(space_path: Path) -> list[dict]:
    """Every combination of the space's parameters, in measurement order (see the docstring)."""
    space = read_space(space_path)
    combos = grid_points(space)
    refs = read_references(REFERENCES, space)
    defaults = {p.name: p.default for p in space.parameters}
    ref_keys = [params_key({**defaults, **r.params}) for r in refs.configs]

    def block(params: dict) -> int:
        if params.get("yarn") is False:  # 81920 tokens over a 32768 native context: rejected
            return 1
        return 2 if params.get("expert_parallel") is True else 0  # EP segfaults on CPU

    blocks = [[p for p in combos if block(p) == b] for b in range(3)]
    # The crashing block: the reference study's configurations first, then the others
    # interleaved so that a cut-off still covers every level of the other parameters.
    first = sorted((p for p in blocks[2] if params_key(p) in ref_keys),
                   key=lambda p: ref_keys.index(params_key(p)))
    rest = [p for p in blocks[2] if params_key(p) not in ref_keys]
    step = len(rest) // 12 or 1
    crash = first + [p for start in range(step) for p in rest[start::step]]
    return blocks[0] + blocks[1] + crash


def config_name(params: dict) -> str:
    short = {True: "1", False: "0"}
    return "-".join(f"{k}={short.get(v, v)}" for k, v in params.items())


def write_grid(space_path: Path, out: Path) -> None:
    configs = [{"name": config_name(p), "params": p} for p in grid(space_path)]
    text = (f"# Every combination of {space_path.name}, in measurement order "
            "(benchmarks/record_table.py grid).\n"
            + yaml.safe_dump({"space": space_path.name, "configs": configs},
                             sort_keys=False, width=200))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"{out}: {len(configs)} configurations")


def export(study_name: str, storage: str, out: Path, space_path: Path) -> None:
    """The study as a recorded table (CSV) and its model's config.json beside it, which a
    replay needs to map configurations to the same flags."""

    import optuna

    from autotune.core.analysis.table import NOT_REACHED, SERVED, table_from_outcomes, to_csv
    from autotune.study.store.records import outcomes
    from autotune.study.store.state import read_plan
    from autotune.study.store.storage import open_existing

    study = optuna.load_study(study_name=study_name, storage=open_existing(storage))
    plan = read_plan(study)
    found = outcomes(study)
    served = [t for t in found if t.served]
    profiles = [p.name for p in plan.profiles]
    workload = "; ".join(
        f"{p.name}: {p.num_prompts} requests of {p.input_len} in / {p.output_len} out"
        f" at concurrency {p.max_concurrency}, {p.warmups} warm-up" for p in plan.profiles)
    header = {
        "study": f"{study_name} (autotune run, one deployment per configuration)",
        "protocol": f"{workload}; {plan.repeats} runs per profile per deployment; "
                    f"TP {plan.tp}, max model len {plan.max_model_len}",
        "model": plan.model,
        "machine": served[0].hardware if served else "",
        "vllm": served[0].vllm_version if served else "",
        "recorded": (f"trials {min(t.number for t in found)}-{max(t.number for t in found)}, "
                     f"{sum((t.trial_wall_s or 0) for t in found) / 3600:.2f} h of deployments"),
    }
    space = read_space(space_path)
    table = table_from_outcomes(found, space.names, profiles, header, grid(space_path))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_csv(table))
    config = Path(str(plan.model)) / "config.json"
    (out.parent / "model-config.json").write_text(config.read_text())
    counts = {s: table.count(s) for s in dict.fromkeys(r.status for r in table.rows)}
    print(f"{out}: {len(table.rows)} configurations: "
          + ", ".join(f"{n} {s}" for s, n in counts.items()))
    if counts.get(NOT_REACHED):
        print(f"{counts[NOT_REACHED]} configurations were not reached; {counts.get(SERVED, 0)} served")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grid", help="write every combination as a references file")
    g.add_argument("out", type=Path)
    g.add_argument("--space", type=Path, default=ROOT / "search_spaces" / "reference.yaml")
    e = sub.add_parser("export", help="write a recorded study as a table (CSV)")
    e.add_argument("--study", required=True)
    e.add_argument("--storage", required=True)
    e.add_argument("--out", type=Path, required=True)
    e.add_argument("--space", type=Path, default=ROOT / "search_spaces" / "reference.yaml")
    args = parser.parse_args(argv)
    if args.command == "grid":
        write_grid(args.space, args.out)
    else:
        export(args.study, args.storage, args.out, args.space)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
