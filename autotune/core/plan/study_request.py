"""What a study was asked to do: one record from `run`'s flags to the study's storage and back,
and its versioned layout. Pure. ``StudyRequest`` is what `run` asks for, what the study stores
(``to_dict``, ``VERSION``) and what every worker, resumed run and reader takes back
(``from_dict``: layouts 3, 2 (without fixed flags) and 1). Facts derived from it are computed,
never stored beside it; only ``study.store.state`` puts it in a study or takes it out."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.core.analysis.recommendation import SMALLEST_DIFFERENCE
from autotune.core.space.search_space import Value
from autotune.core.space.space_yaml import parse_space
from autotune.core.trial.objectives import Objective, parse_objective
from autotune.core.workload.profiles import WorkloadProfile, profile_from_dict
from autotune.errors import ConfigError, StudyError

VERSION = 3  # 3: fixed_flags (a baseline's flags that no parameter tunes)
OLD_REPEATS = 2  # the default --repeats before #35: a stored plan without the field had it
OLD_PRECISION = 0.0  # before #35 every run sent its num_prompts
DEFAULT_SPACE = "search_spaces/reference.yaml"
DEFAULT_REFERENCES = "search_spaces/references.yaml"
SAMPLERS = ("tpe", "random", "nsga2", "gp")  # the factory: study.run.samplers; tpe the default
# What must agree between `run`s that join one study (the budget and seed may change).
SHAPE_FIELDS = ("space_yaml", "tp", "max_model_len", "profiles", "repeats", "slos", "objectives",
                "cap_cuda_graphs", "precision", "fixed_flags")
# Where this node runs the study: another node has its own, so none is stored. The references
# are enqueued once, by the `run` that creates the study (its baseline is in the study's state).
# The baseline is resolved and enqueued once by that `run` too, and stored as its own record.
LOCAL_FIELDS = ("workdir", "storage", "study_name", "references_path", "baseline",
                "baseline_references", "exploration")
# Layout 1 kept the budget and time budget as attributes of their own, beside the plan.
LAYOUT1_BUDGET, LAYOUT1_TIME_BUDGET = "budget", "time_budget"


@functools.lru_cache(maxsize=32)
def _defaults(space_yaml: str, space_path: str) -> tuple[tuple[str, Value], ...]:
    """vLLM's defaults of a stored space, parsed once per text: each read of a study's data
    asks for them (5.5 ms of pure-Python YAML a parse); a tuple, so no caller can change it."""
    return tuple((p.name, p.default) for p in parse_space(space_yaml, space_path).parameters)


@dataclass(frozen=True)
class StudyRequest:
    """What a study is asked to do. From `run`'s flags some fields are open (no model: the
    generated one; no objectives: the default pair); the plan built from it fills them in, and
    that is what the study stores, so that a rebuild from it gives the same plan."""

    profiles: tuple[WorkloadProfile, ...]
    model: str | None = None  # None: the generated model (CPU build only)
    space_path: str = DEFAULT_SPACE
    space_yaml: str | None = None  # the space's text; given, space_path is not read
    trials: int = 10  # the study-wide budget of finished trials that workers run to
    # Runs per profile per deployment. 1: repeats on one deployment do not see the spread
    # between deployments that a trial's interval needs (docs/noise.md); a stored plan keeps its own.
    repeats: int = 1
    seed: int | None = None
    sampler: str = "tpe"
    objectives: tuple[str, ...] = ()  # PROFILE:METRIC[:min|max]; empty: the default pair
    slos: tuple[str, ...] = ()  # Slo keys
    tp: int | None = None  # None: the space's tensor parallel size
    max_model_len: int | None = None  # None: the space's, else the model's native context
    confirm: int = 3  # front members confirmed at the end (0: off)
    # Stop measuring a trial once the front beats it beyond the noise. Off by default: on the
    # recorded CPU table it saved no device time (docs "Time to an answer").
    race: bool = False
    time_budget_s: float | None = None  # wall clock of the study's trials, confirmation included
    startup_timeout_s: float = 600.0  # a deployment not ready by then fails as startup_timeout
    cap_cuda_graphs: bool = False  # capture only up to the study's load (core.deployment.graph_cap)
    # The difference a tie's cost is stated for (`run --smallest-difference`; note and report).
    smallest_difference: float = SMALLEST_DIFFERENCE
    # Where a fixed profile's run stops (core.trial.precision). None: the balanced length
    # (stored as None); > 0: once its 95% intervals are within this fraction of the value
    # (`--precision`, stored); 0: every run sends num_prompts.
    precision: float | None = None
    imported_from: str | None = None  # results imported from this file: no worker can run it
    # Right after the baseline is served, deploy it once more: the study's first measurement of
    # the spread between deployments (docs/noise.md), where none is inherited and time allows.
    # Off by default since issue #46: the replay found it does not pay for itself (docs/answers.md);
    # the noise is inherited from the storage's studies or assumed, and learned from confirmations.
    calibrate: bool = False
    # The flags of the user's own deployment (`run --baseline`) that no parameter of the space
    # tunes, as argv: every trial deploys with them, and every export carries them. Filled in
    # from --baseline by the plan, stored, and read back by every worker and reading command.
    fixed_flags: tuple[str, ...] = ()
    workdir: Path = Path(".")  # LOCAL_FIELDS from here on
    storage: str | None = None  # None: $AUTOTUNE_STORAGE, else the workdir's SQLite file
    study_name: str | None = None
    references_path: str | None = None  # given: its references are enqueued after the baseline
    # What the user runs today, measured first (`run --baseline`: "vllm-defaults", a reference
    # name, an exported flags file or a flag string); None: no baseline trial (replays, tests).
    baseline: str | None = None
    baseline_references: str | None = None  # where a reference name given as --baseline is found
    # What the study measures first after the baseline (`run --exploration`, core.space.exploration):
    # "order": the single changes a prior expects to help, then the sampler; "sampler": the
    # sampler from the start. Enqueued once, like the references.
    exploration: str = "order"

    @property
    def runnable(self) -> bool:
        return self.imported_from is None and self.space_yaml is not None

    @property
    def balanced(self) -> bool:
        """Whether runs stop at the balanced length (no precision target given)."""
        return self.precision is None

    @property
    def defaults(self) -> dict[str, Value]:
        """vLLM's default of each parameter of the space (none without the space's text)."""
        if self.space_yaml is None:
            return {}
        return dict(_defaults(self.space_yaml, self.space_path))

    def parsed_objectives(self) -> tuple[Objective, ...]:
        names = [p.name for p in self.profiles]
        return tuple(parse_objective(o, names) for o in self.objectives)

    def differences(self, other: StudyRequest) -> list[str]:
        """The shape fields in which ``other`` (a `run` joining this stored plan) differs from
        it. A run that gives no ``--precision`` joins whatever this plan stored (a study stored
        with the old default target, 0.0125, resumes), and goes on at the balanced length."""
        mine, theirs = self.to_dict(), other.to_dict()
        return [k for k in SHAPE_FIELDS if mine.get(k) != theirs.get(k)
                and not (k == "precision" and other.precision is None)]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": VERSION}
        for f in dataclasses.fields(self):
            if f.name not in LOCAL_FIELDS:
                value = getattr(self, f.name)
                out[f.name] = ([p.to_dict() for p in value] if f.name == "profiles" else
                               list(value) if isinstance(value, tuple) else value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str, *,
                  beside: Mapping[str, Any] | None = None) -> StudyRequest:
        """The plan a study stored; ``beside``: the study's other attributes, where layout 1
        kept the budget. A layout this autotune does not know, or a plan that is not one, is a
        one-line StudyError."""
        version = data.get("version", 1)
        if version not in (1, 2, VERSION):
            raise StudyError(f"{where}: stored plan layout {version!r} is not one this autotune "
                             f"reads (1 to {VERSION}); upgrade autotune")
        if version == 1:
            data = _from_layout1(data, beside or {})
        try:
            given = {k: _checked(k, v) for k, v in data.items() if k in _STORED}
            given.setdefault("repeats", OLD_REPEATS)
            given.setdefault("precision", OLD_PRECISION)
            profiles = tuple(profile_from_dict(p["name"], p, where) for p in data["profiles"])
            return cls(**{**given, "model": str(data["model"]), "profiles": profiles})
        except (ConfigError, KeyError, TypeError, ValueError) as exc:
            raise StudyError(f"{where}: the stored plan is damaged ({type(exc).__name__}: {exc}); "
                             "start another --study") from None


_TYPES = {"int": int, "float": (int, float), "str": str, "bool": bool, "None": type(None)}
_STORED = {f.name: f.type for f in dataclasses.fields(StudyRequest)
           if f.name not in (*LOCAL_FIELDS, "profiles", "model")}


def _checked(name: str, value: Any) -> Any:
    """A stored value of the field ``name``, checked against the field's type."""
    kind = str(_STORED[name])
    if kind.startswith("tuple["):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"{name} must be a list of strings, got {value!r}")
        return tuple(value)
    kinds = [_TYPES[part] for part in kind.split(" | ")]
    flat = tuple(t for k in kinds for t in (k if isinstance(k, tuple) else (k,)))
    if not isinstance(value, flat) or (isinstance(value, bool) and bool not in flat):
        raise TypeError(f"{name} must be {kind}, got {value!r}")
    return value


def _from_layout1(data: Mapping[str, Any], beside: Mapping[str, Any]) -> dict[str, Any]:
    """Layout 1 (before the budget, time budget and start-up timeout were part of the plan):
    ``tensor_parallel_size`` for ``tp``, vLLM's defaults stored (now read from the space), an
    imported study marked by having no space text, and a profile without a dataset sending
    random token ids (text is the default since)."""
    out = {k: v for k, v in data.items() if k not in ("version", "tensor_parallel_size", "defaults")}
    if isinstance(data.get("profiles"), list):
        out["profiles"] = [{"token_ids": True, **p} if isinstance(p, Mapping) and not p.get("dataset")
                           else p for p in data["profiles"]]
    out["tp"] = data.get("tensor_parallel_size", 1)
    if data.get("space_yaml") is None:
        out["imported_from"] = str(data.get("model", "?"))
    if LAYOUT1_BUDGET in beside:
        out["trials"] = beside[LAYOUT1_BUDGET]
    budget = beside.get(LAYOUT1_TIME_BUDGET)
    out["time_budget_s"] = float(budget["seconds"]) if isinstance(budget, Mapping) else None
    return out
