"""The plan a study stores: one record and its versioned layout. Pure.

``StoredPlan`` is what every worker, resumed run and reader of a study takes from it: the
model, the search space's text, the profiles, objectives, SLOs, repeats, sampler and vLLM's
defaults. ``to_dict`` writes layout ``VERSION``; ``from_dict`` reads it and the unversioned
layout of earlier autotune (the same keys, without ``version``). ``study.plans`` is the only
code that puts it in a study or takes it out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.core.space.search_space import Value
from autotune.core.trial.objectives import Objective, parse_objective
from autotune.core.workload.profiles import WorkloadProfile, profile_from_dict
from autotune.errors import StudyError

VERSION = 1
# What must agree between `run`s that join one study (the budget and seed may change).
SHAPE_FIELDS = ("space_yaml", "tensor_parallel_size", "max_model_len", "profiles", "repeats",
                "slos", "objectives")


@dataclass(frozen=True)
class StoredPlan:
    """A study's plan as stored. ``space_yaml`` None: no worker can run it (an imported study)."""

    model: str
    space_path: str
    profiles: tuple[WorkloadProfile, ...]
    objectives: tuple[str, ...]  # PROFILE:METRIC:min|max
    defaults: Mapping[str, Value] = field(default_factory=dict)  # vLLM's, per parameter
    space_yaml: str | None = None
    tensor_parallel_size: int = 1
    max_model_len: int = 0
    repeats: int = 1
    slos: tuple[str, ...] = ()  # Slo keys
    seed: int | None = None
    sampler: str = "tpe"
    confirm: int = 0
    race: bool = False

    @property
    def runnable(self) -> bool:
        return self.space_yaml is not None

    def parsed_objectives(self) -> tuple[Objective, ...]:
        names = [p.name for p in self.profiles]
        return tuple(parse_objective(o, names) for o in self.objectives)

    def differences(self, other: StoredPlan) -> list[str]:
        """The shape fields in which ``other`` differs from this plan."""
        mine, theirs = self.to_dict(), other.to_dict()
        return [k for k in SHAPE_FIELDS if mine.get(k) != theirs.get(k)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": VERSION, "model": self.model, "space_path": self.space_path,
            "space_yaml": self.space_yaml, "tensor_parallel_size": self.tensor_parallel_size,
            "max_model_len": self.max_model_len,
            "profiles": [p.to_dict() for p in self.profiles],
            "objectives": list(self.objectives), "repeats": self.repeats,
            "slos": list(self.slos), "seed": self.seed, "sampler": self.sampler,
            "confirm": self.confirm, "race": self.race, "defaults": dict(self.defaults),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> StoredPlan:
        version = data.get("version", VERSION)
        if version != VERSION:
            raise StudyError(f"{where}: stored plan layout {version} is newer than this autotune "
                             f"reads ({VERSION}); upgrade autotune")
        try:
            return cls(
                model=str(data["model"]), space_path=str(data.get("space_path", "?")),
                profiles=tuple(profile_from_dict(p["name"], p, where) for p in data["profiles"]),
                objectives=tuple(data.get("objectives", ())),
                defaults=dict(data.get("defaults", {})), space_yaml=data.get("space_yaml"),
                tensor_parallel_size=int(data.get("tensor_parallel_size", 1)),
                max_model_len=int(data.get("max_model_len", 0)),
                repeats=int(data.get("repeats", 1)), slos=tuple(data.get("slos", ())),
                seed=data.get("seed"), sampler=str(data.get("sampler", "tpe")),
                confirm=int(data.get("confirm", 0)), race=bool(data.get("race", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StudyError(f"{where}: the stored plan is damaged ({type(exc).__name__}: {exc})"
                             ) from None
