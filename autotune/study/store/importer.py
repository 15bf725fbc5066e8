"""`autotune import-results`: externally measured results as completed trials of a study.
Rows are CSV or JSON under vLLM's metric keys, grouped by configuration; one with every
objective's metric becomes a trial. Each number counts as one measurement (a file gives no
repeats), so its intervals use the study's assumed noise; launch flags, and so an export, need
the model the results were measured with. The rows in full: docs/studies.md#import."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from autotune.core.deployment.flags import to_argv
from autotune.core.metrics.registry import METRICS, Source
from autotune.core.plan.study_request import StudyRequest
from autotune.core.space.search_space import (
    ModelContext,
    Parameter,
    ReferenceSet,
    SearchSpace,
    complete,
    params_key,
)
from autotune.core.trial.objectives import (
    Objective,
    default_objectives,
    objective_values,
    parse_objective,
)
from autotune.core.trial.outcome import ProfileResult, TrialOutcome
from autotune.core.trial.sampler_feedback import FEASIBLE
from autotune.core.workload.profiles import WorkloadProfile, get_profile
from autotune.errors import ConfigError
from autotune.shell.bench.files import locate_shipped, read_references
from autotune.study.store.records import write_outcome
from autotune.study.store.state import mark_references, write_plan
from autotune.study.store.storage import check_url

# Every measured metric a row may give (the registry's; a capacity load is searched, not given).
NUMERIC = tuple(k for k, m in METRICS.items() if m.source is not Source.SEARCH)


def distribution(p: Parameter) -> BaseDistribution:
    if p.type == "bool":
        return CategoricalDistribution([False, True])
    if p.type == "categorical":
        return CategoricalDistribution(list(p.choices))
    assert p.low is not None and p.high is not None
    if p.type == "int":
        return IntDistribution(int(p.low), int(p.high), log=p.log, step=int(p.step or 1))
    return FloatDistribution(p.low, p.high, log=p.log, step=p.step)


def _read_rows(path: Path) -> list[dict]:
    if path.suffix not in (".csv", ".json"):
        raise ConfigError(f"{path}: expected a .csv or .json file")
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    if path.suffix == ".json":
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: invalid JSON: {exc}") from exc
        if not isinstance(rows, list):
            raise ConfigError(f"{path}: expected a JSON list of rows")
        return rows
    return list(csv.DictReader(text.splitlines()))


@dataclass(frozen=True)
class ImportedConfig:
    name: str
    params: dict
    metrics: dict[str, dict[str, float]]
    derived: list[str]


def _params_for(row: dict, space: SearchSpace, refs: ReferenceSet | None, where: str) -> tuple[str, dict]:
    by_name = {r.name: r for r in refs.configs} if refs else {}
    ref = row.get("reference")
    given: dict = {}
    if ref:
        if ref not in by_name:
            raise ConfigError(f"{where}: reference {ref!r} is not in the references file; "
                              f"valid: {', '.join(by_name) or 'none (pass --references)'}")
        given = dict(by_name[ref].params)
    for p in space.parameters:
        if p.name in row and row[p.name] not in ("", None):
            value = row[p.name]
            if isinstance(value, str) and p.type != "categorical":
                value = {"true": True, "false": False}.get(value.lower(), value)
                value = value if isinstance(value, bool) else float(value)
            elif isinstance(value, str):
                value = next((c for c in p.choices if str(c) == value), value)
            if not p.contains(value):
                raise ConfigError(f"{where}: value {value!r} of {p.name!r} is outside the space")
            given[p.name] = value
    return ref or params_key(given), complete(space, None, given)


def read_results(path: Path, space: SearchSpace, refs: ReferenceSet | None,
                 profiles: tuple[WorkloadProfile, ...], objectives: tuple[Objective, ...]
                 ) -> tuple[list[ImportedConfig], list[str]]:
    """Configurations with complete objectives, and a message per skipped configuration."""
    grouped: dict[str, dict] = {}
    metrics: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for i, row in enumerate(_read_rows(path), start=2):
        where = f"{path}: row {i}"
        profile = row.get("profile")
        if not profile:
            raise ConfigError(f"{where}: needs a 'profile' column")
        name, params = _params_for(row, space, refs, where)
        grouped[name] = params
        values = {}
        for key in NUMERIC:
            raw = row.get(key)
            if raw not in ("", None):
                try:
                    values[key] = float(raw)
                except ValueError:
                    raise ConfigError(f"{where}: {key} must be a number, got {raw!r}") from None
        metrics[name][profile] = values
    configs, skipped = [], []
    for name, params in grouped.items():
        derived = []
        for profile in profiles:
            m = metrics[name].get(profile.name, {})
            if "output_throughput" not in m and "request_throughput" in m:
                m["output_throughput"] = m["request_throughput"] * profile.output_len
                derived.append(f"{profile.name}:output_throughput")
        missing = [o.name for o in objectives if o.metric not in metrics[name].get(o.profile, {})]
        if missing:
            skipped.append(f"{name}: skipped, {', '.join(missing)} not given")
            continue
        configs.append(ImportedConfig(name, params, {p.name: metrics[name][p.name] for p in profiles
                                                     if p.name in metrics[name]}, derived))
    return configs, skipped


@dataclass(frozen=True)
class ImportedFile:
    """A results file read and checked against the space, its references, the profiles and
    the objectives: what ``import_results`` stores."""

    path: Path
    space: SearchSpace
    refs: ReferenceSet
    profiles: tuple[WorkloadProfile, ...]
    objectives: tuple[Objective, ...]
    configs: list[ImportedConfig]
    skipped: list[str]  # a message per configuration left out


def read_import(path: Path, space: SearchSpace, *, references: str, profiles: Sequence[str],
                objectives: Sequence[str], storage: str, workdir: Path) -> ImportedFile:
    """`import-results`' flags read: every row is read and checked (and the storage's URL)
    before anything is created."""
    refs = read_references(locate_shipped(references), space)
    chosen = tuple(get_profile(n) for n in profiles)
    parsed = tuple(parse_objective(o, list(profiles)) for o in objectives) or default_objectives(chosen)
    check_url(storage, created_folder=workdir)
    configs, skipped = read_results(path, space, refs, chosen, parsed)
    return ImportedFile(path, space, refs, chosen, parsed, configs, skipped)


def import_results(study_name: str, storage: str, imported: ImportedFile, *,
                   ctx: ModelContext | None = None) -> optuna.Study:
    """Add the configurations of ``imported`` as COMPLETE, feasible trials of the study
    (created with its objectives when new); with the model they were measured on (``ctx``),
    each with its launch flags."""
    path, space, refs = imported.path, imported.space, imported.refs
    profiles, objectives, configs = imported.profiles, imported.objectives, imported.configs
    names = [o.name for o in objectives]
    study = optuna.create_study(study_name=study_name, storage=storage,
                                directions=[o.direction for o in objectives], load_if_exists=True)
    if study.metric_names is None:
        study.set_metric_names(names)
    elif study.metric_names != names:
        raise ConfigError(f"--study {study_name!r} has objectives {study.metric_names}; "
                          f"the import asks for {names}")
    dists = {p.name: distribution(p) for p in space.parameters}
    for cfg in configs:
        study.enqueue_trial(cfg.params)
        trial = study.ask({k: dists[k] for k in cfg.params})
        write_outcome(trial, TrialOutcome(
            trial.number, params=cfg.params, reference=cfg.name, imported_from=str(path),
            derived=tuple(cfg.derived), model=ctx.model.name if ctx else "",
            argv=tuple(to_argv(space, ctx, cfg.params)) if ctx else (),
            results={p: ProfileResult(p, (m,)) for p, m in cfg.metrics.items()}))
        trial.set_constraint(FEASIBLE, 0.0)
        study.tell(trial, objective_values(objectives, cfg.metrics))
    if refs:
        mark_references(study, refs.baseline)
    write_plan(study, StudyRequest(  # imported_from: no worker can run it
        profiles=profiles, model=ctx.model.name if ctx else f"imported from {path.name}",
        max_model_len=ctx.max_model_len if ctx else None, space_path=space.path,
        space_yaml=space.text, objectives=tuple(f"{o.name}:{o.direction[:3]}" for o in objectives),
        repeats=1, confirm=0, imported_from=str(path)))
    return study
